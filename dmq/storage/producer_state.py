"""Idempotent producer state of one partition (Kafka's ProducerStateManager).

For each producer id: its epoch and the metadata of its last 5 batches
(first/last sequence, first/last offset). ``check()`` classifies an incoming
batch as new, duplicate (answered with the original offsets) or invalid;
``update()`` records an appended batch. State is rebuilt after a restart from
the newest snapshot ``<20-digit offset>.snapshot`` (JSON with a CRC32C) plus
the batches from that offset on, so a retry after a crash is still deduplicated.
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass, field

from crc32c import crc32c

from dmq.record.batch import BatchHeader, InvalidRecordError

BATCHES_KEPT = 5
SNAPSHOT_SUFFIX = ".snapshot"
_SEQ_WRAP = 2**31


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    last_timestamp: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


class ProducerStateManager:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Validate an idempotent batch; return the original batch if it is a duplicate."""
        entry = self.producers.get(header.producer_id)
        first_seq = header.base_sequence
        if entry is None:
            if first_seq != 0:
                raise InvalidRecordError(
                    "out_of_order_sequence_number",
                    f"unknown producer {header.producer_id} sent sequence {first_seq}, expected 0",
                )
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidRecordError(
                "invalid_producer_epoch",
                f"producer epoch {header.producer_epoch} is older than {entry.epoch}",
            )
        if header.producer_epoch > entry.epoch:
            if first_seq != 0:
                raise InvalidRecordError(
                    "out_of_order_sequence_number",
                    f"new epoch {header.producer_epoch} must start at sequence 0, got {first_seq}",
                )
            return None
        last_seq = header.last_sequence
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        expected = (entry.last_seq + 1) % _SEQ_WRAP
        if first_seq != expected:
            raise InvalidRecordError(
                "out_of_order_sequence_number",
                f"producer {header.producer_id} sent sequence {first_seq}, expected {expected}",
            )
        return None

    def update(self, header: BatchHeader) -> None:
        """Record an appended batch (offsets assigned)."""
        if header.producer_id < 0:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerEntry(header.producer_id, header.producer_epoch, header.max_timestamp)
            self.producers[header.producer_id] = entry
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        if header.base_sequence >= 0:
            entry.batches.append(
                BatchMetadata(header.base_sequence, header.last_sequence,
                              header.base_offset, header.last_offset)
            )

    def truncate_after(self, offset: int) -> None:
        """Forget batches at or past ``offset`` (the log was truncated)."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            if len(kept) != len(entry.batches):
                entry.batches = deque(kept, maxlen=BATCHES_KEPT)
            if not entry.batches:
                del self.producers[pid]

    def remove_expired(self, now_ms: int, expiration_ms: int) -> None:
        for pid in [p for p, e in self.producers.items() if now_ms - e.last_timestamp > expiration_ms]:
            del self.producers[pid]

    # -------------------------------------------------------------- snapshots

    def snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.directory):
            if name.endswith(SNAPSHOT_SUFFIX):
                try:
                    out.append(int(name[: -len(SNAPSHOT_SUFFIX)]))
                except ValueError:
                    continue
        return sorted(out)

    def _path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def take_snapshot(self, offset: int, fsync: bool = True) -> None:
        """Write the state as of ``offset`` (every batch below it applied); keep two."""
        body = json.dumps(
            [
                [e.producer_id, e.epoch, e.last_timestamp,
                 [[b.first_seq, b.last_seq, b.first_offset, b.last_offset] for b in e.batches]]
                for e in self.producers.values()
            ],
            separators=(",", ":"),
        ).encode()
        data = json.dumps({"version": 1, "crc": crc32c(body)}).encode() + b"\n" + body
        tmp = self._path(offset) + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self._path(offset))
        for old in self.snapshot_offsets()[:-2]:
            if old != offset:
                self.delete_snapshot(old)

    def delete_snapshot(self, offset: int) -> None:
        try:
            os.unlink(self._path(offset))
        except FileNotFoundError:
            pass

    def delete_snapshots_after(self, offset: int) -> None:
        for snap in self.snapshot_offsets():
            if snap > offset:
                self.delete_snapshot(snap)

    def load_latest_snapshot(self, max_offset: int) -> int:
        """Load the newest valid snapshot at or below ``max_offset``; return its offset or -1."""
        self.producers = {}
        for snap in reversed(self.snapshot_offsets()):
            if snap > max_offset:
                continue
            try:
                with open(self._path(snap), "rb") as f:
                    head, _, body = f.read().partition(b"\n")
                meta = json.loads(head)
                if meta.get("version") != 1 or crc32c(body) != meta.get("crc"):
                    raise ValueError("bad snapshot")
                for pid, epoch, ts, batches in json.loads(body):
                    entry = ProducerEntry(pid, epoch, ts)
                    for b in batches:
                        entry.batches.append(BatchMetadata(*b))
                    self.producers[pid] = entry
                return snap
            except (OSError, ValueError, TypeError):
                self.delete_snapshot(snap)
                self.producers = {}
        return -1
