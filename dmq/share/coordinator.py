"""ShareCoordinator: the share-partition states this broker coordinates (KIP-932).

One ``ShareStateShard`` per ``__share_group_state`` partition this broker leads, on the
CoordinatorRuntime (as the group and transaction coordinators): a write is answered
once its ShareSnapshot is replicated to the partition's in-sync replicas and replayed;
a new leader builds its shards by replaying the partition. The broker's backend calls
``set_led`` when leadership of ``__share_group_state`` partitions changes; the
handlers of APIs 83-87 and the ``BrokerSharePersister`` call the operations, which
answer NOT_COORDINATOR for a key whose state partition this broker does not lead.
Event-loop thread only.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import BrokerInfo, MetadataStore
from dmq.coordinator.runtime import (
    CoordinatorResult,
    CoordinatorRuntime,
    CoordinatorTopic,
    coordinator_broker,
)
from dmq.share import records as rec
from dmq.share.persister import ReadStateResult, SharePartitionKey, StateSummary
from dmq.share.records import UNKNOWN_DELIVERY_COMPLETE_COUNT, StateBatch
from dmq.share.shard import ShareStateShard

SHARE_STATE_TOPIC = rec.TOPIC


@dataclass(frozen=True, slots=True)
class ShareCoordinatorConfig:
    num_partitions: int = 50  # share.coordinator.state.topic.num.partitions


class ShareCoordinator:
    """Routes each share-partition key to the shard of its ``__share_group_state``
    partition. Invariant: a shard exists exactly for the partitions ``set_led`` last
    gave (with their leader epochs)."""

    def __init__(self, config: ShareCoordinatorConfig, topic: CoordinatorTopic,
                 store: MetadataStore | None = None,
                 partition_exists: Callable[[uuid.UUID, int], bool] | None = None,
                 commit_timeout_ms: int = 5000) -> None:
        self.config = config
        self.topic = topic
        self.store = store
        self.runtime: CoordinatorRuntime[ShareStateShard] = CoordinatorRuntime(
            topic, lambda p, epoch: ShareStateShard(p, epoch, partition_exists), commit_timeout_ms,
            name="share coordinator")

    def partition_for(self, key: SharePartitionKey) -> int:
        return rec.partition_for(key.group_id, key.topic_id, key.partition, self.config.num_partitions)

    async def coordinator_node(self, key: SharePartitionKey) -> BrokerInfo | None:
        """The leader of the key's ``__share_group_state`` partition (the topic is created
        on first use); None when there is none now."""
        if self.store is None or not await self.topic.ensure_exists():
            return None
        return coordinator_broker(self.store, SHARE_STATE_TOPIC, self.partition_for(key), self.runtime)

    def owns(self, key: SharePartitionKey) -> bool:
        return self.runtime.shard(self.partition_for(key)) is not None

    def set_led(self, led: dict[int, int]) -> None:
        """The ``__share_group_state`` partitions this broker leads, with their leader epochs."""
        self.runtime.set_led(led)

    async def close(self) -> None:
        await self.runtime.close()

    # ------------------------------------------------------------ operations
    #
    # Every operation on a share-partition's state runs once no write of that state is
    # pending (the runtime's ``key``). The shard holds committed state only, and each
    # operation's records depend on it (a read's leader-epoch bump is a whole snapshot, a
    # write is fenced by the stored leader epoch and merged into the stored batches); run
    # beside a write not yet committed, a new leader's read replaced an old leader's
    # acknowledged ACCEPT, and an old leader's write escaped the fence of a read just
    # before it. Operations on other share-partitions' states do not wait.

    async def initialize_state(self, key: SharePartitionKey, state_epoch: int,
                               start_offset: int) -> ErrorCode:
        result = await self.runtime.write(
            self.partition_for(key),
            lambda shard, now: shard.initialize(key, state_epoch, start_offset, now), lambda e: e,
            key=key)
        assert isinstance(result, ErrorCode)
        return result

    async def read_state(self, key: SharePartitionKey, leader_epoch: int) -> ReadStateResult:
        result = await self.runtime.write(
            self.partition_for(key), lambda shard, now: shard.read(key, leader_epoch, now),
            ReadStateResult, key=key)
        assert isinstance(result, ReadStateResult)
        return result

    async def write_state(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                          start_offset: int, state_batches: tuple[StateBatch, ...],
                          delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT) -> ErrorCode:
        def op(shard: ShareStateShard, now: int) -> CoordinatorResult:
            return shard.write(key, state_epoch, leader_epoch, start_offset, state_batches,
                               delivery_complete_count, now)

        result = await self.runtime.write(self.partition_for(key), op, lambda e: e, key=key)
        assert isinstance(result, ErrorCode)
        return result

    async def delete_state(self, key: SharePartitionKey) -> ErrorCode:
        result = await self.runtime.write(
            self.partition_for(key), lambda shard, now: shard.delete(key, now), lambda e: e,
            key=key)
        assert isinstance(result, ErrorCode)
        return result

    async def read_state_summary(self, key: SharePartitionKey, leader_epoch: int) -> StateSummary:
        result = self.runtime.read(self.partition_for(key), lambda shard: shard.read_summary(key),
                                   StateSummary)
        assert isinstance(result, StateSummary)
        return result
