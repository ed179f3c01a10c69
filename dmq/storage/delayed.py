"""DelayedRecords: the delayed records of one partition that are not delivered yet (sans-io).

Every replica keeps it, from the control batches it appends (``observe``): a
DELAYED record (``dmq.record.delayed``) adds an entry, a DELIVERED record removes
the entries it names, and a transaction marker settles the entries of a
transactional producer (COMMIT: they become due at their time; ABORT: dropped).
The partition's leader delivers the due entries (``due``); a follower that
becomes leader has them all, as it has the log.

Invariants:

- an entry is pending from the append of its DELAYED record until the append of
  the DELIVERED record naming it; ``scanned_to`` is the offset up to which
  batches have been observed (the log end offset once loaded);
- an entry of a transactional producer waits in ``awaiting`` until that
  producer's next marker; only pending entries are due;
- entries are (deliver_at, offset) pairs in buckets of one second (an
  ``array('q')`` each: 16 bytes an entry) under a heap of bucket keys, so a
  million pending records cost ~16 MB and the earliest is found at once.

Snapshots, as the producer state's: ``<20-digit offset>.delayed`` holds the
state as of that offset (every batch below it observed); loading takes the
newest at or below the log end and replays the control batches after it.
File format: magic ``DMQD``, version int16 (0), offset int64, pending count
int64, awaiting count int64, then (deliver_at int64, offset int64, producer id
int64) per entry (producer id -1 for pending ones), then CRC32C of all before.
"""

from __future__ import annotations

import heapq
import logging
import struct
from array import array
from collections.abc import Iterable

from crc32c import crc32c

from dmq.record.batch import BatchHeader, InvalidRecordError
from dmq.record.delayed import (
    DELAYED_TYPE,
    DELIVERED_TYPE,
    decode_delayed,
    decode_delivered,
    read_control_batch,
)
from dmq.storage.snapshot_files import SnapshotFiles

log = logging.getLogger("dmq.delayed")

SUFFIX = ".delayed"
_MAGIC = b"DMQD"
_HEAD = struct.Struct(">4shqqq")
_ENTRY = struct.Struct(">qqq")
_CRC = struct.Struct(">I")
BUCKET_MS = 1000


class DelayedRecords:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._snapshots = SnapshotFiles(directory, SUFFIX)
        self._buckets: dict[int, array[int]] = {}  # second -> deliver_at, offset, deliver_at, ...
        self._heap: list[int] = []  # bucket keys (possibly stale: empty buckets are skipped)
        self._sorted: set[int] = set()  # buckets in (deliver_at, offset) order
        self.pending = 0
        self.awaiting: dict[int, list[tuple[int, int]]] = {}  # producer id -> (deliver_at, offset)
        self.scanned_to = 0

    # ---------------------------------------------------------------- entries

    def add(self, offset: int, deliver_at: int, producer_id: int = -1) -> None:
        if producer_id >= 0:
            self.awaiting.setdefault(producer_id, []).append((deliver_at, offset))
            return
        key = deliver_at // BUCKET_MS
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = array("q")
            heapq.heappush(self._heap, key)
            self._sorted.add(key)
        elif key in self._sorted and (deliver_at, offset) < (bucket[-2], bucket[-1]):
            self._sorted.discard(key)
        bucket.append(deliver_at)
        bucket.append(offset)
        self.pending += 1

    def _sorted_bucket(self, key: int) -> array[int]:
        """Bucket ``key`` in (deliver_at, offset) order (sorted once, kept so by ``add``
        while entries come in order, as they do)."""
        bucket = self._buckets[key]
        if key not in self._sorted:
            pairs = sorted(zip(bucket[0::2], bucket[1::2], strict=True))
            bucket = self._buckets[key] = array("q", [v for pair in pairs for v in pair])
            self._sorted.add(key)
        return bucket

    def remove(self, delivered: Iterable[tuple[int, int]]) -> int:
        """Drop delivered (offset, deliver_at) entries; returns how many were pending.
        Deliveries take a bucket's earliest entries, so the usual case removes a prefix
        of the sorted bucket (one memmove); anything else filters the bucket once."""
        by_bucket: dict[int, set[int]] = {}
        for offset, deliver_at in delivered:
            by_bucket.setdefault(deliver_at // BUCKET_MS, set()).add(offset)
        removed = 0
        for key, offsets in by_bucket.items():
            if key not in self._buckets:
                continue
            bucket = self._sorted_bucket(key)
            k = len(offsets)
            if set(bucket[1 : 2 * k : 2]) == offsets:
                del bucket[: 2 * k]
                removed += k
            else:
                kept = array("q")
                for i in range(0, len(bucket), 2):
                    if bucket[i + 1] not in offsets:
                        kept.append(bucket[i])
                        kept.append(bucket[i + 1])
                removed += (len(bucket) - len(kept)) // 2
                self._buckets[key] = bucket = kept
            if not bucket:
                del self._buckets[key]
                self._sorted.discard(key)
        self.pending -= removed
        return removed

    def settle(self, producer_id: int, commit: bool) -> None:
        """A transaction marker of ``producer_id``: its waiting entries become pending or go."""
        waiting = self.awaiting.pop(producer_id, None)
        if waiting and commit:
            for deliver_at, offset in waiting:
                self.add(offset, deliver_at)

    def next_due(self) -> int | None:
        """A time at or before the earliest deliver time of a pending entry (the start of
        its one-second bucket); None when nothing is pending."""
        heap = self._heap
        while heap and heap[0] not in self._buckets:
            heapq.heappop(heap)
        return heap[0] * BUCKET_MS if heap else None

    def earliest(self) -> int | None:
        """The earliest deliver time of a pending entry."""
        first = self.next_due()
        if first is None:
            return None
        return self._sorted_bucket(first // BUCKET_MS)[0]

    def due(self, now_ms: int, limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` pending (deliver_at, offset) with deliver_at <= ``now_ms``, in
        deliver-time order (then offset). They stay pending until their DELIVERED record
        is observed."""
        first = self.next_due()
        if first is None or first > now_ms:
            return []
        out: list[tuple[int, int]] = []
        buckets = self._buckets
        last = now_ms // BUCKET_MS
        key = first // BUCKET_MS
        while key <= last and len(out) < limit:
            if key in buckets:
                bucket = self._sorted_bucket(key)
                for i in range(0, min(len(bucket), 2 * (limit - len(out))), 2):
                    if bucket[i] > now_ms:
                        break
                    out.append((bucket[i], bucket[i + 1]))
            key += 1
        return out

    def entries(self) -> Iterable[tuple[int, int, int]]:
        """(deliver_at, offset, producer id) of every entry; -1 for pending ones."""
        for bucket in self._buckets.values():
            for i in range(0, len(bucket), 2):
                yield bucket[i], bucket[i + 1], -1
        for producer_id, waiting in self.awaiting.items():
            for deliver_at, offset in waiting:
                yield deliver_at, offset, producer_id

    def min_offset(self) -> int | None:
        """The smallest offset of an entry (retention must keep it), None when there is none."""
        smallest = min((min(b[1::2]) for b in self._buckets.values()), default=None)
        for waiting in self.awaiting.values():
            for _, offset in waiting:
                smallest = offset if smallest is None else min(smallest, offset)
        return smallest

    def clear(self, scanned_to: int = 0) -> None:
        self._buckets.clear()
        self._heap.clear()
        self._sorted.clear()
        self.awaiting.clear()
        self.pending = 0
        self.scanned_to = scanned_to

    # --------------------------------------------------------------- observing

    def observe(self, header: BatchHeader, batch: bytes | bytearray | memoryview,
                marker: tuple[int, bool] | None = None) -> None:
        """Take one appended batch into account: ``marker`` is (producer id, commit) for a
        transaction marker. Only control batches matter; others just move ``scanned_to``."""
        self.scanned_to = max(self.scanned_to, header.last_offset + 1)
        if not header.is_control:
            return
        if header.producer_id >= 0:
            if marker is not None and header.producer_id in self.awaiting:
                self.settle(*marker)
            return
        try:
            for delta, control_type, value in read_control_batch(bytes(batch)):
                if control_type == DELAYED_TYPE:
                    record = decode_delayed(value)
                    self.add(header.base_offset + delta, record.deliver_at, record.producer_id)
                elif control_type == DELIVERED_TYPE:
                    self.remove(decode_delivered(value))
        except (InvalidRecordError, ValueError) as e:
            log.error("%s: unreadable control batch at offset %d: %s", self.directory,
                      header.base_offset, e)

    # --------------------------------------------------------------- snapshots

    def snapshot_offsets(self) -> list[int]:
        return self._snapshots.offsets()

    def take_snapshot(self, offset: int, fsync: bool = True) -> None:
        """Write the state as of ``offset`` (= ``scanned_to``); keep the newest two. Written
        even when nothing is pending (a few dozen bytes), so that loading and truncation
        read the log from the newest snapshot, not from its start."""
        entries = list(self.entries())
        out = bytearray(_HEAD.pack(_MAGIC, 0, offset, self.pending, len(entries) - self.pending))
        for deliver_at, entry_offset, producer_id in entries:
            out += _ENTRY.pack(deliver_at, entry_offset, producer_id)
        out += _CRC.pack(crc32c(bytes(out)))
        self._snapshots.write(offset, bytes(out), fsync)

    def delete_snapshots_after(self, offset: int) -> None:
        self._snapshots.delete_after(offset)

    def load_latest_snapshot(self, max_offset: int) -> int:
        """Load the newest readable snapshot at or below ``max_offset``; returns its offset
        (0 and an empty state when there is none: replay from the log start)."""
        for snap in self._snapshots.newest_first(max_offset):
            try:
                self._read(self._snapshots.read(snap), snap)
                return snap
            except (OSError, ValueError, struct.error) as e:
                log.warning("%s: delayed-records snapshot %d is unreadable (%s); trying an older one",
                            self.directory, snap, e)
        self.clear()
        return 0

    def _read(self, data: bytes, snap: int) -> None:
        if len(data) < _HEAD.size + _CRC.size or crc32c(data[:-_CRC.size]) != _CRC.unpack_from(data, len(data) - 4)[0]:
            raise ValueError("bad length or CRC")
        magic, version, offset, pending, awaiting = _HEAD.unpack_from(data, 0)
        if magic != _MAGIC or version < 0 or offset != snap:
            raise ValueError(f"magic {magic!r}, version {version}, offset {offset}")
        if len(data) != _HEAD.size + (pending + awaiting) * _ENTRY.size + _CRC.size:
            raise ValueError("entry count does not match the size")
        self.clear(offset)
        for deliver_at, entry_offset, producer_id in _ENTRY.iter_unpack(data[_HEAD.size:-_CRC.size]):
            self.add(entry_offset, deliver_at, producer_id)
