"""KeyIndexer: builds every log's key indexes (``key_index.py``) in the background.

Produce and fetch never look inside a batch; the indexer reads what they wrote
afterwards, from the segment files. It runs on the thread that owns the logs,
in slices (``run(logs, deadline)`` returns at the deadline, True while work
remains), so it never races a roll, a truncation or the cleaner: whatever
changed between two slices is seen before the next one starts. The broker
spaces the slices so indexing takes a bounded share of its event loop.

Work for one segment, in this order:

1. load: the Log loads a segment's ``.keyindex`` header when it opens (before
   any append); the indexer loads those of segments the Log did not open (the
   cleaner's copies), with the same rule (``SegmentKeyIndex.load``);
2. verify: a loaded file's entries are checked against their CRC;
3. extract: the log bytes past ``indexed_position`` are read batch by batch
   (decompressed; control batches skipped) and each keyed record becomes an
   entry (``dmq.record.records.key_entries``: one C call per step where the
   extension is built: 8 ns a record without a key, 29 ns with one, against
   0.37 and 1.0 µs for the Python walk); the entries become a sorted in-memory run every ``RUN_ENTRIES``
   entries and whenever the indexer reaches the segment's end, and runs of
   similar sizes are merged up to ``MAX_MERGED``; a long batch is read
   ``RECORDS_PER_STEP`` records at a time; once a segment's runs hold
   ``MEMORY_ENTRIES`` entries they are written to its file with it (a file of
   the segment's first bytes), so memory stays bounded however big an active
   segment grows;
4. seal: once the segment is no longer the active one and is fully indexed,
   its file and runs are merged into a new ``.keyindex`` covering all of it,
   and the runs dropped.

Active segments come first, so queries on recent data scan little.
"""

from __future__ import annotations

import logging
import os
import time
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Generator, Iterator, Sequence

from dmq.record.batch import HEADER_SIZE, MIN_BATCH_LENGTH, parse_header
from dmq.record.compression import UnsupportedCodecError
from dmq.record.records import batch_body, key_entries
from dmq.storage.index import CorruptIndexError
from dmq.storage.key_index import (
    MAX_RELATIVE_OFFSET,
    SegmentKeyIndex,
    merge_runs,
    write_steps,
)
from dmq.storage.log import Log
from dmq.storage.segment import LogSegment

log = logging.getLogger("dmq.storage")

READ_CHUNK = 1 << 20  # log bytes read at once
RECORDS_PER_STEP = 1024  # records of a batch read in one step
RUN_ENTRIES = 1 << 15  # entries gathered before they become a run
MAX_MERGED = 1 << 16  # runs are merged up to this many entries (a merge is one step)
MEMORY_ENTRIES = 1 << 22  # entries a segment keeps in runs (8 bytes each) before they go to its file


def segment_alive(lg: Log, segment: LogSegment) -> bool:
    """Whether ``segment`` is still one of ``lg``'s (not deleted, not replaced by the cleaner)."""
    i = bisect_left(lg.bases, segment.base_offset)
    return i < len(lg.segments) and lg.segments[i] is segment


def needs_work(segment: LogSegment, active: bool) -> bool:
    ki = segment.key_index
    if not ki.loaded:
        return True
    if ki.unindexable:
        return False
    if ki.file is not None and not ki.file.verified:
        return True
    if ki.indexed_position < segment.size:
        return True
    return not active and (bool(ki.runs) or ki.file is None)


def add_run(ki: SegmentKeyIndex, entries: list[int]) -> None:
    """Sort ``entries`` into a new run; merge the newest runs while they are of similar size."""
    entries.sort()
    runs = ki.runs
    runs.append(array("Q", entries))
    while len(runs) >= 2 and len(runs[-2]) <= 2 * len(runs[-1]) \
            and len(runs[-2]) + len(runs[-1]) <= MAX_MERGED:
        runs[-2:] = [merge_runs(runs[-2], runs[-1])]


class _Task:
    def __init__(self, lg: Log, segment: LogSegment, steps: Generator[None, None, None]) -> None:
        self.log = lg
        self.segment = segment
        self.generation = segment.key_index.generation
        self.steps = steps

    def valid(self, live: set[Log]) -> bool:
        return self.log in live and segment_alive(self.log, self.segment) \
            and self.segment.key_index.generation == self.generation


class KeyIndexer:
    def __init__(self) -> None:
        self._queue: deque[_Task] = deque()
        self.records_indexed = 0
        self.files_written = 0

    def run(self, logs: Sequence[Log], deadline: float, max_steps: int | None = None) -> bool:
        """Index until ``deadline`` (``time.monotonic()``) or ``max_steps`` steps (a batch
        read, a run merged, a chunk written or checked); True when work remains."""
        live = set(logs)
        looked = 0
        steps = 0
        while True:
            if not self._queue:
                if looked == 2:
                    return True  # found work twice this slice: come back for more
                looked += 1
                self._queue.extend(self._find_work(logs))
                if not self._queue:
                    return False
            task = self._queue[0]
            if not task.valid(live):
                task.steps.close()  # a seal in progress removes its temporary file
                self._queue.popleft()
                continue
            try:
                next(task.steps)
            except StopIteration:
                self._queue.popleft()
            steps += 1
            if time.monotonic() >= deadline or (max_steps is not None and steps >= max_steps):
                return True

    def close(self) -> None:
        while self._queue:
            self._queue.popleft().steps.close()

    def _find_work(self, logs: Sequence[Log]) -> list[_Task]:
        active: list[_Task] = []
        sealed: list[_Task] = []
        for lg in logs:
            last = lg.segments[-1]
            for segment in lg.segments:
                is_active = segment is last
                if needs_work(segment, is_active):
                    task = _Task(lg, segment, self._work(lg, segment))
                    (active if is_active else sealed).append(task)
        return active + sealed

    # ---------------------------------------------------------------- the work

    def _work(self, lg: Log, segment: LogSegment) -> Generator[None, None, None]:
        ki = segment.key_index
        if not ki.loaded:  # a segment the Log did not open itself (the cleaner's copy)
            why = ki.load(segment.size, segment.next_offset if segment.size else segment.base_offset,
                          segment.ends_batch_at)
            if why is not None:
                log.info("%s: key index of segment %d is %s; rebuilding it", lg.name, segment.base_offset, why)
        if ki.file is not None and not ki.file.verified:
            try:
                yield from ki.file.verify_steps()
            except (CorruptIndexError, OSError) as e:
                log.warning("%s: key index of segment %d is corrupt (%s); rebuilding it",
                            lg.name, segment.base_offset, e)
                ki.reset()
                return
        if not ki.unindexable and ki.indexed_position < segment.size:
            yield from self._extract(lg, segment)
        if not ki.unindexable and ki.indexed_position == segment.size and segment is not lg.segments[-1] \
                and (ki.runs or ki.file is None):
            yield from self._write_file(segment)

    def _extract(self, lg: Log, segment: LogSegment) -> Generator[None, None, None]:
        ki = segment.key_index
        base = segment.base_offset
        position = ki.indexed_position
        pending: list[int] = []
        warned = False
        while position < segment.size:
            buf = os.pread(segment.fd, min(READ_CHUNK, segment.size - position), position)
            at = 0
            while at + HEADER_SIZE <= len(buf):
                header = parse_header(buf, at)
                if header.batch_length < MIN_BATCH_LENGTH or position + header.size > segment.size:
                    self._unindexable(lg, segment, f"no batch at position {position}")
                    return
                if at + header.size > len(buf):
                    if at:
                        break  # read on from this batch
                    batch: bytes | memoryview = os.pread(segment.fd, header.size, position)
                else:
                    batch = memoryview(buf)[at: at + header.size]
                if not header.is_control:
                    before = len(pending)
                    try:
                        # An uncompressed body is read where it lies (no copy).
                        body = batch_body(batch, header) if header.compression \
                            else memoryview(batch)[HEADER_SIZE: header.size]
                        left, record_at = header.record_count, 0
                        while left:  # a long batch a piece per step
                            record_at, _keyed, too_far = key_entries(
                                body, min(left, RECORDS_PER_STEP), record_at, header.base_offset, base,
                                MAX_RELATIVE_OFFSET, pending)
                            if too_far is not None:
                                self._unindexable(lg, segment, f"offset {too_far} is too far from the base offset")
                                return
                            left -= min(left, RECORDS_PER_STEP)
                            if left:
                                yield
                    except (ValueError, UnsupportedCodecError) as e:
                        if not warned:
                            log.warning("%s: cannot read the keys of the batch at offset %d: %s",
                                        lg.name, header.base_offset, e)
                            warned = True
                    # The entries of the batch's keyed records, those before a damaged one too.
                    self.records_indexed += len(pending) - before
                position += header.size
                at += header.size
                if len(pending) >= RUN_ENTRIES or position >= segment.size:
                    add_run(ki, pending)
                    pending = []
                    ki.indexed_position = position
                    ki.indexed_next_offset = header.last_offset + 1
                    if sum(len(run) for run in ki.runs) >= MEMORY_ENTRIES:
                        yield from self._write_file(segment)  # the runs so far to disk
                yield
            if at == 0 and len(buf) < HEADER_SIZE:
                self._unindexable(lg, segment, f"a torn batch header at position {position}")
                return

    @staticmethod
    def _unindexable(lg: Log, segment: LogSegment, why: str) -> None:
        log.warning("%s: segment %d cannot be key-indexed (%s); queries scan it", lg.name,
                    segment.base_offset, why)
        ki = segment.key_index
        ki.delete()
        ki.file = None
        ki.runs = []
        ki.indexed_position = 0
        ki.indexed_next_offset = -1
        ki.unindexable = True

    def _write_file(self, segment: LogSegment) -> Generator[None, None, None]:
        """The file and the runs merged into a new file covering ``indexed_position`` bytes:
        all of a sealed segment, or what the runs of an active one have covered so far."""
        ki = segment.key_index
        sources: list[Iterator[int]] = [iter(run) for run in ki.runs]
        if ki.file is not None:
            sources.insert(0, ki.file.iter_entries())
        if not sources:
            sources = [iter(())]
        next_offset = ki.indexed_next_offset if ki.indexed_next_offset >= 0 else segment.base_offset
        for step in write_steps(ki.path, segment.base_offset, ki.indexed_position, next_offset, sources):
            if step is None:
                yield
            else:
                ki.file = step
                ki.runs = []
                self.files_written += 1
