"""KeyIndexer: builds every log's key indexes (``key_index.py``) in the background.

Produce and fetch never look inside a batch; the indexer reads what they wrote
afterwards, from the segment files. It runs on the thread that owns the logs,
in slices (``run(logs, deadline)`` returns at the deadline, True while work
remains), so it never races a roll, a truncation or the cleaner: whatever
changed between two slices is seen before the next one starts. The broker
spaces the slices so indexing takes a bounded share of its event loop.

Work for one segment, in this order:

1. load: a ``.keyindex`` left by an earlier run is taken when its header
   matches the segment (base offset, size, next offset), else deleted;
2. verify: a loaded file's entries are checked against their CRC;
3. extract: the log bytes past ``indexed_position`` are read batch by batch
   (decompressed; control batches skipped) and each keyed record becomes an
   entry; the entries become a sorted in-memory run every ``RUN_ENTRIES``
   entries and whenever the indexer reaches the segment's end, and runs of
   similar sizes are merged up to ``MAX_MERGED``;
4. seal: once the segment is no longer the active one and is fully indexed,
   its file and runs are merged into a new ``.keyindex`` and the runs dropped.

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
from dmq.record.records import keyed_offsets
from dmq.storage.index import CorruptIndexError
from dmq.storage.key_index import (
    MAX_RELATIVE_OFFSET,
    KeyIndexFile,
    SegmentKeyIndex,
    key_hash,
    merge_runs,
    write_steps,
)
from dmq.storage.log import Log
from dmq.storage.segment import LogSegment

log = logging.getLogger("dmq.storage")

READ_CHUNK = 1 << 20  # log bytes read at once
RUN_ENTRIES = 1 << 15  # entries gathered before they become a run
MAX_MERGED = 1 << 16  # runs are merged up to this many entries (a merge is one step)


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
        if not ki.loaded:
            self._load(lg, segment)
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
            yield from self._seal(segment)

    @staticmethod
    def _load(lg: Log, segment: LogSegment) -> None:
        ki = segment.key_index
        ki.loaded = True
        try:
            found = KeyIndexFile.read_header(ki.path)
        except FileNotFoundError:
            return
        except (CorruptIndexError, OSError) as e:
            log.warning("%s: deleting unreadable key index of segment %d: %s", lg.name, segment.base_offset, e)
            ki.delete()
            return
        if not found.matches(segment.base_offset, segment.size, segment.next_offset):
            log.info("%s: key index of segment %d is stale; rebuilding it", lg.name, segment.base_offset)
            ki.delete()
            return
        ki.file = found
        ki.indexed_position = found.log_size

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
                    try:
                        _, keyed = keyed_offsets(batch)
                    except (ValueError, UnsupportedCodecError) as e:
                        if not warned:
                            log.warning("%s: cannot read the keys of the batch at offset %d: %s",
                                        lg.name, header.base_offset, e)
                            warned = True
                        keyed = []
                    for offset, key in keyed:
                        relative = offset - base
                        if not 0 <= relative <= MAX_RELATIVE_OFFSET:
                            self._unindexable(lg, segment, f"offset {offset} is too far from the base offset")
                            return
                        pending.append(key_hash(key) << 32 | relative)
                    self.records_indexed += len(keyed)
                position += header.size
                at += header.size
                if len(pending) >= RUN_ENTRIES or position >= segment.size:
                    add_run(ki, pending)
                    pending = []
                    ki.indexed_position = position
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
        ki.unindexable = True

    def _seal(self, segment: LogSegment) -> Generator[None, None, None]:
        ki = segment.key_index
        sources: list[Iterator[int]] = [iter(run) for run in ki.runs]
        if ki.file is not None:
            sources.insert(0, ki.file.iter_entries())
        if not sources:
            sources = [iter(())]
        for step in write_steps(ki.path, segment.base_offset, segment.size, segment.next_offset, sources):
            if step is None:
                yield
            else:
                ki.file = step
                ki.runs = []
                self.files_written += 1
