"""InMemorySharePersister: the SharePersister contract (dmq/share/persister.py) in memory.

A complete implementation, not a mock: states are created by ``initialize_state``, a
read with a newer leader epoch records it, writes are fenced by older leader or state
epochs, ``write_state`` merges its batches over the stored ones from its start offset
on, as ShareUpdate records replayed over a ShareSnapshot would. For tests of failures,
``fail_writes`` holds error codes the next writes answer instead of writing (one per
write, in order), and ``writes`` counts the writes that were applied.

``ShareEnv`` is a broker's share side for unit tests: a real LogManager and
ReplicaManager (no network, no metadata store) with that persister and a
SharePartitionManager.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.errors import ErrorCode

from dmq.config import BrokerConfig, LogConfig, ShareGroupSettings
from dmq.record.records import encode_batch
from dmq.replication.replica_manager import ReplicaManager
from dmq.share.manager import EARLIEST, InitializeCheck, PartitionFetch, SharePartitionManager
from dmq.share.partition import SharePartitionConfig
from dmq.share.persister import ReadStateResult, SharePartitionKey, StateSummary
from dmq.share.records import UNKNOWN_DELIVERY_COMPLETE_COUNT, StateBatch
from dmq.storage.log_manager import LogManager

TID = uuid.UUID(int=7)
TP0 = (TID, 0)
TP1 = (TID, 1)


@dataclass(slots=True)
class StoredState:
    state_epoch: int
    leader_epoch: int = -1
    start_offset: int = -1
    batches: list[StateBatch] = field(default_factory=list)
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT


def merge_batches(old: list[StateBatch], start: int, new: tuple[StateBatch, ...]) -> list[StateBatch]:
    """``old`` cut below ``start``, with ``new`` written over it (the new batch wins)."""
    pieces = [b for b in old if b.last_offset >= start]
    pieces = [StateBatch(max(b.first_offset, start), b.last_offset, b.delivery_state, b.delivery_count)
              for b in pieces]
    for n in new:
        if n.last_offset < start:
            continue
        n = StateBatch(max(n.first_offset, start), n.last_offset, n.delivery_state, n.delivery_count)
        kept: list[StateBatch] = []
        for b in pieces:
            if b.last_offset < n.first_offset or b.first_offset > n.last_offset:
                kept.append(b)
                continue
            if b.first_offset < n.first_offset:
                kept.append(StateBatch(b.first_offset, n.first_offset - 1, b.delivery_state, b.delivery_count))
            if b.last_offset > n.last_offset:
                kept.append(StateBatch(n.last_offset + 1, b.last_offset, b.delivery_state, b.delivery_count))
        pieces = kept + [n]
    return sorted(pieces, key=lambda b: b.first_offset)


class InMemorySharePersister:
    """Share-partition states by key. Event-loop only, never blocks (no await inside)."""

    def __init__(self) -> None:
        self.states: dict[SharePartitionKey, StoredState] = {}
        self.fail_writes: list[ErrorCode] = []
        self.fail_reads: list[ErrorCode] = []
        self.writes = 0

    async def initialize_state(self, key: SharePartitionKey, state_epoch: int,
                               start_offset: int) -> ErrorCode:
        old = self.states.get(key)
        if old is not None and state_epoch < old.state_epoch:
            return ErrorCode.fenced_state_epoch
        self.states[key] = StoredState(state_epoch, old.leader_epoch if old else -1, start_offset)
        return ErrorCode.none

    async def read_state(self, key: SharePartitionKey, leader_epoch: int) -> ReadStateResult:
        if self.fail_reads:
            return ReadStateResult(self.fail_reads.pop(0))
        state = self.states.get(key)
        if state is None:  # as the share coordinator: never initialized, the reset policy decides
            return ReadStateResult(ErrorCode.none)
        if leader_epoch < state.leader_epoch:
            return ReadStateResult(ErrorCode.fenced_leader_epoch)
        state.leader_epoch = leader_epoch
        return ReadStateResult(ErrorCode.none, state.state_epoch, state.start_offset, tuple(state.batches))

    async def write_state(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                          start_offset: int, state_batches: tuple[StateBatch, ...],
                          delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT) -> ErrorCode:
        if self.fail_writes:
            return self.fail_writes.pop(0)
        state = self.states.get(key)
        if state is None:
            return ErrorCode.invalid_request
        if state_epoch < state.state_epoch:
            return ErrorCode.fenced_state_epoch
        if leader_epoch < state.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        state.leader_epoch = leader_epoch
        if start_offset >= 0:
            state.start_offset = start_offset
        state.batches = merge_batches(state.batches, max(state.start_offset, 0), state_batches)
        state.delivery_complete_count = delivery_complete_count
        self.writes += 1
        return ErrorCode.none

    async def delete_state(self, key: SharePartitionKey) -> ErrorCode:
        self.states.pop(key, None)
        return ErrorCode.none

    async def read_state_summary(self, key: SharePartitionKey, leader_epoch: int) -> StateSummary:
        state = self.states.get(key)
        if state is None:
            return StateSummary(ErrorCode.unknown_topic_or_partition)
        return StateSummary(ErrorCode.none, state.state_epoch, state.leader_epoch, state.start_offset,
                            state.delivery_complete_count)


class ShareEnv:
    """A broker's share side in a unit test: a real LogManager and ReplicaManager leading
    ``t``-0 and ``t``-1 (topic id ``TID``), the in-memory persister and a manager."""

    def __init__(self, path: Path, *, earliest: bool = True, lock_ms: int = 30_000) -> None:
        self.lm = LogManager(str(path), lambda t: LogConfig(BrokerConfig()))
        self.lm.load_logs(lambda t, p: "id")
        self.rm = ReplicaManager(1, self.lm)
        for index in (0, 1):
            self.rm.become_leader("t", index, TID.hex, 0, [1], [1])
        self.persister = InMemorySharePersister()
        self.config = SharePartitionConfig(lock_duration_ms=lock_ms)
        self.earliest = earliest
        self.manager = self.new_manager()

    def new_manager(self, may_initialize: InitializeCheck | None = None) -> SharePartitionManager:
        """A manager over this env's logs and persister; ``may_initialize`` as the broker's
        (None: every request may initialize a state)."""
        settings = ShareGroupSettings(record_lock_duration_ms=self.config.lock_duration_ms,
                                      delivery_count_limit=self.config.delivery_count_limit,
                                      auto_offset_reset=EARLIEST if self.earliest else "latest")
        return SharePartitionManager(self.rm, self.persister, {TID: "t"}.get, config=self.config,
                                     group_settings=lambda g: settings, may_initialize=may_initialize)

    async def init_state(self, group: str = "g", partitions: tuple[int, ...] = (0, 1)) -> None:
        for p in partitions:
            assert await self.persister.initialize_state(SharePartitionKey(group, TID, p), 0, -1) == 0

    def produce(self, n: int, index: int = 0) -> None:
        result = self.rm.append_to_local_log("t", index, encode_batch([(None, b"v", [])] * n, timestamp=1), 1)
        assert result.error == ErrorCode.none

    async def fetch(self, member: str = "a", partitions: tuple[tuple[uuid.UUID, int], ...] = (TP0,),
                    max_wait_ms: int = 0, max_records: int = 500, batch_size: int = 500,
                    group: str = "g") -> dict[tuple[uuid.UUID, int], PartitionFetch]:
        return await self.manager.fetch(group, member, list(partitions), max_wait_ms=max_wait_ms,
                                        max_bytes=1 << 20, max_records=max_records, batch_size=batch_size)

    def stored(self, index: int = 0, group: str = "g") -> StoredState:
        return self.persister.states[SharePartitionKey(group, TID, index)]


def run_share_env(path: Path, scenario: Callable[[ShareEnv], Awaitable[None]], *,
                  earliest: bool = True, lock_ms: int = 30_000) -> None:
    """Run ``scenario`` in a fresh event loop; the manager closed and the logs shut after."""
    env = ShareEnv(path, earliest=earliest, lock_ms=lock_ms)

    async def main() -> None:
        try:
            await scenario(env)
        finally:
            env.manager.close()

    try:
        asyncio.run(main())
    finally:
        env.lm.shutdown()
