"""ShareStateShard, pure: every operation and error, fencing by leader and state epoch,
Kafka's merge rules, and replay of its records (and of Kafka's ShareUpdate) rebuilding
the same state."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from support.coordinator import ShardDriver, replay_into

from dmq.share import records as rec
from dmq.share.persister import ReadStateResult, SharePartitionKey, StateSummary
from dmq.share.records import StateBatch
from dmq.share.shard import ShareStateShard, merge_batches

TOPIC = uuid.UUID("12345678-1234-5678-1234-567812345678")
KEY = SharePartitionKey("g", TOPIC, 0)
AVAILABLE, ACKED, ARCHIVED = 0, 2, 4


def driver() -> ShardDriver:
    return ShardDriver(ShareStateShard(0, 1))


def init(d: ShardDriver, key: SharePartitionKey = KEY, state_epoch: int = 0, start: int = 0) -> ErrorCode:
    result: ErrorCode = d.run(d.shard.initialize, key, state_epoch, start)
    return result


def write(d: ShardDriver, batches: tuple[StateBatch, ...], start: int = -1, leader_epoch: int = 1,
          state_epoch: int = 0, key: SharePartitionKey = KEY, dcc: int = -1) -> ErrorCode:
    result: ErrorCode = d.run(d.shard.write, key, state_epoch, leader_epoch, start, batches, dcc)
    return result


def read(d: ShardDriver, leader_epoch: int = 1, key: SharePartitionKey = KEY) -> ReadStateResult:
    result: ReadStateResult = d.run(d.shard.read, key, leader_epoch)
    return result


def test_initialize_then_write_then_read_gives_the_state_back() -> None:
    d = driver()
    assert init(d, start=10) == ErrorCode.none
    assert read(d) == ReadStateResult(ErrorCode.none, 0, 10, ())
    batches = (StateBatch(10, 14, ACKED, 1), StateBatch(15, 19, AVAILABLE, 2))
    assert write(d, batches, start=10) == ErrorCode.none
    assert read(d) == ReadStateResult(ErrorCode.none, 0, 10, batches)
    summary = d.shard.read_summary(KEY)
    assert summary == StateSummary(ErrorCode.none, 0, 1, 10, -1)


def test_every_change_is_one_full_snapshot_and_delete_is_a_tombstone() -> None:
    d = driver()
    init(d)
    write(d, (StateBatch(0, 4, ACKED, 1),), dcc=5)
    types = [rec.decode_key(e.key)[0] for e in d.log if e.key is not None]
    assert types == [rec.SHARE_SNAPSHOT, rec.SHARE_SNAPSHOT]
    value = rec.decode_snapshot_value(d.log[-1].value or b"")
    assert (value.snapshot_epoch, value.leader_epoch, value.delivery_complete_count) == (1, 1, 5)
    assert d.run(d.shard.delete, KEY) == ErrorCode.none
    assert d.log[-1].value is None and rec.decode_key(d.log[-1].key or b"")[0] == rec.SHARE_SNAPSHOT
    assert read(d) == ReadStateResult(ErrorCode.none)  # forgotten: as never initialized
    assert write(d, ()) == ErrorCode.invalid_request
    before = len(d.log)
    assert d.run(d.shard.delete, KEY) == ErrorCode.none and len(d.log) == before  # nothing to delete


def test_writing_a_state_never_initialized_is_an_invalid_request() -> None:
    d = driver()
    assert write(d, (StateBatch(0, 0, ACKED, 1),)) == ErrorCode.invalid_request
    assert d.log == []
    assert read(d) == ReadStateResult(ErrorCode.none, 0, -1, ())
    assert d.shard.read_summary(KEY) == StateSummary(ErrorCode.none, 0, -1, -1, -1)


def test_a_read_with_a_newer_leader_epoch_records_it_and_fences_older_writers() -> None:
    d = driver()
    init(d)
    assert write(d, (StateBatch(0, 0, ACKED, 1),), leader_epoch=3) == ErrorCode.none
    n = len(d.log)
    assert read(d, leader_epoch=3).error == ErrorCode.none and len(d.log) == n  # same epoch: no record
    assert read(d, leader_epoch=5).error == ErrorCode.none and len(d.log) == n + 1
    assert d.shard.read_summary(KEY).leader_epoch == 5
    assert write(d, (StateBatch(1, 1, ACKED, 1),), leader_epoch=4) == ErrorCode.fenced_leader_epoch
    assert read(d, leader_epoch=4).error == ErrorCode.fenced_leader_epoch
    assert write(d, (StateBatch(1, 1, ACKED, 1),), leader_epoch=5) == ErrorCode.none
    assert write(d, (StateBatch(2, 2, ACKED, 1),), leader_epoch=-1) == ErrorCode.none  # -1: not checked
    assert d.shard.read_summary(KEY).leader_epoch == 5


def test_state_epoch_fences_writes_and_initializations_older_than_the_stored_one() -> None:
    d = driver()
    init(d, state_epoch=0)
    write(d, (StateBatch(0, 9, ACKED, 1),), start=0)
    assert init(d, state_epoch=2, start=100) == ErrorCode.none  # AlterShareGroupOffsets: a reset
    assert read(d) == ReadStateResult(ErrorCode.none, 2, 100, ())
    assert write(d, (StateBatch(100, 100, ACKED, 1),), state_epoch=1) == ErrorCode.fenced_state_epoch
    assert init(d, state_epoch=1) == ErrorCode.fenced_state_epoch
    assert write(d, (StateBatch(100, 100, ACKED, 1),), state_epoch=2) == ErrorCode.none
    assert d.shard.read_summary(KEY).leader_epoch == 1  # an initialization keeps the leader epoch


def test_a_deleted_data_partition_is_unknown() -> None:
    gone: set[int] = set()
    d = ShardDriver(ShareStateShard(0, 1, lambda topic_id, p: p not in gone))
    init(d)
    gone.add(0)
    assert write(d, ()) == ErrorCode.unknown_topic_or_partition
    assert read(d).error == ErrorCode.unknown_topic_or_partition
    assert init(d) == ErrorCode.unknown_topic_or_partition
    assert d.shard.read_summary(KEY).error == ErrorCode.unknown_topic_or_partition


def test_merge_drops_and_trims_below_the_start_offset() -> None:
    current = (StateBatch(0, 4, ACKED, 1), StateBatch(5, 9, AVAILABLE, 1), StateBatch(10, 12, ARCHIVED, 5))
    assert merge_batches(current, (), 7) == (StateBatch(7, 9, AVAILABLE, 1), StateBatch(10, 12, ARCHIVED, 5))


def test_merge_on_overlap_the_higher_delivery_count_then_state_wins() -> None:
    current = (StateBatch(0, 9, AVAILABLE, 2),)
    assert merge_batches(current, (StateBatch(3, 5, ACKED, 1),), 0) == (StateBatch(0, 9, AVAILABLE, 2),)
    assert merge_batches(current, (StateBatch(3, 5, ACKED, 3),), 0) == (
        StateBatch(0, 2, AVAILABLE, 2), StateBatch(3, 5, ACKED, 3), StateBatch(6, 9, AVAILABLE, 2))
    assert merge_batches(current, (StateBatch(3, 5, ARCHIVED, 2),), 0) == (
        StateBatch(0, 2, AVAILABLE, 2), StateBatch(3, 5, ARCHIVED, 2), StateBatch(6, 9, AVAILABLE, 2))


def test_merge_coalesces_adjacent_batches_of_equal_state_and_count() -> None:
    assert merge_batches((StateBatch(0, 4, ACKED, 1),), (StateBatch(5, 9, ACKED, 1),), -1) == (
        StateBatch(0, 9, ACKED, 1),)
    assert merge_batches((), (StateBatch(0, 1, ACKED, 1), StateBatch(3, 4, ACKED, 1)), 0) == (
        StateBatch(0, 1, ACKED, 1), StateBatch(3, 4, ACKED, 1))  # a hole stays one


def test_a_write_keeps_the_start_offset_when_given_minus_one_and_prunes_when_it_moves() -> None:
    d = driver()
    init(d, start=0)
    write(d, (StateBatch(0, 4, ACKED, 1), StateBatch(5, 9, AVAILABLE, 1)))
    assert read(d).start_offset == 0
    write(d, (), start=5)
    assert read(d) == ReadStateResult(ErrorCode.none, 0, 5, (StateBatch(5, 9, AVAILABLE, 1),))


def test_replay_of_kafkas_share_update_merges_into_the_snapshot() -> None:
    shard = ShareStateShard(0, 1)
    k = rec.ShareStateKey("g", TOPIC, 0)
    shard.replay(rec.encode_key(rec.SHARE_SNAPSHOT, k), rec.encode_snapshot_value(rec.ShareSnapshotValue(
        0, 1, 2, 0, 0, 0, (StateBatch(0, 9, AVAILABLE, 1),))), loading=True)
    shard.replay(rec.encode_key(rec.SHARE_UPDATE, k), rec.encode_update_value(rec.ShareUpdateValue(
        0, 3, 4, (StateBatch(4, 5, ACKED, 2),), 2)), loading=True)
    state = shard.states[KEY]
    assert (state.state_epoch, state.leader_epoch, state.start_offset, state.delivery_complete_count) == (1, 3, 4, 2)
    assert state.state_batches == (StateBatch(4, 5, ACKED, 2), StateBatch(6, 9, AVAILABLE, 1))
    shard.replay(rec.encode_key(rec.SHARE_UPDATE, k), rec.encode_update_value(rec.ShareUpdateValue(
        0, 3, -1, (), -1)), loading=True)
    assert shard.states[KEY].start_offset == 4  # -1: unchanged
    shard.replay(rec.encode_key(rec.SHARE_SNAPSHOT, k), None, loading=True)
    assert KEY not in shard.states
    shard.replay(rec.encode_key(rec.SHARE_UPDATE, k), rec.encode_update_value(rec.ShareUpdateValue(
        0, 3, 4, (StateBatch(4, 5, ACKED, 2),))), loading=True)
    assert KEY not in shard.states  # an update of nothing is dropped
    shard.replay(b"\x00\x07junk", b"", loading=True)  # unreadable: skipped, the load goes on


def test_keys_are_independent() -> None:
    d = driver()
    other = SharePartitionKey("g", TOPIC, 1)
    init(d, start=0)
    init(d, key=other, start=50)
    write(d, (StateBatch(0, 0, ACKED, 1),))
    assert read(d, key=other) == ReadStateResult(ErrorCode.none, 0, 50, ())
    assert write(d, (), key=other, leader_epoch=1) == ErrorCode.none


batch_lists = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 8), st.sampled_from([AVAILABLE, ACKED, ARCHIVED]),
              st.integers(1, 4)).map(lambda t: StateBatch(t[0], t[0] + t[1], t[2], t[3])),
    max_size=4)
ops = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(0, 2), st.integers(-1, 40), st.integers(0, 3), batch_lists),
    st.tuples(st.just("read"), st.integers(-1, 4)),
    st.tuples(st.just("init"), st.integers(0, 3), st.integers(-1, 20)),
    st.tuples(st.just("delete"),),
), max_size=12)


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(0, 2))
def test_any_sequence_of_operations_then_a_reload_from_the_records_reads_the_same(
        sequence: list[tuple[Any, ...]], which: int) -> None:
    keys = [SharePartitionKey("g", TOPIC, p) for p in range(3)]
    d = driver()
    for i, op in enumerate(sequence):
        key = keys[(i + which) % 3]
        if op[0] == "write":
            _, state_epoch, start, leader_epoch, batches = op
            write(d, tuple(batches), start=start, leader_epoch=leader_epoch, state_epoch=state_epoch, key=key)
        elif op[0] == "read":
            read(d, leader_epoch=op[1], key=key)
        elif op[0] == "init":
            init(d, key=key, state_epoch=op[1], start=op[2])
        else:
            d.run(d.shard.delete, key)
    reloaded = replay_into(ShareStateShard(0, 2), d.log)
    assert reloaded.states == d.shard.states
    for key in keys:
        assert reloaded.read_summary(key) == d.shard.read_summary(key)
        state = d.shard.states.get(key)
        if state is not None:  # batches stay sorted, disjoint, coalesced and at or above the start
            bs = state.state_batches
            assert all(a.last_offset < b.first_offset for a, b in zip(bs, bs[1:], strict=False))
            assert all(b.first_offset >= state.start_offset for b in bs) or state.start_offset == -1
            assert merge_batches((), bs, state.start_offset) == bs


def test_a_coordinator_key_parses_back() -> None:
    key = rec.coordinator_key("a:b", TOPIC, 12)
    assert rec.parse_coordinator_key(key) == ("a:b", TOPIC, 12)
    for bad in ("", "g:0", "g:!!:0", ":" + rec.topic_id_string(TOPIC) + ":0", "g:" + rec.topic_id_string(TOPIC) + ":x"):
        with pytest.raises(ValueError):
            rec.parse_coordinator_key(bad)
