"""Log: the segmented, append-only log of one partition (Kafka's UnifiedLog, local part).

Directory ``<data-dir>/<topic>-<partition>/`` holds segments
``<20-digit base offset>.log`` with ``.index`` and ``.timeindex``, producer
snapshots ``<offset>.snapshot`` and ``partition.metadata`` (topic id).

Invariants:
- ``segments`` is non-empty and sorted by base offset; the last one is active;
- ``log_start_offset <= high watermark <= log_end_offset``; offsets below
  ``log_start_offset`` are invisible even while their segment still exists;
- ``recovery_point``: every byte below it has been fsynced; after an unclean
  shutdown only segments from the one holding it are re-validated.

Plain synchronous code. The event-loop thread calls every method except
``flush_segments``, which the LogManager may run on a background thread.
"""

from __future__ import annotations

import logging
import os
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from dmq.config import LogConfig
from dmq.record import records as record_codec
from dmq.record.batch import (
    BatchHeader,
    InvalidRecordError,
    ValidatedBatches,
    compute_crc,
    iter_headers,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from dmq.storage.leader_epoch import LeaderEpochFileCache
from dmq.storage.producer_state import ProducerStateManager
from dmq.storage.segment import FileSlice, LogSegment

log = logging.getLogger("dmq.storage")


class OffsetOutOfRangeError(Exception):
    pass


@dataclass(slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime
    log_start_offset: int
    record_count: int
    duplicate: bool = False


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def now_ms() -> int:
    return int(time.time() * 1000)


class Log:
    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        topic_id: str | None = None,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        os.makedirs(directory, exist_ok=True)
        if topic_id is not None:
            self._write_partition_metadata(topic_id)
        self.producer_state = ProducerStateManager(directory)
        self.leader_epochs = LeaderEpochFileCache(directory)
        self.segments: list[LogSegment] = []
        self.bases: list[int] = []
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms()
        self.on_roll: Callable[[Log, int], None] | None = None
        started = time.monotonic()
        self._load(clean_shutdown)
        self._load_leader_epochs()
        self.load_seconds = time.monotonic() - started

    # ------------------------------------------------------------------ loading

    def _write_partition_metadata(self, topic_id: str) -> None:
        path = os.path.join(self.directory, "partition.metadata")
        if not os.path.exists(path):
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"version: 0\ntopic_id: {topic_id}\n")
            os.replace(tmp, path)

    def _load(self, clean_shutdown: bool) -> None:
        bases = []
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            if name.endswith((".tmp", ".deleted", ".cleaned", ".swap")):
                os.unlink(path)
                continue
            if name.endswith(".log"):
                try:
                    bases.append(int(name[:-4]))
                except ValueError:
                    continue
        for base in sorted(bases):
            self.segments.append(LogSegment(self.directory, base, self.config.index_interval_bytes))
        # Orphan index files of a deleted segment are rebuilt or removed on load.
        if not self.segments:
            self.segments.append(
                LogSegment(self.directory, self.log_start_offset, self.config.index_interval_bytes)
            )
        self.bases = [s.base_offset for s in self.segments]

        recover_from = len(self.segments)
        if not clean_shutdown:
            # Segments at and after the one holding the recovery point may hold
            # unflushed, torn or corrupt data: validate them batch by batch.
            recover_from = max(0, bisect_right(self.bases, self.recovery_point) - 1)
        truncated_at: int | None = None
        for i, segment in enumerate(self.segments):
            if i >= recover_from or not segment.load_indexes():
                cut = segment.recover()
                if i < recover_from:
                    log.info("%s: rebuilt indexes of segment %d", self.name, segment.base_offset)
                if cut:
                    log.warning("%s: truncated %d bytes of torn or corrupt data in segment %d",
                                self.name, cut, segment.base_offset)
                    truncated_at = i
                    break
            else:
                segment.restore_tail_state()
        if truncated_at is not None:
            # Data after a corrupt batch cannot be trusted: drop later segments too.
            for segment in self.segments[truncated_at + 1:]:
                log.warning("%s: deleting segment %d after corruption", self.name, segment.base_offset)
                segment.delete()
            del self.segments[truncated_at + 1:]
            self.bases = [s.base_offset for s in self.segments]
        last = self.segments[-1]
        self.log_end_offset = last.next_offset if last.size else last.base_offset
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            self.log_end_offset = self.log_start_offset
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        if not clean_shutdown:
            self.recovery_point = min(self.recovery_point,
                                      self.bases[recover_from] if recover_from < len(self.bases) else self.log_end_offset)
        self._load_producer_state()

    def _load_producer_state(self) -> None:
        self.producer_state.delete_snapshots_after(self.log_end_offset)
        snap = self.producer_state.load_latest_snapshot(self.log_end_offset)
        start = max(snap, self.segments[0].base_offset)
        if start >= self.log_end_offset:
            return
        for segment in self.segments[max(0, bisect_right(self.bases, start) - 1):]:
            found = segment.find_position(start)
            if found is None:
                continue
            for _pos, header in segment.batches(found[0]):
                if header.base_offset >= start:
                    self.producer_state.update(header)

    def _load_leader_epochs(self) -> None:
        if self.leader_epochs.exists:
            self.leader_epochs.truncate_from_end(self.log_end_offset)
            return
        # A log written before epochs were checkpointed: rebuild from batch headers.
        for segment in self.segments:
            for _pos, header in segment.batches():
                self.leader_epochs.assign(header.partition_leader_epoch, header.base_offset)
        if not self.leader_epochs.exists:
            self.leader_epochs.clear_and_flush()

    @property
    def name(self) -> str:
        return partition_dir_name(self.topic, self.partition)

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # ------------------------------------------------------------------- append

    def check_producer_batches(self, batches: ValidatedBatches) -> AppendResult | None:
        """Return the original result when the batch is a retried duplicate; raise when invalid."""
        for header in batches.headers:
            if header.producer_id < 0:
                continue
            dup = self.producer_state.check(header)
            if dup is not None:
                if len(batches.headers) == 1:
                    return AppendResult(dup.first_offset, dup.last_offset, -1,
                                        self.log_start_offset, 0, duplicate=True)
                raise InvalidRecordError(
                    "duplicate_sequence_number", "duplicate batch inside a multi-batch request"
                )
        return None

    def append_as_leader(self, records: bytearray, batches: ValidatedBatches, leader_epoch: int,
                         timestamp: int | None = None) -> AppendResult:
        """Assign offsets to validated batches and append them."""
        duplicate = self.check_producer_batches(batches)
        if duplicate is not None:
            return duplicate
        if "compact" in self.config.cleanup_policy:
            self._require_keys(records, batches)
        now = now_ms() if timestamp is None else timestamp
        log_append = self.config.log_append_time
        segment = self.active_segment
        if segment.size > 0 and (
            segment.size + batches.total_size > self.config.segment_bytes
            or now - segment.created_ms >= self.config.segment_ms
        ):
            segment = self.roll()
        next_offset = self.log_end_offset
        first_offset = next_offset
        self.leader_epochs.assign(leader_epoch, first_offset)
        headers: list[BatchHeader] = []
        for header, pos in zip(batches.headers, batches.positions, strict=True):
            set_base_offset(records, pos, next_offset)
            set_partition_leader_epoch(records, pos, leader_epoch)
            max_ts = header.max_timestamp
            if log_append:
                set_log_append_time(records, pos, header.size, now)
                max_ts = now
            headers.append(header._replace(base_offset=next_offset, max_timestamp=max_ts,
                                           partition_leader_epoch=leader_epoch))
            next_offset += header.last_offset_delta + 1
        segment.append(records, headers, batches.positions)
        for header in headers:
            self.producer_state.update(header)
        self.log_end_offset = next_offset
        self.unflushed_messages += batches.record_count
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()
        return AppendResult(first_offset, next_offset - 1, now if log_append else -1,
                            self.log_start_offset, batches.record_count)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> int:
        """Append batches copied from the leader, keeping their offsets and epochs.

        Only whole batches at the log end offset are taken (a fetch may end in a
        partial batch); returns the bytes appended. Raises InvalidRecordError on
        a CRC mismatch or an offset gap, so nothing corrupt reaches the log.
        """
        found = iter_headers(records)
        if not found:
            return 0
        end = found[-1][0] + found[-1][1].size
        buf = bytearray(records[:end])
        expected = self.log_end_offset
        for pos, header in found:
            if header.base_offset < expected:
                # Gaps are legal (compaction), going backwards is not.
                raise InvalidRecordError(
                    "corrupt_message", f"{self.name}: replicated batch at offset {header.base_offset}, "
                    f"expected {expected} or above")
            if compute_crc(buf, pos, header.size) != header.crc:
                raise InvalidRecordError("corrupt_message", f"{self.name}: replicated batch CRC mismatch")
            expected = header.last_offset + 1
        segment = self.active_segment
        if segment.size > 0 and (segment.size + len(buf) > self.config.segment_bytes
                                 or now_ms() - segment.created_ms >= self.config.segment_ms):
            segment = self.roll()
        headers = [h for _, h in found]
        segment.append(buf, headers, [p for p, _ in found])
        for header in headers:
            self.leader_epochs.assign(header.partition_leader_epoch, header.base_offset)
            self.producer_state.update(header)
        self.log_end_offset = expected
        self.unflushed_messages += sum(h.record_count for h in headers)
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()
        return end

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log and restart it empty at ``offset`` (below the leader's start)."""
        for segment in self.segments:
            segment.delete()
        segment = LogSegment(self.directory, offset, self.config.index_interval_bytes)
        self.segments = [segment]
        self.bases = [offset]
        self.log_start_offset = offset
        self.log_end_offset = offset
        self.recovery_point = offset
        self.producer_state.truncate_after(-1)
        self.producer_state.delete_snapshots_after(-1)
        self.leader_epochs.clear_and_flush()

    @staticmethod
    def _require_keys(records: bytearray, batches: ValidatedBatches) -> None:
        """Compaction needs a key on every record (Kafka refuses keyless records too)."""
        for header, pos in zip(batches.headers, batches.positions, strict=True):
            try:
                _, recs = record_codec.decode_batch(bytes(records[pos : pos + header.size]))
            except ValueError as e:
                raise InvalidRecordError("corrupt_message", f"cannot read records: {e}") from None
            if any(r.key is None for r in recs):
                raise InvalidRecordError("invalid_record",
                                         "Compacted topic cannot accept message without key.")

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset."""
        old = self.active_segment
        base = self.log_end_offset
        if old.size == 0:
            return old
        old.offset_index.flush(fsync=False)
        old.time_index.flush(fsync=False)
        segment = LogSegment(self.directory, base, self.config.index_interval_bytes)
        self.segments.append(segment)
        self.bases.append(base)
        self.producer_state.take_snapshot(base, fsync=False)
        if self.on_roll is not None:
            self.on_roll(self, base)
        else:
            self.flush_segments(base)
        return segment

    # --------------------------------------------------------------------- read

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool = True) -> FileSlice | None:
        """Bytes of batches from ``offset`` up to ``max_bytes`` and below ``max_offset``."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]"
            )
        if offset >= max_offset:
            return None
        i = max(0, bisect_right(self.bases, offset) - 1)
        for segment in self.segments[i:]:
            if segment.base_offset >= max_offset:
                return None
            if max_offset >= segment.next_offset:
                max_position = segment.size
            else:
                max_position = segment.position_of(max_offset)
            sl = segment.read(offset, max_bytes, max_position, min_one_batch)
            if sl is not None:
                return sl if sl.length > 0 else None
        return None

    def batches_from(self, offset: int) -> list[tuple[LogSegment, int, BatchHeader]]:
        out = []
        i = max(0, bisect_right(self.bases, offset) - 1)
        for segment in self.segments[i:]:
            found = segment.find_position(offset)
            if found is None:
                continue
            for pos, header in segment.batches(found[0]):
                out.append((segment, pos, header))
        return out

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            start = max(segment.time_index.lookup(timestamp), self.log_start_offset, segment.base_offset)
            found = segment.find_position(start)
            if found is None:
                continue
            for pos, header in segment.batches(found[0]):
                if header.max_timestamp < timestamp or header.last_offset < self.log_start_offset:
                    continue
                _, records = record_codec.decode_batch(segment.read_batch(pos, header))
                for rec in records:
                    if rec.timestamp >= timestamp and rec.offset >= self.log_start_offset:
                        return rec.offset, rec.timestamp
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        best: LogSegment | None = None
        for segment in self.segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None:
            return None
        target = best.offset_of_max_timestamp
        found = best.find_position(target)
        if found is None:
            return None
        pos, header = found
        _, records = record_codec.decode_batch(best.read_batch(pos, header))
        for rec in records:
            if rec.timestamp == best.max_timestamp and rec.offset >= self.log_start_offset:
                return rec.offset, rec.timestamp
        return header.last_offset, header.max_timestamp

    # ------------------------------------------------------------ deletion

    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (DeleteRecords); return it."""
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._delete_segments_below_start()
        return self.log_start_offset

    def _delete_segments_below_start(self) -> int:
        deleted = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self._delete_first_segment()
            deleted += 1
        return deleted

    def _delete_first_segment(self) -> None:
        segment = self.segments.pop(0)
        self.bases.pop(0)
        segment.delete()
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)

    def delete_old_segments(self, now: int | None = None) -> int:
        """Apply retention.ms / retention.bytes (``delete`` policy); return segments deleted."""
        now = now_ms() if now is None else now
        deleted = self._delete_segments_below_start()
        if "delete" not in self.config.cleanup_policy:
            return deleted
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            while len(self.segments) > 1 and now - self.segments[0].largest_timestamp > retention_ms:
                self._delete_first_segment()
                deleted += 1
            active = self.active_segment
            if active.size > 0 and now - active.largest_timestamp > retention_ms:
                # Every record is expired: roll so the old active segment can go.
                self.roll()
                self._delete_first_segment()
                deleted += 1
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            excess = self.size_in_bytes - retention_bytes
            while len(self.segments) > 1 and excess - self.segments[0].size >= 0:
                excess -= self.segments[0].size
                self._delete_first_segment()
                deleted += 1
        if self.recovery_point < self.log_start_offset:
            self.recovery_point = self.log_start_offset
        return deleted

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or above ``offset`` (a follower diverged)."""
        if offset >= self.log_end_offset:
            return
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            seg = self.segments.pop()
            self.bases.pop()
            seg.delete()
        self.active_segment.truncate_to(offset)
        self.log_end_offset = max(offset, self.log_start_offset)
        self.recovery_point = min(self.recovery_point, offset)
        self.producer_state.truncate_after(offset)
        self.producer_state.delete_snapshots_after(offset)
        self.leader_epochs.truncate_from_end(offset)

    # --------------------------------------------------------------- flushing

    def flush(self) -> None:
        """fsync everything appended so far and move the recovery point."""
        self.flush_segments(self.log_end_offset)
        self.producer_state.take_snapshot(self.log_end_offset)

    def flush_segments(self, up_to: int) -> None:
        """fsync the segments holding offsets below ``up_to``; may run off the event loop."""
        if up_to <= self.recovery_point:
            return
        for segment in list(self.segments):
            if segment.base_offset >= up_to:
                break
            if segment.next_offset <= self.recovery_point and segment is not self.segments[-1]:
                continue
            try:
                segment.flush()
            except OSError:
                return  # deleted concurrently by retention
        self.recovery_point = max(self.recovery_point, up_to)
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms()

    def close(self) -> None:
        for segment in self.segments:
            segment.close()

    def delete_files(self) -> None:
        for segment in self.segments:
            segment.delete()
