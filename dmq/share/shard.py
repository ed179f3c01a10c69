"""ShareStateShard: the durable share-partition states of one ``__share_group_state``
partition (Kafka's ShareCoordinatorShard), pure.

State per share-partition key ``(group, topic id, partition)``: snapshot epoch, state
epoch, leader epoch, start offset, the state batches (offsets not yet done, or done
above the start) and the delivery-complete count. Operations return a
``CoordinatorResult`` whose response is the persister contract's answer
(``dmq.share.persister``); durable state changes only by replaying records.

Records: every change is one full ShareSnapshot (snapshot-per-write, into a compacted
topic: compaction keeps the last snapshot of each key); deleting writes the snapshot
key's tombstone. Replay also takes Kafka's ShareUpdate records (a Kafka-written
``__share_group_state``): an update is merged into its key's state.

Merge rules (Kafka's PersisterStateBatchCombiner): batches wholly below the start offset
are dropped, one straddling it is trimmed; where batches overlap, the one with the
higher delivery count wins, then the higher delivery state, then the newer (written)
one; adjacent batches with equal state and count are coalesced.

Called by the ``ShareCoordinator`` through the CoordinatorRuntime (event-loop thread);
never awaits.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from dmq.coordinator.runtime import CoordinatorResult
from dmq.share import records as rec
from dmq.share.persister import ReadStateResult, SharePartitionKey, StateSummary
from dmq.share.records import UNKNOWN_DELIVERY_COMPLETE_COUNT, StateBatch

log = logging.getLogger("dmq.share")

# Leader epoch of a request that does not give one (Kafka's -1: do not check or record).
NO_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class ShareGroupOffset:
    """One share-partition's durable state. Invariant: ``state_batches`` are sorted,
    disjoint, coalesced and lie at or above ``start_offset`` (when it is not -1)."""
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT
    create_timestamp: int = 0
    write_timestamp: int = 0


def _prune(batches: Iterable[StateBatch], start_offset: int) -> list[StateBatch]:
    out = []
    for b in batches:
        if start_offset >= 0 and b.last_offset < start_offset:
            continue
        if start_offset >= 0 and b.first_offset < start_offset:
            b = replace(b, first_offset=start_offset)
        out.append(b)
    return out


def merge_batches(current: Iterable[StateBatch], written: Iterable[StateBatch],
                  start_offset: int) -> tuple[StateBatch, ...]:
    """``written`` merged over ``current`` from ``start_offset`` on (-1: no bound), by
    Kafka's rules (module docstring)."""
    ranked: list[tuple[StateBatch, int]] = [(b, 0) for b in _prune(current, start_offset)]
    ranked += [(b, 1) for b in _prune(written, start_offset)]
    ranked = [(b, age) for b, age in ranked if b.first_offset <= b.last_offset]
    points = sorted({p for b, _ in ranked for p in (b.first_offset, b.last_offset + 1)})
    out: list[StateBatch] = []
    for lo, hi in zip(points, points[1:], strict=False):
        covering = [(b.delivery_count, b.delivery_state, age, b) for b, age in ranked
                    if b.first_offset <= lo and hi - 1 <= b.last_offset]
        if not covering:
            continue
        best = max(covering, key=lambda c: c[:3])[3]
        last = out[-1] if out else None
        if (last is not None and last.last_offset + 1 == lo and last.delivery_state == best.delivery_state
                and last.delivery_count == best.delivery_count):
            out[-1] = replace(last, last_offset=hi - 1)
        else:
            out.append(StateBatch(lo, hi - 1, best.delivery_state, best.delivery_count))
    return tuple(out)


def _key(key: SharePartitionKey) -> rec.ShareStateKey:
    return rec.ShareStateKey(key.group_id, key.topic_id, key.partition)


class ShareStateShard:
    """The share-partition states of one ``__share_group_state`` partition.

    Invariants: ``states`` holds exactly what replaying the partition's records gives (a
    snapshot replaces a key's state, an update merges into it, a tombstone removes it);
    a key's leader epoch and state epoch never go down except by an initialization
    (state epoch) that the caller asked for with a newer state epoch.

    ``partition_exists(topic_id, partition)``, when given, says whether the data
    partition still exists (UNKNOWN_TOPIC_OR_PARTITION otherwise), like the group
    shard's ``partition_exists``.
    """

    def __init__(self, partition: int, leader_epoch: int,
                 partition_exists: Callable[[uuid.UUID, int], bool] | None = None) -> None:
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.partition_exists = partition_exists
        self.states: dict[SharePartitionKey, ShareGroupOffset] = {}

    # --------------------------------------------------------------- replay

    def replay(self, key: bytes, value: bytes | None, *, loading: bool, producer_id: int = -1,
               offset: int = -1) -> None:
        try:
            record_type, k = rec.decode_key(key)
            decoded = rec.decode_value(record_type, value)
        except rec.RecordFormatError as e:
            log.warning("__share_group_state-%d: skipping an unreadable record: %s", self.partition, e)
            return
        spk = SharePartitionKey(k.group_id, k.topic_id, k.partition)
        if decoded is None:
            if record_type == rec.SHARE_SNAPSHOT:
                self.states.pop(spk, None)
            return
        if isinstance(decoded, rec.ShareSnapshotValue):
            self.states[spk] = ShareGroupOffset(
                decoded.snapshot_epoch, decoded.state_epoch, decoded.leader_epoch, decoded.start_offset,
                merge_batches((), decoded.state_batches, decoded.start_offset),
                decoded.delivery_complete_count, decoded.create_timestamp, decoded.write_timestamp)
            return
        current = self.states.get(spk)
        if current is None:
            return  # an update of a state deleted (or never snapshotted): nothing to merge into
        start = decoded.start_offset if decoded.start_offset != -1 else current.start_offset
        self.states[spk] = replace(
            current, leader_epoch=decoded.leader_epoch, start_offset=start,
            state_batches=merge_batches(current.state_batches, decoded.state_batches, start),
            delivery_complete_count=decoded.delivery_complete_count)

    def replay_marker(self, producer_id: int, commit: bool, *, loading: bool) -> None:
        pass  # the share coordinator never writes transactionally

    def on_loaded(self, now_ms: int) -> CoordinatorResult:
        return CoordinatorResult()

    def on_timer(self, key: Hashable, now_ms: int) -> CoordinatorResult:
        return CoordinatorResult()

    # ----------------------------------------------------------- operations

    def _snapshot(self, key: SharePartitionKey, state: ShareGroupOffset) -> tuple[bytes, bytes]:
        return (rec.encode_key(rec.SHARE_SNAPSHOT, _key(key)), rec.encode_snapshot_value(rec.ShareSnapshotValue(
            state.snapshot_epoch, state.state_epoch, state.leader_epoch, state.start_offset,
            state.create_timestamp, state.write_timestamp, state.state_batches,
            state.delivery_complete_count)))

    def _unknown(self, key: SharePartitionKey) -> bool:
        return self.partition_exists is not None and not self.partition_exists(key.topic_id, key.partition)

    def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int,
                   now_ms: int) -> CoordinatorResult:
        """InitializeShareGroupState: an empty state at ``start_offset``; a state epoch
        below the stored one is FENCED_STATE_EPOCH. The leader epoch is kept."""
        if self._unknown(key):
            return CoordinatorResult(ErrorCode.unknown_topic_or_partition)
        current = self.states.get(key)
        if current is not None and state_epoch < current.state_epoch:
            return CoordinatorResult(ErrorCode.fenced_state_epoch)
        state = ShareGroupOffset(
            current.snapshot_epoch + 1 if current is not None else 0, state_epoch,
            current.leader_epoch if current is not None else NO_LEADER_EPOCH, start_offset, (),
            UNKNOWN_DELIVERY_COMPLETE_COUNT, now_ms, now_ms)
        return CoordinatorResult(ErrorCode.none, [self._snapshot(key, state)])

    def read(self, key: SharePartitionKey, leader_epoch: int, now_ms: int) -> CoordinatorResult:
        """ReadShareGroupState. A leader epoch below the stored one is FENCED_LEADER_EPOCH;
        a newer one is recorded (a snapshot) before answering. A state never initialized
        answers state epoch 0, start -1, no batches (the reset policy decides)."""
        if self._unknown(key):
            return CoordinatorResult(ReadStateResult(ErrorCode.unknown_topic_or_partition))
        current = self.states.get(key)
        if current is None:
            return CoordinatorResult(ReadStateResult(ErrorCode.none))
        if leader_epoch != NO_LEADER_EPOCH and leader_epoch < current.leader_epoch:
            return CoordinatorResult(ReadStateResult(ErrorCode.fenced_leader_epoch))
        answer = ReadStateResult(ErrorCode.none, current.state_epoch, current.start_offset,
                                 current.state_batches)
        if leader_epoch == NO_LEADER_EPOCH or leader_epoch == current.leader_epoch:
            return CoordinatorResult(answer)
        bumped = replace(current, snapshot_epoch=current.snapshot_epoch + 1, leader_epoch=leader_epoch,
                         write_timestamp=now_ms)
        return CoordinatorResult(answer, [self._snapshot(key, bumped)])

    def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int, start_offset: int,
              state_batches: tuple[StateBatch, ...], delivery_complete_count: int,
              now_ms: int) -> CoordinatorResult:
        """WriteShareGroupState: a new snapshot, the written batches merged over the
        stored ones. Not initialized: INVALID_REQUEST; an older leader epoch:
        FENCED_LEADER_EPOCH; an older state epoch: FENCED_STATE_EPOCH. Start offset -1 and
        leader epoch -1 keep the stored ones."""
        current = self.states.get(key)
        if current is None:
            return CoordinatorResult(ErrorCode.invalid_request)
        if leader_epoch != NO_LEADER_EPOCH and leader_epoch < current.leader_epoch:
            return CoordinatorResult(ErrorCode.fenced_leader_epoch)
        if state_epoch < current.state_epoch:
            return CoordinatorResult(ErrorCode.fenced_state_epoch)
        if self._unknown(key):
            return CoordinatorResult(ErrorCode.unknown_topic_or_partition)
        start = start_offset if start_offset != -1 else current.start_offset
        state = ShareGroupOffset(
            current.snapshot_epoch + 1, current.state_epoch,
            leader_epoch if leader_epoch != NO_LEADER_EPOCH else current.leader_epoch, start,
            merge_batches(current.state_batches, state_batches, start), delivery_complete_count,
            current.create_timestamp, now_ms)
        return CoordinatorResult(ErrorCode.none, [self._snapshot(key, state)])

    def delete(self, key: SharePartitionKey, now_ms: int) -> CoordinatorResult:
        """DeleteShareGroupState: the snapshot key's tombstone (nothing for an unknown key)."""
        if key not in self.states:
            return CoordinatorResult(ErrorCode.none)
        return CoordinatorResult(ErrorCode.none, [(rec.encode_key(rec.SHARE_SNAPSHOT, _key(key)), None)])

    def read_summary(self, key: SharePartitionKey) -> StateSummary:
        """ReadShareGroupStateSummary (no fencing, no record): a state never initialized
        answers state epoch 0, leader epoch -1, start -1."""
        if self._unknown(key):
            return StateSummary(ErrorCode.unknown_topic_or_partition)
        current = self.states.get(key)
        if current is None:
            return StateSummary(ErrorCode.none)
        return StateSummary(ErrorCode.none, current.state_epoch, current.leader_epoch, current.start_offset,
                            current.delivery_complete_count)
