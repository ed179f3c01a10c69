"""TransactionCoordinator: the transactional ids this broker coordinates.

One ``TransactionShard`` per ``__transaction_state`` partition this broker
leads, on the CoordinatorRuntime (as the group coordinator). This class routes
a request to the shard of its transactional id, allocates producer ids before
an operation that needs one (allocation awaits the metadata store, shards do
not await), and hands the shards' ``SendMarkers`` effects to the marker sender,
which calls ``complete()`` once every marker is written. Event-loop thread only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import BrokerInfo, MetadataStore
from dmq.coordinator.runtime import CoordinatorRuntime, CoordinatorTopic, coordinator_broker
from dmq.transaction import records as rec
from dmq.transaction.metadata import TransactionMetadata
from dmq.transaction.shard import (
    CheckAnswer,
    CheckPoll,
    HalfTransaction,
    InitResult,
    SendMarkers,
    TransactionConfig,
    TransactionShard,
)

TRANSACTION_STATE_TOPIC = "__transaction_state"


class TransactionCoordinator:
    def __init__(self, config: TransactionConfig, topic: CoordinatorTopic,
                 generate_producer_id: Callable[[], Awaitable[int]], store: MetadataStore | None = None,
                 commit_timeout_ms: int = 5000) -> None:
        self.config = config
        self.topic = topic
        self.store = store
        self.generate_producer_id = generate_producer_id
        self.send_markers: Callable[[SendMarkers], None] = lambda markers: None
        self.runtime: CoordinatorRuntime[TransactionShard] = CoordinatorRuntime(
            topic, lambda p, epoch: TransactionShard(p, epoch, config), commit_timeout_ms,
            name="transaction coordinator", on_effect=self._effect)

    def _effect(self, partition: int, effect: Any) -> None:
        if isinstance(effect, SendMarkers):
            self.send_markers(effect)

    def partition_for(self, transactional_id: str) -> int:
        return rec.partition_for(transactional_id, self.config.num_partitions)

    async def coordinator_node(self, transactional_id: str) -> BrokerInfo | None:
        """The leader of the id's ``__transaction_state`` partition (created on first use)."""
        if self.store is None or not await self.topic.ensure_exists():
            return None
        return coordinator_broker(self.store, TRANSACTION_STATE_TOPIC, self.partition_for(transactional_id), self.runtime)

    def owns(self, transactional_id: str) -> bool:
        return self.runtime.shard(self.partition_for(transactional_id)) is not None

    def set_led(self, led: dict[int, int]) -> None:
        """The ``__transaction_state`` partitions this broker leads, with their leader epochs."""
        self.runtime.set_led(led)

    async def close(self) -> None:
        await self.runtime.close()

    # --------------------------------------------------------------- protocol

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int = -1,
                               expected_epoch: int = -1) -> InitResult:
        partition = self.partition_for(transactional_id)
        needs = self.runtime.read(partition, lambda s: s.needs_producer_id(transactional_id),
                                  lambda error: error == ErrorCode.coordinator_load_in_progress
                                  and self.runtime.shard(partition) is not None)
        new_id = await self.generate_producer_id() if needs else -1
        result = await self.runtime.write(
            partition,
            lambda shard, now: shard.init_producer_id(transactional_id, timeout_ms, expected_producer_id,
                                                      expected_epoch, new_id, now),
            InitResult)
        assert isinstance(result, InitResult)
        return result

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: Iterable[tuple[str, int]]) -> ErrorCode:
        wanted = list(partitions)
        result = await self.runtime.write(
            self.partition_for(transactional_id),
            lambda shard, now: shard.add_partitions(transactional_id, producer_id, epoch, wanted, now),
            lambda error: error)
        assert isinstance(result, ErrorCode)
        return result

    def verify_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        wanted = list(partitions)
        result = self.runtime.read(
            self.partition_for(transactional_id),
            lambda shard: shard.verify_partitions(transactional_id, producer_id, epoch, wanted),
            lambda error: dict.fromkeys(wanted, error))
        assert isinstance(result, dict)
        return result

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> ErrorCode:
        result = await self.runtime.write(
            self.partition_for(transactional_id),
            lambda shard, now: shard.end_txn(transactional_id, producer_id, epoch, commit, now),
            lambda error: error)
        assert isinstance(result, ErrorCode)
        return result

    async def complete(self, markers: SendMarkers) -> ErrorCode:
        """Every marker of ``markers`` is written: the transaction completes."""
        result = await self.runtime.write(
            self.partition_for(markers.transactional_id),
            lambda shard, now: shard.complete(markers, now),
            lambda error: error)
        assert isinstance(result, ErrorCode)
        return result

    # ----------------------------------------------------------- half messages

    def group_partition(self, producer_group: str) -> int:
        """The ``__transaction_state`` partition of every half-message transaction of a group."""
        return self.partition_for(rec.half_transactional_id(producer_group, "any"))

    async def poll_checks(self, producer_group: str, answers: Iterable[CheckAnswer],
                          may_write: Callable[[str], bool] | None = None) -> CheckPoll:
        """A checker's poll: apply its answers, hand it the transactions due a check; only
        of the ids ``may_write`` allows when given (``TransactionShard.poll_checks``)."""
        given = list(answers)
        result = await self.runtime.write(
            self.group_partition(producer_group),
            lambda shard, now: shard.poll_checks(producer_group, given, now, may_write=may_write),
            lambda error: CheckPoll(error))
        assert isinstance(result, CheckPoll)
        return result

    def half_transactions(self, producer_group: str) -> tuple[ErrorCode, list[HalfTransaction]]:
        partition = self.group_partition(producer_group)
        shard = self.runtime.shard(partition)
        if shard is None:
            return self.runtime.absent_error(partition), []
        return ErrorCode.none, shard.half_transactions(producer_group)

    # ------------------------------------------------------------------ admin

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        partition = self.partition_for(transactional_id)
        shard = self.runtime.shard(partition)
        if shard is None:
            return self.runtime.absent_error(partition), None
        meta = shard.describe(transactional_id)
        return (ErrorCode.none, meta) if meta is not None else (ErrorCode.transactional_id_not_found, None)

    @property
    def active(self) -> bool:
        """False once closed (the broker is shutting down): ListTransactions answers
        COORDINATOR_NOT_AVAILABLE."""
        return not self.runtime.closed

    def loading(self) -> bool:
        """A ``__transaction_state`` partition led here is not loaded yet (``list`` would miss
        its transactions: ListTransactions answers COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        return self.runtime.any_loading(self.config.num_partitions)

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = ()) -> list[TransactionMetadata]:
        wanted_states, wanted_ids = list(states), list(producer_ids)
        out: list[TransactionMetadata] = []
        for partition in sorted(self.runtime.loaded_partitions()):
            shard = self.runtime.shard(partition)
            if shard is not None:
                out.extend(shard.list(wanted_states, wanted_ids))
        return out
