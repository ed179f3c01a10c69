"""InMemorySharePersister: the SharePersister contract (dmq/share/persister.py) in memory.

A complete implementation, not a mock: states are created by ``initialize_state``, a
read with a newer leader epoch records it, writes are fenced by older leader or state
epochs, ``write_state`` merges its batches over the stored ones from its start offset
on, as ShareUpdate records replayed over a ShareSnapshot would. For tests of failures,
``fail_writes`` holds error codes the next writes answer instead of writing (one per
write, in order), and ``writes`` counts the writes that were applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from dmq.share.persister import ReadStateResult, SharePartitionKey, StateSummary
from dmq.share.records import UNKNOWN_DELIVERY_COMPLETE_COUNT, StateBatch


@dataclass(slots=True)
class StoredState:
    state_epoch: int
    leader_epoch: int = -1
    start_offset: int = -1
    batches: list[StateBatch] = field(default_factory=list)
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT


def merge_batches(old: list[StateBatch], start: int, new: tuple[StateBatch, ...]) -> list[StateBatch]:
    """``old`` cut below ``start``, with ``new`` written over it (the new batch wins)."""
    out: list[StateBatch] = []
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
    out = sorted(pieces, key=lambda b: b.first_offset)
    return out


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
        if state is None:
            return ReadStateResult(ErrorCode.unknown_topic_or_partition, error_message="not initialized")
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
