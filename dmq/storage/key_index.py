"""Key index of one log segment: which offsets hold records with a given key.

File ``<20-digit base offset>.keyindex`` beside a sealed segment (dmq's own
format; big-endian like Kafka's index files)::

    0   magic         8 bytes  b"dmqkeyix"
    8   version       uint32   1
    12  header crc    uint32   CRC32C of bytes [16, 64)
    16  base offset   int64    the segment's base offset
    24  log size      uint64   bytes of the segment's .log the entries describe
    32  next offset   int64    one past the segment's last offset
    40  entry count   uint64
    48  entries crc   uint32   CRC32C of the entries
    52  zero          12 bytes
    64  entries       uint64 each: key hash << 32 | (offset - base offset), ascending

One entry per record that has a key (control records have none in the index);
the key hash is CRC32C of the key. The entries of one key are contiguous and in
offset order, so a lookup bisects for them and reads the newest first. Every
record an entry points to is read and its key compared: a hash collision costs
a read, never a wrong answer.

A segment's index covers its log bytes ``[0, indexed_position)``: the file
(covering all of a sealed segment, or the first bytes of one whose in-memory
runs grew past a bound) and sorted in-memory runs of the same entries for the
bytes after it, that the background indexer (``key_indexer.py``) adds as it
reads the log. A query scans the bytes past
``indexed_position`` itself, and scans a whole segment whose index is missing,
stale, corrupt or ``unindexable`` (an offset too far from the base offset for
32 bits): an index is a cache of the log, and never the reason a record is
missed.

A file is trusted once its header matches the segment (base offset, and its
size and next offset, or for a file of its first bytes a batch of the segment
ending where the file ends, with the file's last offset) and its entries match
their CRC (``verify``); a stale or corrupt file is deleted and rebuilt. The Log
loads the headers when it opens, before anything is appended, so the bytes a
file describes are those it was written from. Files are written to ``.keyindex.tmp`` and renamed, without
fsync: a crash can lose one, never leave one that passes these checks wrongly.

Plain synchronous file code; the thread that owns the Log calls it.
"""

from __future__ import annotations

import heapq
import itertools
import os
import struct
import sys
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from crc32c import crc32c

from dmq.storage.index import CorruptIndexError

SUFFIX = ".keyindex"
MAGIC = b"dmqkeyix"
VERSION = 1
HEADER = struct.Struct(">8sII qQqQI 12x")
HEADER_SIZE = HEADER.size  # 64
ENTRY_SIZE = 8
OFFSET_MASK = 0xFFFFFFFF
MAX_RELATIVE_OFFSET = OFFSET_MASK
FENCE_EVERY = 1024  # entries per block; the first entry of each block is kept in memory
_BIG_ENDIAN_HOST = sys.byteorder == "big"


def key_hash(key: bytes) -> int:
    return crc32c(key)


def entries_from_bytes(data: bytes) -> array[int]:
    """Entries as stored (big-endian uint64) to an array of ints."""
    out = array("Q")
    out.frombytes(data)
    if not _BIG_ENDIAN_HOST:
        out.byteswap()
    return out


def entries_to_bytes(entries: array[int]) -> bytes:
    if _BIG_ENDIAN_HOST:
        return entries.tobytes()
    copy = array("Q", entries)
    copy.byteswap()
    return copy.tobytes()


def _pack_header(base_offset: int, log_size: int, next_offset: int, count: int, entries_crc: int) -> bytes:
    body = HEADER.pack(MAGIC, VERSION, 0, base_offset, log_size, next_offset, count, entries_crc)
    return body[:12] + struct.pack(">I", crc32c(body[16:])) + body[16:]


@dataclass(slots=True)
class KeyIndexFile:
    """A ``.keyindex`` file whose header was read. ``fences`` (the first entry of every
    ``FENCE_EVERY``) is None until ``verify`` has checked the entries' CRC: an unverified
    file is not used."""

    path: str
    base_offset: int
    log_size: int
    next_offset: int
    count: int
    entries_crc: int
    fences: array[int] | None = None

    @property
    def verified(self) -> bool:
        return self.fences is not None

    @property
    def file_size(self) -> int:
        return HEADER_SIZE + self.count * ENTRY_SIZE

    @classmethod
    def read_header(cls, path: str) -> KeyIndexFile:
        """The header of ``path``; CorruptIndexError when it is not one of ours or torn,
        FileNotFoundError when there is none."""
        with open(path, "rb") as f:
            head = f.read(HEADER_SIZE)
            size = os.fstat(f.fileno()).st_size
        if len(head) < HEADER_SIZE:
            raise CorruptIndexError(f"{path}: {len(head)} bytes is shorter than a key index header")
        magic, version, header_crc, base, log_size, next_offset, count, entries_crc = HEADER.unpack(head)
        if magic != MAGIC or version != VERSION:
            raise CorruptIndexError(f"{path}: not a version {VERSION} key index")
        if crc32c(head[16:]) != header_crc:
            raise CorruptIndexError(f"{path}: header CRC mismatch")
        found = cls(path, base, log_size, next_offset, count, entries_crc)
        if size != found.file_size:
            raise CorruptIndexError(f"{path}: {size} bytes, its header says {found.file_size}")
        return found

    def verify_steps(self, chunk_entries: int = 1 << 19) -> Iterator[None]:
        """Check the entries against their CRC and collect the fences, a chunk per step;
        raises CorruptIndexError (or OSError) when they do not match."""
        fences = array("Q")
        crc = 0
        with open(self.path, "rb") as f:
            position = HEADER_SIZE
            end = self.file_size
            index = 0
            while position < end:
                data = os.pread(f.fileno(), min(chunk_entries * ENTRY_SIZE, end - position), position)
                if not data or len(data) % ENTRY_SIZE:
                    raise CorruptIndexError(f"{self.path}: short read at {position}")
                crc = crc32c(data, crc)
                entries = entries_from_bytes(data)
                first = (-index) % FENCE_EVERY
                fences.extend(entries[first::FENCE_EVERY])
                index += len(entries)
                position += len(data)
                yield
        if crc != self.entries_crc:
            raise CorruptIndexError(f"{self.path}: entries CRC mismatch")
        self.fences = fences

    def verify(self) -> None:
        for _ in self.verify_steps():
            pass

    def _read(self, fd: int, start: int, end: int) -> array[int]:
        """Entries [start, end) by index."""
        if end <= start:
            return array("Q")
        data = os.pread(fd, (end - start) * ENTRY_SIZE, HEADER_SIZE + start * ENTRY_SIZE)
        if len(data) != (end - start) * ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path}: short read of entries {start}..{end}")
        return entries_from_bytes(data)

    def _first_at_or_above(self, fd: int, key: int) -> int:
        """Index of the first entry >= ``key`` (``count`` when none)."""
        assert self.fences is not None
        block = max(0, bisect_left(self.fences, key) - 1)
        start = block * FENCE_EVERY
        entries = self._read(fd, start, min(start + FENCE_EVERY, self.count))
        return start + bisect_left(entries, key)

    def candidates(self, hash_: int, below: int, limit: int) -> list[int]:
        """Up to ``limit`` relative offsets below ``below`` of entries with key hash ``hash_``,
        newest first. The file must be verified; raises OSError or CorruptIndexError."""
        if self.fences is None:
            raise CorruptIndexError(f"{self.path}: not verified")
        low = hash_ << 32
        with open(self.path, "rb") as f:
            if os.fstat(f.fileno()).st_size != self.file_size:
                raise CorruptIndexError(f"{self.path}: changed since it was verified")
            fd = f.fileno()
            end = self._first_at_or_above(fd, low + below)
            entries = self._read(fd, max(0, end - limit), end)
        first = bisect_left(entries, low)
        return [e & OFFSET_MASK for e in reversed(entries[first:])]

    def iter_entries(self, chunk_entries: int = 1 << 16) -> Iterator[int]:
        """Every entry in order (to merge into a new file)."""
        with open(self.path, "rb") as f:
            for start in range(0, self.count, chunk_entries):
                yield from self._read(f.fileno(), start, min(start + chunk_entries, self.count))


def run_candidates(run: array[int], hash_: int, below: int, limit: int) -> list[int]:
    """``KeyIndexFile.candidates`` for an in-memory run (sorted entries)."""
    low = hash_ << 32
    end = bisect_left(run, low + below)
    start = max(bisect_left(run, low, 0, end), end - limit)
    return [run[i] & OFFSET_MASK for i in range(end - 1, start - 1, -1)]


def merge_runs(a: array[int], b: array[int]) -> array[int]:
    """One sorted run of two (timsort merges the two sorted halves in linear time)."""
    merged = a.tolist()
    merged += b
    merged.sort()
    return array("Q", merged)


def write_steps(path: str, base_offset: int, log_size: int, next_offset: int,
                sources: list[Iterator[int]], chunk_entries: int = 1 << 15,
                ) -> Iterator[KeyIndexFile | None]:
    """Write the merged, sorted ``sources`` as a key index at ``path`` (through
    ``path.tmp``, renamed once whole), a chunk per step; the last step yields the
    verified KeyIndexFile. Closing the generator early leaves no file."""
    tmp = path + ".tmp"
    merged: Iterator[int] = sources[0] if len(sources) == 1 else heapq.merge(*sources)
    fences = array("Q")
    count = crc = 0
    finished = False
    try:
        with open(tmp, "wb") as f:
            f.write(bytes(HEADER_SIZE))
            while True:
                chunk = array("Q", itertools.islice(merged, chunk_entries))
                if not chunk:
                    break
                fences.extend(chunk[(-count) % FENCE_EVERY::FENCE_EVERY])
                data = entries_to_bytes(chunk)
                crc = crc32c(data, crc)
                f.write(data)
                count += len(chunk)
                yield None
            f.seek(0)
            f.write(_pack_header(base_offset, log_size, next_offset, count, crc))
        os.replace(tmp, path)
        finished = True
    finally:
        if not finished:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
    yield KeyIndexFile(path, base_offset, log_size, next_offset, count, crc, fences)


def write_index(path: str, base_offset: int, log_size: int, next_offset: int,
                entries: list[int]) -> KeyIndexFile:
    """Write a whole key index at once (tests and tools)."""
    written: KeyIndexFile | None = None
    for step in write_steps(path, base_offset, log_size, next_offset, [iter(sorted(entries))]):
        written = step or written
    assert written is not None
    return written


@dataclass(slots=True)
class KeyIndexView:
    """What a query may use of a segment's key index, fixed when the query starts: the
    runs are never changed once made (new ones replace them), a file is re-checked
    when opened."""

    file: KeyIndexFile | None
    runs: tuple[array[int], ...]
    indexed_position: int  # log bytes [0, this) are covered by ``file`` and ``runs``


@dataclass(slots=True)
class SegmentKeyIndex:
    """The key index of one segment: its file (``path``) and in-memory runs, covering log
    bytes ``[0, indexed_position)``. Changed by the KeyIndexer and by the segment
    (``reset`` on truncation, ``delete`` with the segment)."""

    path: str
    base_offset: int
    file: KeyIndexFile | None = None
    runs: list[array[int]] = field(default_factory=list)
    indexed_position: int = 0
    indexed_next_offset: int = -1  # one past the last offset below indexed_position (-1: none yet)
    loaded: bool = False  # the file on disk was looked at (``load``)
    unindexable: bool = False  # an offset does not fit 32 bits: queries scan this segment
    generation: int = 0  # bumped by reset: work started before it is discarded

    def load(self, size: int, next_offset: int, ends_batch_at: Callable[[int, int], bool]) -> str | None:
        """Take the file on disk if it describes the segment as it is now: all of it (its
        size and next offset), or its first bytes, ending where a batch with the file's
        last offset ends (a file written while the segment was active). Otherwise the
        file is deleted; returns why (None: taken, or there was none)."""
        self.loaded = True
        try:
            found = KeyIndexFile.read_header(self.path)
        except FileNotFoundError:
            return None
        except (CorruptIndexError, OSError) as e:
            self.delete()
            return f"unreadable ({e})"
        whole = found.log_size == size and found.next_offset == next_offset
        prefix = 0 < found.log_size < size and ends_batch_at(found.log_size, found.next_offset - 1)
        if found.base_offset != self.base_offset or not (whole or prefix):
            self.delete()
            return "stale"
        self.file = found
        self.runs = []
        self.indexed_position = found.log_size
        self.indexed_next_offset = found.next_offset
        return None

    def view(self) -> KeyIndexView:
        if self.unindexable:
            return KeyIndexView(None, (), 0)
        return KeyIndexView(self.file, tuple(self.runs), self.indexed_position)

    def reset(self) -> None:
        """Forget everything (the segment was truncated): the indexer starts it again."""
        self.delete()
        self.file = None
        self.runs = []
        self.indexed_position = 0
        self.indexed_next_offset = -1
        self.unindexable = False
        self.loaded = True
        self.generation += 1

    def delete(self) -> None:
        for path in (self.path, self.path + ".tmp"):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def entry_count(self) -> int:
        return (self.file.count if self.file is not None else 0) + sum(len(r) for r in self.runs)
