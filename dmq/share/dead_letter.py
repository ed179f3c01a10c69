"""Dead letters (dmq's, beyond Kafka): records a share group archives for a reason — a
REJECT, or the delivery count limit — are written to the group's
``share.dead.letter.topic`` before their archiving is persisted.

A dead letter is the record as it was (key, value, headers) with dmq's headers saying
why and from where::

    dmq.dlq.reason          rejected | delivery-limit
    dmq.dlq.group           the share group
    dmq.dlq.topic           the record's topic
    dmq.dlq.partition       its partition (decimal)
    dmq.dlq.offset          its offset (decimal)
    dmq.dlq.delivery.count  how many times it was delivered (decimal)
    dmq.dlq.timestamp       its timestamp, epoch milliseconds (decimal)

The topic is created on first use with the source topic's partition count and
replication factor (capped at the live brokers); a record of partition p goes to partition
p modulo the dead-letter topic's partition count, so one source partition's dead letters
keep their order.

``DeadLetterWriter`` writes them as an idempotent producer (Kafka's rules: a producer id,
epoch 0, a sequence per partition; one batch in flight per partition, retried as it was
until it is answered): a batch whose answer was lost (a timeout, a connection that
closed, a leader that moved) is sent again and, if it had landed, recognised as a
duplicate, so a live broker writes each dead letter once. It appends locally where this
broker leads the dead-letter partition (acks=all) and sends Produce to the leader
otherwise. Retriable errors are retried with a backoff for ``give_up_s``; then, or on an
error no retry cures (a record larger than the topic allows, say), the write is given up
and logged: the records are archived without their dead letters rather than delivered
again (a given-up write may still have landed: never a duplicate, at worst a lost dead
letter). Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta

from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_req

from dmq.client.channels import BrokerChannels, BrokerUnreachable
from dmq.cluster.admin_manager import AdminManager
from dmq.cluster.metadata import MetadataError, MetadataStore
from dmq.protocol.codec import make
from dmq.record.records import Record, encode_batch
from dmq.replication.replica_manager import ReplicaManager

log = logging.getLogger("dmq.share")

REASON = "dmq.dlq.reason"
GROUP = "dmq.dlq.group"
TOPIC = "dmq.dlq.topic"
PARTITION = "dmq.dlq.partition"
OFFSET = "dmq.dlq.offset"
DELIVERY_COUNT = "dmq.dlq.delivery.count"
TIMESTAMP = "dmq.dlq.timestamp"

MAX_BATCH_BYTES = 512 * 1024  # well below max.message.bytes' default (1 MiB)

_RETRIABLE = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available,
    ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out,
    ErrorCode.network_exception, ErrorCode.kafka_storage_error, ErrorCode.fenced_leader_epoch,
    ErrorCode.not_controller, ErrorCode.broker_not_available, ErrorCode.concurrent_transactions,
})
# The partition no longer knows this producer's sequence (its state expired, say): start over.
_RESET = frozenset({ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id,
                    ErrorCode.invalid_producer_epoch})


@dataclass(frozen=True, slots=True)
class DeadLetter:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def dead_letter(record: Record, reason: str, group_id: str, topic: str, partition: int,
                delivery_count: int) -> DeadLetter:
    """The dead letter of ``record`` (its key, value and headers, then dmq's)."""
    ours = ((REASON, reason), (GROUP, group_id), (TOPIC, topic), (PARTITION, str(partition)),
            (OFFSET, str(record.offset)), (DELIVERY_COUNT, str(delivery_count)),
            (TIMESTAMP, str(record.timestamp)))
    return DeadLetter(record.key, record.value,
                      tuple(record.headers) + tuple((k, v.encode()) for k, v in ours))


@dataclass(slots=True)
class _Producer:
    """The idempotent producer of one dead-letter partition."""
    producer_id: int
    epoch: int = 0
    sequence: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class DeadLetterWriter:
    def __init__(self, broker_id: int, store: MetadataStore, admin_manager: AdminManager,
                 replica_manager: ReplicaManager, channels: BrokerChannels,
                 new_producer_id: Callable[[], Awaitable[int]], *, request_timeout_s: float = 10.0,
                 give_up_s: float = 120.0, backoff_s: float = 0.2) -> None:
        self.broker_id = broker_id
        self.store = store
        self.admin_manager = admin_manager
        self.replica_manager = replica_manager
        self.channels = channels
        self.new_producer_id = new_producer_id
        self.request_timeout_s = request_timeout_s
        self.give_up_s = give_up_s
        self.backoff_s = backoff_s
        self._producers: dict[tuple[str, int], _Producer] = {}
        self._creating: dict[str, asyncio.Lock] = {}

    async def write(self, topic: str, source_topic: str, source_partition: int,
                    letters: list[DeadLetter]) -> bool:
        """Write ``letters`` to ``topic`` (created if missing), in order; True once every
        one is written (replicated to the in-sync replicas), False if the write was given
        up (logged)."""
        if not letters:
            return True
        deadline = time.monotonic() + self.give_up_s
        partitions = await self._ensure_topic(topic, source_topic, deadline)
        if partitions is None:
            return False
        partition = source_partition % partitions
        for chunk in _chunks(letters):
            if not await self._write_batch(topic, partition, chunk, deadline):
                log.error("dead letters of %s-%d (%d records) could not be written to %s-%d; "
                          "archived without them", source_topic, source_partition, len(letters), topic, partition)
                return False
        return True

    async def _ensure_topic(self, topic: str, source_topic: str, deadline: float) -> int | None:
        """The dead-letter topic's partition count, creating it like the source topic."""
        async with self._creating.setdefault(topic, asyncio.Lock()):
            while True:
                meta = self.store.topic(topic)
                if meta is not None:
                    return len(meta.partitions)
                source = self.store.topic(source_topic)
                count = len(source.partitions) if source is not None else 1
                replicas = len(next(iter(source.partitions.values())).replicas) if source and source.partitions else 1
                rf = max(1, min(replicas, len(self.store.brokers()) or 1))
                try:
                    created = await self.admin_manager.create_topic(topic, count, rf, {})
                    log.info("created dead-letter topic %s (%d partitions, replication factor %d)",
                             topic, count, rf)
                    return len(created.partitions)
                except MetadataError as e:
                    if e.error != "topic_already_exists":
                        log.warning("cannot create dead-letter topic %s: %s", topic, e)
                        if e.error in ("invalid_topic_exception", "invalid_config", "invalid_replication_factor",
                                       "policy_violation") or time.monotonic() >= deadline:
                            return None
                if time.monotonic() >= deadline:
                    return None
                await asyncio.sleep(self.backoff_s)  # created elsewhere: wait for the metadata

    async def _producer(self, topic: str, partition: int) -> _Producer:
        producer = self._producers.get((topic, partition))
        if producer is None:
            producer = self._producers[(topic, partition)] = _Producer(await self.new_producer_id())
        return producer

    async def _write_batch(self, topic: str, partition: int, letters: list[DeadLetter], deadline: float) -> bool:
        producer = await self._producer(topic, partition)
        async with producer.lock:  # one batch in flight per partition: sequences in order
            now = int(time.time() * 1000)
            batch = encode_batch([(d.key, d.value, list(d.headers)) for d in letters], timestamp=now,
                                 producer_id=producer.producer_id, producer_epoch=producer.epoch,
                                 base_sequence=producer.sequence)
            backoff = self.backoff_s
            while True:
                error = await self._send(topic, partition, batch)
                if error in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
                    producer.sequence += len(letters)
                    return True
                if error in _RESET:
                    log.info("dead letters to %s-%d: %s; starting over with a new producer id",
                             topic, partition, error.name)
                    producer.producer_id, producer.epoch, producer.sequence = await self.new_producer_id(), 0, 0
                    batch = encode_batch([(d.key, d.value, list(d.headers)) for d in letters], timestamp=now,
                                         producer_id=producer.producer_id, producer_epoch=0, base_sequence=0)
                elif error not in _RETRIABLE:
                    log.error("dead letters to %s-%d refused: %s", topic, partition, error.name)
                    return False
                if time.monotonic() >= deadline:
                    # The batch may yet land (an answer lost): this producer's next batch must
                    # not reuse its sequences. A new producer id leaves no gap to explain.
                    producer.producer_id, producer.epoch, producer.sequence = await self.new_producer_id(), 0, 0
                    return False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def _send(self, topic: str, partition: int, batch: bytes) -> ErrorCode:
        meta = self.store.topic(topic)
        state = meta.partitions.get(partition) if meta is not None else None
        if state is None or state.leader < 0:
            return ErrorCode.leader_not_available
        if state.leader == self.broker_id:
            local = self.replica_manager.get_partition(topic, partition)
            if local is None or not local.is_leader:
                return ErrorCode.not_leader_or_follower
            results = await self.replica_manager.append_records({(topic, partition): batch}, -1,
                                                                self.request_timeout_s)
            return results[(topic, partition)].error
        request = make(produce_req.ProduceRequest, transactional_id=None, acks=-1,
                       timeout=timedelta(seconds=self.request_timeout_s), topic_data=(
                           make(produce_req.TopicProduceData, name=topic, partition_data=(
                               make(produce_req.PartitionProduceData, index=partition, records=batch),)),))
        try:
            response = await self.channels.request(state.leader, request, self.request_timeout_s + 5)
        except BrokerUnreachable:
            return ErrorCode.network_exception
        for t in response.responses:
            for p in t.partition_responses:
                if t.name == topic and p.index == partition:
                    return ErrorCode(p.error_code)
        return ErrorCode.unknown_server_error


def _chunks(letters: list[DeadLetter]) -> list[list[DeadLetter]]:
    out: list[list[DeadLetter]] = [[]]
    size = 0
    for d in letters:
        n = len(d.key or b"") + len(d.value or b"") + sum(len(k) + len(v or b"") for k, v in d.headers) + 32
        if out[-1] and size + n > MAX_BATCH_BYTES:
            out.append([])
            size = 0
        out[-1].append(d)
        size += n
    return out
