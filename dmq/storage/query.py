"""Queries over one partition's log: the records with a key, newest first (through the
key indexes), or the records of an offset window, oldest first (a scan).

A query is a generator (``find_by_key``, ``scan``) run on the thread that owns the
log: it yields between pieces of work so the caller can let other work run, and
returns a ``QueryOutcome``. Its window ``[start_offset, end_offset)`` is fixed by the
caller (below the high watermark, or the last stable offset for read_committed);
timestamps filter inside it.

What may change while a query is in flight, and how it copes:

- segments are rolled, deleted by retention or replaced by the cleaner: the
  segments are listed at the start; each is taken (``os.dup`` of its file, its
  size, its key index view) when the query first reads it, and only if it is
  still the log's (a replaced one is taken as the replacement; a deleted one is
  skipped: its records are gone). The duplicate descriptor reads the same bytes
  however the segment changes afterwards;
- the key index gains runs or a file: the view taken is used; a file that has
  gone or fails its checks is not, and that segment is scanned instead.

Transactions: control records are never returned. With ``read_committed`` the
records of aborted transactions are left out; otherwise they are returned
marked ``aborted``. Records whose key is null are never found by key.

Bounds: ``max_records`` and ``max_bytes`` (at least one record is returned), and a
``Budget`` of log bytes read, shared by the partitions of one request. A query
that stops early says where to go on (``resume_offset``): for a key query, search
again below it (its ``end_offset``); for a scan, from it (its ``start_offset``).
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from collections.abc import Generator
from dataclasses import dataclass, field

from dmq.record.batch import HEADER_SIZE, MIN_BATCH_LENGTH, BatchHeader, parse_header
from dmq.record.compression import UnsupportedCodecError
from dmq.record.records import Record, find_records
from dmq.storage.index import CorruptIndexError
from dmq.storage.key_index import KeyIndexView, key_hash, run_candidates
from dmq.storage.log import Log
from dmq.storage.segment import LogSegment
from dmq.storage.txn_index import TransactionIndex

SCAN_CHUNK = 1 << 20  # log bytes scanned between two yields
CANDIDATES_PAGE = 256  # index entries taken at once
RECORD_OVERHEAD = 32  # bytes counted for each record besides its key, value and headers


@dataclass(slots=True)
class QuerySpec:
    start_offset: int  # the window: [start_offset, end_offset)
    end_offset: int
    key: bytes | None = None  # None: every record of the window (a scan)
    start_timestamp: int = -1  # records with timestamp >= this (-1: no bound)
    end_timestamp: int = -1  # records with timestamp < this (-1: no bound)
    read_committed: bool = True
    max_records: int = 100
    max_bytes: int = 1 << 20


@dataclass(slots=True)
class Budget:
    """Log bytes a request may still read (scanned or read for index candidates)."""

    remaining: int

    @property
    def spent(self) -> bool:
        return self.remaining <= 0


@dataclass(slots=True)
class FoundRecord:
    record: Record
    aborted: bool = False


@dataclass(slots=True)
class QueryOutcome:
    records: list[FoundRecord] = field(default_factory=list)
    resume_offset: int = -1  # -1: the window was searched to its end
    unindexed_bytes: int = 0  # log bytes a key query scanned because no index covered them


def record_size(record: Record) -> int:
    return (RECORD_OVERHEAD + len(record.key or b"") + len(record.value or b"")
            + sum(len(k) + len(v or b"") for k, v in record.headers))


@dataclass(slots=True)
class _Segment:
    """A segment as the query reads it: fixed when first read."""

    base_offset: int
    fd: int
    size: int
    next_offset: int
    max_timestamp: int
    key_index: KeyIndexView
    segment: LogSegment  # for its offset index (positions of batches)

    def locate(self, offset: int) -> int:
        """Position of the first batch whose last offset is >= ``offset`` (``size``: none)."""
        _, position = self.segment.offset_index.lookup(offset)
        if position >= self.size:
            position = 0
        while position + HEADER_SIZE <= self.size:
            header = self.header(position)
            if header is None:
                break
            if header.last_offset >= offset:
                return position
            position += header.size
        return self.size

    def end_position(self, offset: int) -> int:
        """Position where the batches whose base offset is >= ``offset`` start."""
        position = self.locate(offset)
        header = self.header(position) if position < self.size else None
        if header is not None and header.base_offset < offset:
            position += header.size
        return position

    def header(self, position: int) -> BatchHeader | None:
        head = os.pread(self.fd, HEADER_SIZE, position)
        if len(head) < HEADER_SIZE:
            return None
        header = parse_header(head)
        if header.batch_length < MIN_BATCH_LENGTH or position + header.size > self.size:
            return None
        return header

    def batches(self, start: int, end: int) -> Generator[tuple[BatchHeader, bytes | memoryview], None, None]:
        """Whole batches in [start, end), read a chunk at a time."""
        position = start
        while position < end:
            buf = os.pread(self.fd, min(SCAN_CHUNK, end - position), position)
            at = 0
            while at + HEADER_SIZE <= len(buf):
                header = parse_header(buf, at)
                if header.batch_length < MIN_BATCH_LENGTH or position + header.size > end:
                    return
                if at + header.size > len(buf):
                    if at:
                        break
                    batch: bytes | memoryview = os.pread(self.fd, header.size, position)
                    if len(batch) < header.size:
                        return
                else:
                    batch = memoryview(buf)[at: at + header.size]
                yield header, batch
                position += header.size
                at += header.size
            if at == 0:
                return  # torn (the file was truncated under the query)

    def close(self) -> None:
        os.close(self.fd)


class _Aborted:
    """Whether a transactional record was aborted: the index entries of the log's
    aborted transactions (their markers may be in any later segment), read at first use."""

    def __init__(self, indexes: list[TransactionIndex]) -> None:
        self._indexes = indexes
        self._spans: dict[int, tuple[list[int], list[int]]] | None = None

    def __call__(self, producer_id: int, offset: int) -> bool:
        if self._spans is None:
            spans: dict[int, list[tuple[int, int]]] = {}
            for index in self._indexes:
                for txn in list(index.entries):
                    spans.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
            self._spans = {}
            for pid, found in spans.items():
                found.sort()
                self._spans[pid] = ([f for f, _ in found], [last for _, last in found])
        found_spans = self._spans.get(producer_id)
        if found_spans is None:
            return False
        firsts, lasts = found_spans
        i = bisect_right(firsts, offset) - 1
        return i >= 0 and lasts[i] >= offset


class LogSnapshot:
    """The segments of a log a query may read, taken when first read. ``close()`` it."""

    def __init__(self, lg: Log, start_offset: int, end_offset: int) -> None:
        self.log = lg
        first = max(0, bisect_right(lg.bases, start_offset) - 1)
        self._segments = [s for s in lg.segments[first:] if s.base_offset < end_offset]
        self.bases = [s.base_offset for s in self._segments]
        self._open: dict[int, _Segment | None] = {}
        self.aborted = _Aborted([s.txn_index for s in lg.segments[first:]])

    def __len__(self) -> int:
        return len(self._segments)

    def segment(self, i: int) -> _Segment | None:
        """The i-th segment as it is now (None: deleted since the query started)."""
        if i in self._open:
            return self._open[i]
        segment = self._segments[i]
        lg = self.log
        j = bisect_left(lg.bases, segment.base_offset)
        current = lg.segments[j] if j < len(lg.segments) and lg.bases[j] == segment.base_offset else None
        taken = None
        if current is not None:
            taken = _Segment(current.base_offset, os.dup(current.fd), current.size,
                             current.next_offset if current.size else current.base_offset,
                             current.max_timestamp, current.key_index.view(), current)
        self._open[i] = taken
        return taken

    def close(self) -> None:
        for taken in self._open.values():
            if taken is not None:
                taken.close()
        self._open.clear()


class _Results:
    def __init__(self, spec: QuerySpec) -> None:
        self.spec = spec
        self.out = QueryOutcome()
        self.bytes = 0

    def wanted(self, record: Record) -> bool:
        spec = self.spec
        return (spec.start_offset <= record.offset < spec.end_offset
                and (spec.start_timestamp < 0 or record.timestamp >= spec.start_timestamp)
                and (spec.end_timestamp < 0 or record.timestamp < spec.end_timestamp))

    def add(self, record: Record, aborted: bool) -> bool:
        """False when ``record`` does not fit in max_bytes (it is not added)."""
        size = record_size(record)
        if self.out.records and self.bytes + size > self.spec.max_bytes:
            return False
        self.out.records.append(FoundRecord(record, aborted))
        self.bytes += size
        return True

    @property
    def full(self) -> bool:
        return len(self.out.records) >= self.spec.max_records


def _decode(header: BatchHeader, batch: bytes | memoryview, key: bytes | None,
            offsets: set[int] | None = None) -> list[Record]:
    try:
        return find_records(batch, key=key, offsets=offsets)[1]
    except (ValueError, UnsupportedCodecError):
        return []  # unreadable records cannot be returned; the key indexer logs them


def _chunks_newest_first(seg: _Segment, start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) of the segment cut at batch boundaries (offset index positions) into
    pieces of about SCAN_CHUNK bytes, the last piece first."""
    positions = seg.segment.offset_index.positions
    out: list[tuple[int, int]] = []
    hi = end
    while hi > start:
        want = hi - SCAN_CHUNK
        if want <= start:
            out.append((start, hi))
            break
        j = bisect_left(positions, want)
        if j >= len(positions) or positions[j] >= hi:
            j = bisect_left(positions, hi) - 1  # no boundary that far back: the nearest one
        lo = positions[j] if 0 <= j < len(positions) and start < positions[j] < hi else start
        out.append((lo, hi))
        hi = lo
    return out


def find_by_key(snap: LogSnapshot, spec: QuerySpec, budget: Budget) -> Generator[None, None, QueryOutcome]:
    """The records with key ``spec.key`` in the window, newest first."""
    key = spec.key
    assert key is not None
    hashed = key_hash(key)
    results = _Results(spec)
    out = results.out
    upper = spec.end_offset  # every match in [upper, end_offset) has been taken
    for i in range(len(snap) - 1, -1, -1):
        seg = snap.segment(i)
        if seg is None or seg.base_offset >= upper:
            continue
        if seg.next_offset <= spec.start_offset:
            break
        if 0 <= spec.start_timestamp and seg.max_timestamp < spec.start_timestamp:
            upper = seg.base_offset  # every record here is older than the window's start
            continue
        view = seg.key_index
        usable = view.file is None or _verified(view)
        if not usable:
            _forget(seg, view)
        indexed = view.indexed_position if usable else 0
        # The newest part first: what the index does not cover yet.
        tail_end = seg.end_position(upper) if upper < seg.next_offset else seg.size
        for lo, hi in _chunks_newest_first(seg, min(indexed, tail_end), tail_end):
            if budget.spent:
                out.resume_offset = upper
                return out
            budget.remaining -= hi - lo
            out.unindexed_bytes += hi - lo
            found: list[tuple[Record, bool]] = []
            first_offset = None
            for header, batch in seg.batches(lo, hi):
                if first_offset is None:
                    first_offset = header.base_offset
                if header.is_control or header.last_offset < spec.start_offset or header.base_offset >= upper:
                    continue
                aborted = header.is_transactional and snap.aborted(header.producer_id, header.base_offset)
                if aborted and spec.read_committed:
                    continue
                found += [(r, aborted) for r in _decode(header, batch, key) if r.offset < upper and results.wanted(r)]
            for record, aborted in reversed(found):
                if not results.add(record, aborted):
                    out.resume_offset = upper
                    return out
                upper = record.offset
                if results.full:
                    out.resume_offset = upper
                    return out
            if first_offset is not None:
                upper = min(upper, first_offset)
            yield
        if not indexed:
            upper = min(upper, seg.base_offset)
            continue
        # Then the indexed part, through the entries of the key's hash, newest first.
        low = max(spec.start_offset - seg.base_offset, 0)
        while True:
            # The batch read last, with the records of this page's candidates in it.
            cached: tuple[int, int, dict[int, Record], bool] | None = None  # (base, last, records, aborted)
            below = min(upper, seg.next_offset) - seg.base_offset
            if below <= low:
                break
            candidates = _candidates(view, hashed, below, CANDIDATES_PAGE)
            if candidates is None:  # the file cannot be read now: scan what it covered
                _forget(seg, view)
                yield from _scan_for_key(seg, snap, spec, results, budget, upper, view.indexed_position)
                return out
            candidates = [c for c in candidates if c >= low]
            if not candidates:
                break
            for relative in candidates:
                offset = seg.base_offset + relative
                if cached is None or not cached[0] <= offset <= cached[1]:
                    position = seg.locate(offset)
                    holder = seg.header(position) if position < seg.size else None
                    if holder is None or holder.base_offset > offset:
                        upper = offset  # no such offset (a collision's leftover): nothing to take
                        continue
                    if budget.spent:
                        out.resume_offset = upper
                        return out
                    budget.remaining -= holder.size
                    aborted = holder.is_transactional and snap.aborted(holder.producer_id, holder.base_offset)
                    records: dict[int, Record] = {}
                    if not holder.is_control and not (aborted and spec.read_committed):
                        batch = os.pread(seg.fd, holder.size, position)
                        inside = {seg.base_offset + c for c in candidates
                                  if holder.base_offset <= seg.base_offset + c <= holder.last_offset}
                        records = {r.offset: r for r in _decode(holder, batch, key, inside)}
                    cached = (holder.base_offset, holder.last_offset, records, aborted)
                taken = cached[2].get(offset)
                if taken is not None and results.wanted(taken):
                    if not results.add(taken, cached[3]):
                        out.resume_offset = upper
                        return out
                    if results.full:
                        out.resume_offset = offset
                        return out
                upper = offset
            yield
        upper = min(upper, seg.base_offset)
    return out


def _verified(view: KeyIndexView) -> bool:
    """Whether the view's file may be used, checking its entries if no one has yet."""
    assert view.file is not None
    if view.file.verified:
        return True
    try:
        view.file.verify()
    except (CorruptIndexError, OSError):
        return False
    return True


def _forget(seg: _Segment, view: KeyIndexView) -> None:
    """A key index file that cannot be used: the segment's index starts again (the key
    indexer rebuilds it), unless it changed since the query took its view."""
    live = seg.segment.key_index
    if view.file is not None and live.file is view.file:
        live.reset()


def _candidates(view: KeyIndexView, hashed: int, below: int, limit: int) -> list[int] | None:
    found: list[int] = []
    for run in view.runs:
        found += run_candidates(run, hashed, below, limit)
    if view.file is not None:
        try:
            found += view.file.candidates(hashed, below, limit)
        except (CorruptIndexError, OSError):
            return None
    found.sort(reverse=True)
    return found[:limit]


def _scan_for_key(seg: _Segment, snap: LogSnapshot, spec: QuerySpec, results: _Results, budget: Budget,
                  upper: int, end: int) -> Generator[None, None, None]:
    """The indexed part of a segment scanned after all (its file could not be read),
    then the older segments, as a key query would have."""
    seg.key_index = KeyIndexView(None, (), 0)
    rest = QuerySpec(spec.start_offset, min(upper, spec.end_offset), spec.key, spec.start_timestamp,
                     spec.end_timestamp, spec.read_committed, spec.max_records - len(results.out.records),
                     max(spec.max_bytes - results.bytes, 1))
    more = yield from find_by_key(snap, rest, budget)
    out = results.out
    for found in more.records:
        if not results.add(found.record, found.aborted):
            out.resume_offset = out.records[-1].record.offset
            return
    out.resume_offset = more.resume_offset
    out.unindexed_bytes += more.unindexed_bytes


def scan(snap: LogSnapshot, spec: QuerySpec, budget: Budget) -> Generator[None, None, QueryOutcome]:
    """The records of the window (and timestamps), oldest first."""
    results = _Results(spec)
    out = results.out
    next_offset = spec.start_offset  # every record below it has been taken
    for i in range(len(snap)):
        seg = snap.segment(i)
        if seg is None or seg.next_offset <= next_offset:
            continue
        if seg.base_offset >= spec.end_offset:
            break
        if 0 <= spec.start_timestamp and seg.max_timestamp < spec.start_timestamp:
            next_offset = max(next_offset, seg.next_offset)
            continue
        read = 0
        for header, batch in seg.batches(seg.locate(next_offset), seg.size):
            if header.base_offset >= spec.end_offset:
                return out
            if header.last_offset < next_offset:
                continue
            if budget.spent:
                out.resume_offset = next_offset
                return out
            budget.remaining -= header.size
            aborted = header.is_transactional and snap.aborted(header.producer_id, header.base_offset)
            if not header.is_control and not (aborted and spec.read_committed):
                for record in _decode(header, batch, None):
                    if record.offset < next_offset or not results.wanted(record):
                        continue
                    if not results.add(record, aborted):
                        out.resume_offset = record.offset
                        return out
                    if results.full:
                        out.resume_offset = record.offset + 1
                        return out
            next_offset = header.last_offset + 1
            read += header.size
            if read >= SCAN_CHUNK:
                read = 0
                yield
    return out
