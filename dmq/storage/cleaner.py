"""LogCleaner: compaction of logs whose ``cleanup.policy`` includes ``compact``.

A pass over one log:

1. pick the log with the highest dirty ratio (bytes written since its last
   cleaning over the bytes of its non-active segments) at or above
   ``min.cleanable.dirty.ratio``;
2. ``plan()`` (event-loop thread) snapshots the paths of its non-active
   segments; the active segment is never cleaned;
3. ``clean()`` (background thread) reads those files by path, builds
   key -> latest offset over them, and writes ``<base>.log.cleaned`` files that
   keep, per key, only its latest record; a tombstone (null value) is dropped
   once it is older than ``delete.retention.ms``. Kept records are copied as
   raw bytes inside their original batch header, so offsets, timestamps and
   producer fields do not change;
4. ``swap()`` (event-loop thread) replaces each still-present segment by its
   cleaned file and rebuilds its indexes, then records the cleaned offset in
   ``cleaner-offset-checkpoint``.

Invariants: the latest record of every key below the active segment
survives; offsets are never reassigned; a segment deleted or truncated
while cleaning ran is left alone (its cleaned file is discarded).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from dmq.record.batch import HEADER_SIZE, parse_header
from dmq.record.records import RawRecord, raw_records, rebuild_batch
from dmq.storage.log import Log, now_ms
from dmq.storage.log_manager import read_checkpoint, write_checkpoint
from dmq.storage.segment import LogSegment

log = logging.getLogger("dmq.cleaner")

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"


@dataclass(slots=True)
class CleanPlan:
    log: Log
    segments: list[tuple[int, str, int]]  # (base offset, path, size) of non-active segments
    end_offset: int  # offsets below this are covered
    delete_retention_ms: int
    now: int


@dataclass(slots=True)
class CleanResult:
    plan: CleanPlan
    cleaned: list[tuple[int, str, int]] = field(default_factory=list)  # (base, cleaned path, original size)
    tombstone_due: int | None = None  # when the oldest kept tombstone may be dropped
    records_read: int = 0
    records_kept: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


def _batches(path: str, size: int) -> list[bytes]:
    with open(path, "rb") as f:
        data = f.read(size)
    out = []
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        header = parse_header(data, pos)
        if pos + header.size > len(data) or header.batch_length < HEADER_SIZE - 12:
            break
        out.append(data[pos : pos + header.size])
        pos += header.size
    return out


class LogCleaner:
    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, CLEANER_CHECKPOINT)
        self.cleaned_to: dict[tuple[str, int], int] = read_checkpoint(self.path)
        # When a cleaned log next holds a tombstone past delete.retention.ms (KIP-534):
        # such a log is cleanable even with no new data. Unknown after a restart: 0.
        self.tombstone_due: dict[tuple[str, int], int] = {}

    def dirty_ratio(self, lg: Log) -> float:
        segments = lg.segments[:-1]
        total = sum(s.size for s in segments)
        if total == 0:
            return 0.0
        first_dirty = self.cleaned_to.get((lg.topic, lg.partition), 0)
        dirty = sum(s.size for s in segments if s.next_offset > first_dirty)
        return dirty / total

    def plan(self, logs: list[Log], now: int | None = None) -> CleanPlan | None:
        now = now_ms() if now is None else now
        best: tuple[float, Log] | None = None
        for lg in logs:
            if "compact" not in lg.config.cleanup_policy or len(lg.segments) < 2:
                continue
            ratio = self.dirty_ratio(lg)
            due = self.tombstone_due.get((lg.topic, lg.partition), 0)
            dirty_enough = ratio >= float(lg.config["min.cleanable.dirty.ratio"]) and ratio > 0
            if (dirty_enough or now >= due) and (best is None or ratio > best[0]):
                best = (ratio, lg)
        if best is None:
            return None
        lg = best[1]
        segments = [(s.base_offset, s.log_path, s.size) for s in lg.segments[:-1]]
        return CleanPlan(lg, segments, lg.active_segment.base_offset,
                         int(lg.config["delete.retention.ms"]), now)

    def clean(self, plan: CleanPlan) -> CleanResult:
        """Write cleaned copies of the planned segments (safe on a background thread)."""
        result = CleanResult(plan)
        latest: dict[bytes, int] = {}
        for _base, path, size in plan.segments:
            for batch in _batches(path, size):
                header, records = raw_records(batch)
                if header.is_control:
                    continue
                for r in records:
                    if r.key is not None:
                        latest[r.key] = r.offset
        horizon = plan.now - plan.delete_retention_ms
        for base, path, size in plan.segments:
            out = bytearray()
            changed = False
            for batch in _batches(path, size):
                header, records = raw_records(batch)
                result.records_read += len(records)
                if header.is_control:
                    out += batch
                    continue
                kept: list[RawRecord] = [
                    r for r in records
                    if r.key is not None and latest.get(r.key) == r.offset
                    and not (r.value is None and r.timestamp < horizon)
                ]
                result.records_kept += len(kept)
                for r in kept:
                    if r.value is None:
                        due = r.timestamp + plan.delete_retention_ms + 1
                        if result.tombstone_due is None or due < result.tombstone_due:
                            result.tombstone_due = due
                if len(kept) == len(records):
                    out += batch
                elif kept:
                    out += rebuild_batch(batch, kept)
                    changed = True
                else:
                    changed = True
            result.bytes_before += size
            result.bytes_after += len(out) if changed else size
            if changed:
                cleaned = path + CLEANED_SUFFIX
                with open(cleaned, "wb") as f:
                    f.write(out)
                    f.flush()
                    os.fsync(f.fileno())
                result.cleaned.append((base, cleaned, size))
        return result

    def swap(self, result: CleanResult) -> int:
        """Install cleaned segments (event-loop thread); returns how many were replaced."""
        lg = result.plan.log
        replaced = 0
        for base, cleaned, original_size in result.cleaned:
            idx = next((i for i, s in enumerate(lg.segments[:-1]) if s.base_offset == base), None)
            if idx is None or lg.segments[idx].size != original_size:
                os.unlink(cleaned)  # deleted or changed meanwhile: leave it alone
                continue
            old = lg.segments[idx]
            old.close()
            os.replace(cleaned, old.log_path)
            fresh = LogSegment(lg.directory, base, lg.config.index_interval_bytes)
            fresh.recover()
            fresh.load_txn_index()
            fresh.flush()
            lg.segments[idx] = fresh
            replaced += 1
        self.cleaned_to[(lg.topic, lg.partition)] = result.plan.end_offset
        self.tombstone_due[(lg.topic, lg.partition)] = (
            result.tombstone_due if result.tombstone_due is not None else 2**62)
        self.checkpoint()
        log.info("cleaned %s: %d segments rewritten, %d of %d records kept, %d -> %d bytes",
                 lg.name, replaced, result.records_kept, result.records_read, result.bytes_before,
                 result.bytes_after)
        return replaced

    def forget(self, topic: str, partition: int) -> None:
        self.cleaned_to.pop((topic, partition), None)
        self.tombstone_due.pop((topic, partition), None)

    def checkpoint(self) -> None:
        write_checkpoint(self.path, self.cleaned_to)
