"""DelayedDelivery: the leader's side of delayed delivery (RocketMQ's timer, Kafka's log).

Every replica knows its partitions' pending delayed records (``Log.delayed``,
``dmq.storage.delayed``); the leader delivers them. ``tick`` (every
``TICK_MS`` on the event loop) takes, for each partition it leads, the records
whose time has come — up to ``MAX_PER_APPEND`` records and about
``MAX_BYTES_PER_APPEND`` bytes at a time, in deliver-time order — reads them
back from their DELAYED control records, and appends, in one write, for each
run of them that fits one batch of the topic's ``max.message.bytes``, a
DELIVERED control record naming the run followed by a batch holding it again,
compressed with the topic's ``compression.type``
(``dmq.record.delayed.delivery``). The Log observes the DELIVERED records, so
they are no longer pending; followers do the same when they copy them.
Consumers see the records once the high watermark passes them.

Exactly once: a delivery is one append of markers each followed by its records.
A follower that becomes leader with a marker but not its records (the old
leader died between two fetches of the two batches, or a crash tore the write)
finds the marker as the last batch it had when its leader epoch began (any
batch after that one is its own: a client's produce may land before the first
tick) and appends the records alone (``_finish_torn``), once per epoch; an
append that fails on a disk error is tried again at the next tick, one that
would fail the same way every time is logged and left. A
leader that dies before a follower copied the marker leaves the records pending
on the follower, which delivers them as leader; the dead leader's unreplicated
delivery is truncated when it returns. A record whose DELAYED control record
cannot be read (deleted by DeleteRecords, corrupt) is named by a DELIVERED
record and not delivered, with an error in the log.

Event-loop thread only; plain synchronous calls into the ReplicaManager.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from kio.schema.errors import ErrorCode

from dmq.record.batch import InvalidRecordError, validate_batches
from dmq.record.delayed import (
    DELAYED_TYPE,
    DELIVERED_TYPE,
    DelayedRecord,
    decode_delayed,
    decode_delivered,
    delivered_marker,
    delivery,
    delivery_chunks,
    delivery_records,
    read_control_batch,
    record_size_bound,
)
from dmq.replication.partition import Partition, PartitionError
from dmq.replication.replica_manager import ReplicaManager, TopicPartition
from dmq.storage.log import Log
from dmq.storage.producer_state import AppendOrigin

log = logging.getLogger("dmq.delayed")

TICK_MS = 100
MAX_PER_APPEND = 500
MAX_BYTES_PER_APPEND = 4 << 20  # about: a delivery takes at least one record
MAX_BYTES_PER_TICK = 16 << 20  # per partition: a backlog of large records goes over several ticks
CACHED_BATCHES = 16  # decoded DELAYED control batches kept per partition led
MAX_PER_TICK = 50_000  # a partition's backlog goes over several ticks, others' in between


Decoded = dict[int, DelayedRecord]  # the DELAYED records of one control batch, by offset


def read_delayed(lg: Log, offsets: list[int],
                 cache: OrderedDict[int, Decoded] | None = None) -> dict[int, DelayedRecord]:
    """The DELAYED records at ``offsets`` that can be read (a missing or unreadable one is
    left out). Each control batch is decoded once; with ``cache`` (base offset -> its
    records, least recently used first), once across calls: a producer's batch of
    delayed records is delivered in several slices."""
    out: dict[int, DelayedRecord] = {}
    for offset in sorted(set(offsets)):
        if offset in out or offset < lg.log_start_offset:
            continue
        found = lg.batch_at(offset)
        if found is None:
            continue
        segment, pos, header = found
        if not header.is_control or header.producer_id >= 0:
            continue
        records = cache.get(header.base_offset) if cache is not None else None
        if records is None:
            records = {}
            try:
                for delta, control_type, value in read_control_batch(segment.read_batch(pos, header)):
                    if control_type == DELAYED_TYPE:
                        records[header.base_offset + delta] = decode_delayed(value)
            except (InvalidRecordError, ValueError) as e:
                log.error("%s: unreadable DELAYED control batch at offset %d: %s", lg.name,
                          header.base_offset, e)
            if cache is not None:
                cache[header.base_offset] = records
                while len(cache) > CACHED_BATCHES:
                    cache.popitem(last=False)
        elif cache is not None:
            cache.move_to_end(header.base_offset)
        for wanted in offsets:
            if wanted in records:
                out[wanted] = records[wanted]
    return out


class _Led:
    __slots__ = ("log", "epoch", "decoded")

    def __init__(self, lg: Log, epoch: int) -> None:
        self.log = lg
        self.epoch = epoch
        self.decoded: OrderedDict[int, Decoded] = OrderedDict()


class DelayedDelivery:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.replica_manager = replica_manager
        # Per partition led: the log and leader epoch checked for a torn delivery, and the
        # decoded DELAYED batches of that log. Kept with the Log object itself: a topic
        # deleted and created again under the same name (leader epoch 0 again) has a new
        # Log whose offsets mean other records.
        self._led: dict[TopicPartition, _Led] = {}
        self.delivered = 0  # records delivered by this broker since it started

    def tick(self, now_ms: int | None = None) -> int:
        """Deliver what is due in the partitions this broker leads; returns how many records."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        delivered = 0
        rm = self.replica_manager
        for key in [k for k in self._led if k not in rm.partitions]:
            del self._led[key]  # deleted or moved away
        for key, partition in list(rm.partitions.items()):
            if not partition.is_leader:
                self._led.pop(key, None)
                continue
            led = self._led.get(key)
            if led is None or led.log is not partition.log or led.epoch != partition.leader_epoch:
                self._led.pop(key, None)  # the log may differ under a new epoch, or be another
                finished = self._finish_torn(key, partition, now)
                if finished < 0:
                    continue  # not appended: tried again next tick, before any delivery
                self._led[key] = _Led(partition.log, partition.leader_epoch)
                delivered += finished
            lg = partition.log
            first = lg.delayed.next_due()
            if first is None or first > now:
                continue
            due = lg.delayed.due(now, MAX_PER_TICK)
            i = tick_bytes = 0
            while i < len(due) and tick_bytes < MAX_BYTES_PER_TICK:
                done = self._deliver(key, partition, due[i : i + MAX_PER_APPEND], now)
                if done is None:
                    break  # not appended: the rest again next tick
                count, taken, size = done
                delivered += count
                i += taken
                tick_bytes += size
        self.delivered += delivered
        return delivered

    def _deliver(self, key: TopicPartition, partition: Partition, due: list[tuple[int, int]],
                 now: int) -> tuple[int, int, int] | None:
        """Deliver the first of ``due`` (at least one, about ``MAX_BYTES_PER_APPEND``
        bytes); (records delivered, entries of ``due`` done, their bytes), None when the
        append failed."""
        lg = partition.log
        led = self._led.get(key)
        cache = led.decoded if led is not None else None
        entries: list[tuple[int, DelayedRecord]] = []
        lost: list[tuple[int, int]] = []
        taken = size = 0
        for deliver_at, offset in due:  # read one at a time: stop at the byte budget
            found = read_delayed(lg, [offset], cache).get(offset)
            taken += 1
            if found is None:
                lost.append((offset, deliver_at))
                continue
            entries.append((offset, found))
            size += record_size_bound(found)
            if size >= MAX_BYTES_PER_APPEND:
                break
        if lost:
            log.error("%s: %d delayed records cannot be read back (deleted or corrupt); "
                      "they are dropped: offsets %s", lg.name, len(lost), [o for o, _ in lost[:10]])
        # The unreadable ones are named too, so they stop being pending. Each run that fits
        # one batch of max.message.bytes gets its own DELIVERED marker right before it, so
        # a write torn between two batches leaves a marker with its records, or the last
        # batch a marker whose records a next leader appends (_finish_torn).
        config = lg.config
        codec, level = config.compression_codec or 0, config.compression_level
        data = (delivered_marker(lost, now) if lost else b"") + b"".join(
            delivery(chunk, now, codec, level) for chunk in delivery_chunks(entries, config.max_message_bytes))
        try:
            partition.append_records_to_leader(data, validate_batches(data, len(data)), 1,
                                               AppendOrigin.DELAYED)
        except (PartitionError, InvalidRecordError, OSError) as e:
            log.warning("%s: delivering %d delayed records failed (%s); retrying", lg.name,
                        taken, e)
            return None
        self.replica_manager.wake(key)
        return len(entries), taken, size

    def _finish_torn(self, key: TopicPartition, partition: Partition, now: int) -> int:
        """As a new leader: a DELIVERED record that was the last batch of the log when this
        leader epoch began lost the records that followed it (written together by the old
        leader); append them. Returns how many, -1 when the append failed."""
        lg = partition.log
        start = partition.leader_epoch_start_offset
        if start <= lg.log_start_offset or start > lg.log_end_offset:
            return 0
        before = lg.batches_from(start - 1)
        if not before:
            return 0
        segment, pos, header = before[0]
        if header.last_offset != start - 1 or not header.is_control or header.producer_id >= 0:
            return 0
        try:
            named: list[tuple[int, int]] = []
            for _, control_type, value in read_control_batch(segment.read_batch(pos, header)):
                if control_type == DELIVERED_TYPE:
                    named += decode_delivered(value)
        except (InvalidRecordError, ValueError):
            return 0
        if not named:
            return 0
        found = read_delayed(lg, [offset for offset, _ in named])
        entries = [(offset, found[offset]) for offset, _ in sorted(named, key=lambda e: (e[1], e[0]))
                   if offset in found]
        if not entries:
            return 0
        config = lg.config
        data = delivery_records(entries, config.compression_codec or 0, config.compression_level)
        try:
            partition.append_records_to_leader(data, validate_batches(data, len(data)), 1,
                                               AppendOrigin.DELAYED)
        except (OSError, PartitionError, InvalidRecordError) as e:
            # A disk error may pass; anything else (the records refused) would recur.
            if isinstance(e, OSError) or (isinstance(e, PartitionError) and e.error in (
                    ErrorCode.kafka_storage_error, ErrorCode.not_enough_replicas)):
                log.warning("%s: finishing a torn delivery failed (%s); retrying", lg.name, e)
                return -1
            log.error("%s: cannot finish a torn delivery of %d delayed records (%s); they are "
                      "not delivered", lg.name, len(entries), e)
            return 0
        log.info("%s: finished a delivery of %d delayed records the previous leader began",
                 lg.name, len(entries))
        self.replica_manager.wake(key)
        return len(entries)
