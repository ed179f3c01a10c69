"""Sparse offset and time indexes of one log segment (Kafka's file formats).

``<base>.index``: 8-byte entries ``(relative offset uint32, file position uint32)``,
strictly increasing in both. ``<base>.timeindex``: 12-byte entries
``(timestamp int64, relative offset uint32)``, strictly increasing timestamps.

The entries live in memory (``array``) and are appended to the file through a
buffered writer; ``flush()`` makes them durable. An index is a cache of the log:
after an unclean shutdown the indexes of unflushed segments are rebuilt from
the log, and an index that fails its sanity check is rebuilt too. Only the
thread that owns the Log calls these methods.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from typing import BinaryIO

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


class CorruptIndexError(Exception):
    pass


class OffsetIndex:
    ENTRY_SIZE = 8

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.offsets = array("q")
        self.positions = array("q")
        self._file: BinaryIO | None = None

    def load(self) -> None:
        """Read the entries from disk; raise CorruptIndexError when they are not sane."""
        self.offsets = array("q")
        self.positions = array("q")
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                data = f.read()
            if len(data) % self.ENTRY_SIZE:
                raise CorruptIndexError(f"{self.path}: size {len(data)} is not a multiple of 8")
            last_off, last_pos = -1, -1
            for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
                off = self.base_offset + rel
                if off <= last_off or pos <= last_pos and last_pos >= 0:
                    raise CorruptIndexError(f"{self.path}: entries are not increasing")
                self.offsets.append(off)
                self.positions.append(pos)
                last_off, last_pos = off, pos

    def _writer(self) -> BinaryIO:
        if self._file is None:
            self._file = open(self.path, "ab")  # noqa: SIM115 - closed by close()
        return self._file

    def append(self, offset: int, position: int) -> None:
        if self.offsets and offset <= self.offsets[-1]:
            return
        self.offsets.append(offset)
        self.positions.append(position)
        self._writer().write(_OFFSET_ENTRY.pack(offset - self.base_offset, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest entry with offset <= ``offset``, or (base offset, 0)."""
        i = bisect_right(self.offsets, offset)
        if i == 0:
            return self.base_offset, 0
        return self.offsets[i - 1], self.positions[i - 1]

    def last_entry(self) -> tuple[int, int]:
        if not self.offsets:
            return self.base_offset, 0
        return self.offsets[-1], self.positions[-1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries with offset >= ``offset``."""
        i = bisect_right(self.offsets, offset - 1)
        if i == len(self.offsets):
            return
        del self.offsets[i:]
        del self.positions[i:]
        self.rewrite()

    def rewrite(self) -> None:
        self.close()
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(
                b"".join(
                    _OFFSET_ENTRY.pack(o - self.base_offset, p)
                    for o, p in zip(self.offsets, self.positions, strict=True)
                )
            )
        os.replace(tmp, self.path)

    def reset(self) -> None:
        self.offsets = array("q")
        self.positions = array("q")
        self.rewrite()

    def flush(self, fsync: bool = True) -> None:
        if self._file is not None:
            self._file.flush()
            if fsync:
                os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __len__(self) -> int:
        return len(self.offsets)


class TimeIndex:
    ENTRY_SIZE = 12

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.timestamps = array("q")
        self.offsets = array("q")
        self._file: BinaryIO | None = None

    def load(self) -> None:
        self.timestamps = array("q")
        self.offsets = array("q")
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                data = f.read()
            if len(data) % self.ENTRY_SIZE:
                raise CorruptIndexError(f"{self.path}: size {len(data)} is not a multiple of 12")
            for ts, rel in _TIME_ENTRY.iter_unpack(data):
                if self.timestamps and ts <= self.timestamps[-1]:
                    raise CorruptIndexError(f"{self.path}: timestamps are not increasing")
                self.timestamps.append(ts)
                self.offsets.append(self.base_offset + rel)

    def _writer(self) -> BinaryIO:
        if self._file is None:
            self._file = open(self.path, "ab")  # noqa: SIM115 - closed by close()
        return self._file

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self.timestamps.append(timestamp)
        self.offsets.append(offset)
        self._writer().write(_TIME_ENTRY.pack(timestamp, offset - self.base_offset))

    def lookup(self, timestamp: int) -> int:
        """Offset from which to scan for the first record with ts >= ``timestamp``.

        Entry (T, O) says every record before O has a timestamp <= T, so the
        scan may start at the offset of the last entry with T < timestamp.
        """
        i = bisect_right(self.timestamps, timestamp - 1)
        if i == 0:
            return self.base_offset
        return self.offsets[i - 1]

    def last_entry(self) -> tuple[int, int]:
        if not self.timestamps:
            return -1, self.base_offset
        return self.timestamps[-1], self.offsets[-1]

    def truncate_to(self, offset: int) -> None:
        keep = [i for i, o in enumerate(self.offsets) if o < offset]
        if len(keep) == len(self.offsets):
            return
        self.timestamps = array("q", [self.timestamps[i] for i in keep])
        self.offsets = array("q", [self.offsets[i] for i in keep])
        self.rewrite()

    def rewrite(self) -> None:
        self.close()
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(
                b"".join(
                    _TIME_ENTRY.pack(t, o - self.base_offset)
                    for t, o in zip(self.timestamps, self.offsets, strict=True)
                )
            )
        os.replace(tmp, self.path)

    def reset(self) -> None:
        self.timestamps = array("q")
        self.offsets = array("q")
        self.rewrite()

    def flush(self, fsync: bool = True) -> None:
        if self._file is not None:
            self._file.flush()
            if fsync:
                os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
