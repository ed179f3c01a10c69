"""The ``__consumer_offsets`` topic as the GroupCoordinator's log, and coordinator lookup.

The topic is created on first use (FindCoordinator), as Kafka does, with
``offsets.topic.num.partitions`` partitions and ``cleanup.policy=compact``.
It is the group coordinator runtime's ``PartitionWriter``: records are
appended through the ReplicaManager like any produce (acks=-1), committed once
the partition's high watermark passes them, and read back batch by batch
when a partition is loaded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from kio.schema.errors import ErrorCode

from dmq.cluster.admin_manager import AdminManager
from dmq.cluster.metadata import OFFSETS_TOPIC, BrokerInfo, MetadataError, MetadataStore
from dmq.group.coordinator import GroupCoordinator
from dmq.record.records import decode_batch, encode_batch
from dmq.replication.replica_manager import ReplicaManager

log = logging.getLogger("dmq.group")


class OffsetsTopic:
    def __init__(self, replica_manager: ReplicaManager, admin_manager: AdminManager,
                 num_partitions: int, segment_bytes: int, replication_factor: int = 1,
                 commit_timeout_ms: int = 5000) -> None:
        self.replica_manager = replica_manager
        self.admin_manager = admin_manager
        self.num_partitions = num_partitions
        self.segment_bytes = segment_bytes
        self.replication_factor = replication_factor
        self.commit_timeout_ms = commit_timeout_ms

    async def ensure_exists(self) -> bool:
        if self.admin_manager.store.topic(OFFSETS_TOPIC) is not None:
            return True
        live = len(self.admin_manager.store.brokers()) or 1
        rf = min(self.replication_factor, live)
        if rf < self.replication_factor and live > 1:
            log.warning("creating %s with replication factor %d: only %d brokers are live "
                        "(offsets.topic.replication.factor=%d)", OFFSETS_TOPIC, rf, live,
                        self.replication_factor)
        try:
            await self.admin_manager.create_topic(OFFSETS_TOPIC, self.num_partitions, rf, {
                "cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes),
                "compression.type": "producer"})
            log.info("created %s with %d partitions", OFFSETS_TOPIC, self.num_partitions)
            return True
        except MetadataError as e:
            if e.error == "topic_already_exists":
                return True  # another broker created it first
            log.error("cannot create %s: %s", OFFSETS_TOPIC, e)
            return False

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> tuple[ErrorCode, int]:
        """The runtime's append: one batch, acks=all; ``(error, last offset)``."""
        if self.admin_manager.store.topic(OFFSETS_TOPIC) is None:
            # Created (async) by FindCoordinator or before a group write: Coordinators.
            return ErrorCode.coordinator_not_available, -1
        batch = encode_batch([(k, v, []) for k, v in records], timestamp=int(time.time() * 1000))
        result = self.replica_manager.append_to_local_log(OFFSETS_TOPIC, partition, batch, -1)
        return result.error, result.last_offset

    async def wait_committed(self, partition: int, last_offset: int) -> ErrorCode:
        """Until every in-sync replica has ``last_offset`` (offsets.commit.timeout.ms at most)."""
        error, _ = await self.replica_manager.wait_for_replication(
            OFFSETS_TOPIC, partition, last_offset, self.commit_timeout_ms / 1000)
        return error

    def read(self, partition: int) -> Iterator[tuple[int, bytes, bytes | None]]:
        p = self.replica_manager.get_partition(OFFSETS_TOPIC, partition)
        if p is None:
            return
        lg = p.log
        for segment, pos, header in lg.batches_from(lg.log_start_offset):
            if header.is_control:
                continue
            _, records = decode_batch(segment.read_batch(pos, header))
            for r in records:
                if r.key is not None and r.offset >= lg.log_start_offset:
                    yield r.offset, r.key, r.value


class Coordinators:
    """Which broker coordinates what.

    The leader of the group's ``__consumer_offsets`` partition (on a single
    broker: this one, for every group); ``set_led_partitions`` loads the groups
    of partitions this broker starts leading and unloads the others.
    """

    def __init__(self, group: GroupCoordinator, offsets: OffsetsTopic, store: MetadataStore,
                 broker_id: int) -> None:
        self.group = group
        self.offsets = offsets
        self.store = store
        self.broker_id = broker_id

    async def group_coordinator_node(self, group_id: str) -> BrokerInfo | None:
        if not await self.offsets.ensure_exists():
            return None
        topic = self.store.topic(OFFSETS_TOPIC)
        if topic is None:
            return None
        state = topic.partitions.get(self.group.partition_for(group_id))
        if state is None or state.leader < 0:
            return None
        for b in self.store.brokers():
            if b.broker_id == state.leader:
                return b
        return None

    async def ensure_offsets_topic(self) -> bool:
        """Create ``__consumer_offsets`` if it is missing (a group write without a
        FindCoordinator first); False when it cannot be created now."""
        return await self.offsets.ensure_exists()

    def set_led_partitions(self, led: dict[int, int]) -> None:
        """Follow the leadership of ``__consumer_offsets``: ``{partition: leader epoch}``."""
        self.group.set_led(led)
