"""Partition: one topic-partition hosted by this broker, in the leader role.

Invariants: ``log.log_start_offset <= high_watermark <= log.log_end_offset``;
consumers read only below the high watermark; the high watermark is the
smallest log end offset in the ISR (on a single broker the ISR is this broker,
so it follows the log end offset). ``visible_bytes`` grows by the size of every
batch that moves below the high watermark: delayed fetches use it to see new
data without reading the log. Event-loop thread only.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from dmq.record.batch import InvalidRecordError, ValidatedBatches
from dmq.storage.log import AppendResult, Log, OffsetOutOfRangeError
from dmq.storage.segment import FileSlice


class PartitionError(Exception):
    def __init__(self, error: ErrorCode, message: str = "") -> None:
        super().__init__(message or error.name)
        self.error = error


@dataclass(slots=True)
class ReadResult:
    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    data: FileSlice | None


class Partition:
    def __init__(self, topic: str, index: int, topic_id: str, log: Log, broker_id: int,
                 leader_epoch: int, replicas: list[int], isr: list[int]) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.broker_id = broker_id
        self.leader_id = broker_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.isr = isr
        self.high_watermark = log.log_end_offset
        self.visible_bytes = 0

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    def append_records_to_leader(self, records: bytearray, batches: ValidatedBatches,
                                 required_acks: int) -> AppendResult:
        if not self.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower)
        min_isr = int(self.log.config["min.insync.replicas"])
        if required_acks == -1 and len(self.isr) < min_isr:
            raise PartitionError(
                ErrorCode.not_enough_replicas,
                f"The size of the current ISR {self.isr} is insufficient to satisfy "
                f"the min.isr requirement of {min_isr}",
            )
        try:
            result = self.log.append_as_leader(records, batches, self.leader_epoch)
        except InvalidRecordError:
            raise
        if not result.duplicate:
            self._maybe_increment_high_watermark(batches.total_size)
        return result

    def _maybe_increment_high_watermark(self, appended_bytes: int) -> None:
        # Single broker: the ISR is this replica alone, so HW follows the LEO.
        if self.isr == [self.broker_id] and self.high_watermark < self.log.log_end_offset:
            self.high_watermark = self.log.log_end_offset
            self.visible_bytes += appended_bytes

    def read(self, offset: int, max_bytes: int, min_one_batch: bool) -> ReadResult:
        lso = self.high_watermark
        try:
            data = self.log.read(offset, max_bytes, self.high_watermark, min_one_batch)
        except OffsetOutOfRangeError:
            return ReadResult(ErrorCode.offset_out_of_range, self.high_watermark,
                              self.log.log_start_offset, lso, None)
        return ReadResult(ErrorCode.none, self.high_watermark, self.log.log_start_offset, lso, data)

    def delete_records(self, offset: int) -> int:
        """Move the log start offset (DeleteRecords); -1 means 'the high watermark'."""
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise PartitionError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} is above the high watermark {self.high_watermark}",
            )
        return self.log.delete_records_before(target)
