"""TransactionIndex: the aborted transactions of one log segment (Kafka's ``.txnindex``).

File ``<20-digit base offset>.txnindex`` beside the segment, Kafka's format:
34-byte entries ``(version int16 = 0, producer id int64, first offset int64,
last offset int64, last stable offset int64)``, big-endian, back to back.

An entry is written when an ABORT marker completing a transaction is appended
to the segment: first offset is the transaction's first batch, last offset the
marker's offset, last stable offset the LSO at that moment (the first offset of
the earliest other ongoing transaction, else the offset after the marker). A
transaction may start in an earlier segment; its entry sits in the segment of
its marker.

Invariants: last offsets strictly increase and are >= the base offset; the
file exists only once an entry was appended (Kafka creates it lazily too).
Entries live in memory as well (aborted transactions are rare); ``flush()``
makes appended ones durable. The index is a cache of the log: the Log rebuilds
the indexes of unflushed segments on recovery by replaying producer state.
Only the thread that owns the Log calls these methods (the cleaner writes its
cleaned copy with ``write_entries``).
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO, NamedTuple

from dmq.storage.index import CorruptIndexError

VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
SUFFIX = ".txnindex"


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return _ENTRY.pack(VERSION, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)


def parse_entries(data: bytes, path: str = "<txnindex>") -> list[AbortedTxn]:
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(f"{path}: size {len(data)} is not a multiple of {ENTRY_SIZE}")
    out = []
    for version, pid, first, last, lso in _ENTRY.iter_unpack(data):
        if version > VERSION or version < 0:
            raise CorruptIndexError(f"{path}: unexpected aborted transaction version {version}")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def write_entries(path: str, entries: list[AbortedTxn], fsync: bool = True) -> None:
    """Write a whole index file (the cleaner's ``.cleaned`` copy); none is written for no entry."""
    if not entries:
        return
    with open(path, "wb") as f:
        f.write(b"".join(e.pack() for e in entries))
        if fsync:
            f.flush()
            os.fsync(f.fileno())


class TransactionIndex:
    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = []
        self._file: BinaryIO | None = None

    def load(self) -> None:
        """Read the entries from disk; raise CorruptIndexError when they are not sane."""
        self.close()
        self.entries = []
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        entries = parse_entries(data, self.path)
        last = -1
        for e in entries:
            if e.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"{self.path}: last offset {e.last_offset} of {e} is below the base offset")
            if e.last_offset <= last:
                raise CorruptIndexError(f"{self.path}: last offsets are not increasing")
            last = e.last_offset
        self.entries = entries

    def append(self, txn: AbortedTxn) -> None:
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            raise ValueError(f"{self.path}: last offset {txn.last_offset} does not follow "
                             f"{self.entries[-1].last_offset}")
        self.entries.append(txn)
        if self._file is None:
            self._file = open(self.path, "ab")  # noqa: SIM115 - closed by close()
        self._file.write(txn.pack())

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound_offset), and whether the search is complete.

        Complete once an entry's last stable offset reaches the upper bound: every
        transaction starting below it had ended when that entry was written, so
        later segments hold none that overlap.
        """
        out = []
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
                out.append(e)
            if e.last_stable_offset >= upper_bound_offset:
                return out, True
        return out, False

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or above ``offset``."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self.entries = kept
            self._rewrite()

    def reset(self) -> None:
        """Drop every entry (the segment is being recovered)."""
        self.entries = []
        self._rewrite()

    def _rewrite(self) -> None:
        self.close()
        if not self.entries:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            return
        tmp = self.path + ".tmp"
        write_entries(tmp, self.entries, fsync=False)
        os.replace(tmp, self.path)

    def flush(self, fsync: bool = True) -> None:
        if self._file is not None:
            self._file.flush()
            if fsync:
                os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __len__(self) -> int:
        return len(self.entries)
