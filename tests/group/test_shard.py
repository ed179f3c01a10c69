"""The group shard without an event loop: the classic protocol, replay and timers as data."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.errors import ErrorCode
from support.coordinator import ShardDriver, replay_into

from dmq.coordinator.runtime import Deferred, LogEntry
from dmq.group import records as rec
from dmq.group.metadata import GroupMetadata, GroupState, IllegalStateTransition
from dmq.group.shard import GroupConfig, GroupShard, JoinResult, SyncResult


def shard(**kw: int) -> GroupShard:
    config = GroupConfig(num_partitions=5, initial_rebalance_delay_ms=0, **kw)
    return GroupShard(0, config, lambda t, p: t == "t" and p < 4)


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 of ``topics``."""
    data = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        data += struct.pack(">h", len(topic)) + topic.encode()
    return data + struct.pack(">i", -1)  # no user data


def reloaded(driver: ShardDriver) -> GroupShard:
    """A new shard built the way a new leader builds it: replaying the log."""
    return replay_into(GroupShard(0, driver.shard.config, driver.shard.partition_exists), driver.log)  # type: ignore[no-any-return]


def join(d: ShardDriver, group: str, member: str = "", instance: str | None = None,
         protocols: list[tuple[str, bytes]] | None = None, session_ms: int = 10_000,
         rebalance_ms: int = 10_000) -> Any:
    return d.run(d.shard.join_group, group, member, instance, "client", "host", session_ms, rebalance_ms,
                 "consumer", protocols or [("range", b"\x00\x01")], False)


def test_partition_for_matches_kafka() -> None:
    # Values from Java's String.hashCode, as Kafka's GroupMetadataManager.partitionFor uses.
    assert rec.java_string_hash("zz") == 3904
    assert rec.partition_for("test-group", 50) == 12
    assert rec.partition_for("my-app", 50) == 48
    assert rec.partition_for("Ünïcode-grüppe", 50) == 33


def test_transition_table_rejects_illegal_moves() -> None:
    g = GroupMetadata("g")
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.STABLE)
    g.transition_to(GroupState.PREPARING_REBALANCE)
    g.transition_to(GroupState.COMPLETING_REBALANCE)
    g.transition_to(GroupState.STABLE)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.EMPTY)
    g.transition_to(GroupState.DEAD)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.PREPARING_REBALANCE)


def test_state_is_reloaded_by_replaying_records() -> None:
    d = ShardDriver(shard())
    joined = d.answer(join(d, "g", instance="inst"))
    assert joined.error == ErrorCode.none and joined.generation == 1
    synced = d.answer(d.run(d.shard.sync_group, "g", 1, joined.member_id, "inst", "consumer", "range",
                            {joined.member_id: b"assignment"}))
    assert synced == SyncResult(ErrorCode.none, b"assignment", "consumer", "range")
    assert d.run(d.shard.commit_offsets, "g", 1, joined.member_id, "inst", [("t", 0, 42, 3, "m")]) == \
        [ErrorCode.none]
    assert d.run(d.shard.commit_offsets, "simple", -1, "", None,
                 [("t", 1, 7, -1, None), ("x", 0, 1, -1, None)]) == \
        [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    again = reloaded(d)
    g = again.groups["g"]
    assert g.state == GroupState.STABLE and g.generation == 1 and g.protocol == "range"
    assert g.static_members == {"inst": joined.member_id}
    assert g.members[joined.member_id].assignment == b"assignment"
    assert again.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 42  # type: ignore[union-attr]
    assert again.fetch_offsets("simple", None)[1][("t", 1)].offset == 7  # type: ignore[union-attr]
    # A loaded member gets a session's time to find its new coordinator.
    loaded = ShardDriver(again)
    loaded.apply(again.on_loaded(loaded.now))
    assert set(loaded.timers) == {("heartbeat", "g", joined.member_id)}


def test_offsets_become_readable_only_when_their_records_replay() -> None:
    s = shard()
    result = s.commit_offsets("g", -1, "", None, [("t", 0, 5, -1, None)], 1000)
    assert result.response == [ErrorCode.none] and len(result.records) == 1
    assert s.fetch_offsets("g", [("t", 0)])[1][("t", 0)] is None  # not committed yet
    for key, value in result.records:
        s.replay(key, value, loading=False)
    assert s.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 5  # type: ignore[union-attr]


def test_offsets_of_empty_groups_expire() -> None:
    d = ShardDriver(shard(offsets_retention_ms=60_000))
    d.run(d.shard.commit_offsets, "old", -1, "", None, [("t", 0, 5, -1, None)])
    commit_ts = d.shard.groups["old"].offsets[("t", 0)].commit_timestamp
    d.now = commit_ts + 30_000
    assert d.run(d.shard.expire_offsets) == 0
    d.now = commit_ts + 61_000
    assert d.run(d.shard.expire_offsets) == 2  # the offset and then the group
    assert "old" not in d.shard.groups
    assert d.shard.fetch_offsets("old", [("t", 0)])[1][("t", 0)] is None
    assert "old" not in reloaded(d).groups  # the tombstones replay too


def test_delete_groups_and_offsets() -> None:
    d = ShardDriver(shard())
    d.run(d.shard.commit_offsets, "d", -1, "", None, [("t", 0, 1, -1, None), ("t", 1, 2, -1, None)])
    assert d.run(d.shard.delete_offsets, "d", [("t", 0)]) == (ErrorCode.none, {("t", 0): ErrorCode.none})
    assert set(d.shard.fetch_offsets("d", None)[1]) == {("t", 1)}
    assert d.run(d.shard.delete_group, "d") == ErrorCode.none
    assert d.run(d.shard.delete_group, "missing") == ErrorCode.group_id_not_found
    assert d.run(d.shard.delete_offsets, "d", [("t", 1)])[0] == ErrorCode.group_id_not_found
    assert "d" not in reloaded(d).groups


def test_a_deleted_topics_offsets_leave_every_group() -> None:
    """Kafka's onPartitionsDeleted: committed offsets of the deleted topic go, and what an
    open transaction would commit for it; other topics' offsets stay; an empty group left
    without offsets goes too. A new leader replaying the log agrees."""
    d = ShardDriver(GroupShard(0, GroupConfig(num_partitions=5, initial_rebalance_delay_ms=0),
                               lambda t, p: t in ("t", "gone") and p < 4))
    d.run(d.shard.commit_offsets, "only", -1, "", None, [("gone", 0, 5, -1, None), ("gone", 1, 6, -1, None)])
    d.run(d.shard.commit_offsets, "mixed", -1, "", None, [("gone", 0, 1, -1, None), ("t", 0, 2, -1, None)])
    d.run(d.shard.txn_offset_commit, "tx", "mixed", 77, 0, -1, "", None,
          [("gone", 1, 9, -1, None), ("t", 1, 3, -1, None)])
    assert d.run(d.shard.delete_topic_offsets, {"gone"}, d.now, 500) == (5, False)  # 4 offsets, group "only"
    assert "only" not in d.shard.groups
    assert set(d.shard.fetch_offsets("mixed", None)[1]) == {("t", 0)}
    assert d.run(d.shard.complete_transaction, 77, 0, True, 3) == ErrorCode.none
    assert set(d.shard.fetch_offsets("mixed", None)[1]) == {("t", 0), ("t", 1)}  # not ("gone", 1)
    again = reloaded(d)
    assert "only" not in again.groups
    assert again.fetch_offsets("mixed", None) == d.shard.fetch_offsets("mixed", None)
    assert d.run(d.shard.delete_topic_offsets, {"gone"}, d.now, 500) == (0, False)


def test_deleted_topic_offsets_spare_active_groups_later_commits_and_go_in_batches() -> None:
    d = ShardDriver(GroupShard(0, GroupConfig(num_partitions=5, initial_rebalance_delay_ms=0),
                               lambda t, p: t in ("t", "gone") and p < 4))
    d.run(d.shard.commit_offsets, "active", -1, "", None, [("gone", 0, 5, -1, None)])
    assert d.answer(join(d, "active", instance="i")).error == ErrorCode.none  # a member now
    for i in range(3):
        d.run(d.shard.commit_offsets, f"g{i}", -1, "", None, [("gone", 0, 1, -1, None), ("gone", 1, 1, -1, None)])
    noticed = d.now
    d.now += 1000
    d.run(d.shard.commit_offsets, "late", -1, "", None, [("gone", 0, 2, -1, None)])  # the topic created again
    # Whole groups per batch: the active one's offset (its group record stays), then g0's two
    # offsets and its group record; g1; g2.
    assert d.run(d.shard.delete_topic_offsets, {"gone"}, noticed, 3) == (4, True)
    assert d.run(d.shard.delete_topic_offsets, {"gone"}, noticed, 3) == (3, True)
    assert d.run(d.shard.delete_topic_offsets, {"gone"}, noticed, 3) == (3, False)
    assert "active" in d.shard.groups and d.shard.fetch_offsets("active", None)[1] == {}
    assert d.shard.fetch_offsets("late", None)[1][("gone", 0)].offset == 2  # type: ignore[union-attr]
    assert not any(f"g{i}" in d.shard.groups for i in range(3))


def test_an_offset_an_open_transaction_will_replace_does_not_expire() -> None:
    """As Kafka: expiring an offset while a transaction holds a new one for the same
    partition would drop the pending one with it; the committed transaction's offset
    must count."""
    d = ShardDriver(shard(offsets_retention_ms=60_000))
    d.run(d.shard.commit_offsets, "g", -1, "", None, [("t", 0, 5, -1, None)])
    d.now += 61_000
    d.run(d.shard.txn_offset_commit, "tx", "g", 77, 0, -1, "", None, [("t", 0, 9, -1, None)])
    assert d.run(d.shard.expire_offsets) == 0
    assert d.run(d.shard.complete_transaction, 77, 0, True, 3) == ErrorCode.none
    assert d.shard.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 9  # type: ignore[union-attr]


def test_protocol_every_member_supports_is_chosen_and_laggards_are_removed() -> None:
    d = ShardDriver(shard(min_session_timeout_ms=100))
    both = [("range", b""), ("roundrobin", b"")]
    first = d.answer(join(d, "p", protocols=both, session_ms=5000, rebalance_ms=300))
    assert first.protocol == "range"
    second_req = join(d, "p", protocols=[("roundrobin", b""), ("sticky", b"")], session_ms=5000,
                      rebalance_ms=300)
    assert isinstance(second_req, Deferred) and d.answer(second_req) is None  # waits for the first
    # The first member rejoins; both support only roundrobin in common.
    rejoin = d.answer(join(d, "p", first.member_id, protocols=both, session_ms=5000, rebalance_ms=300))
    second = d.answer(second_req)
    assert rejoin.protocol == second.protocol == "roundrobin" and rejoin.generation == 2
    assert rejoin.leader == first.member_id and len(rejoin.members) == 2
    sync_b = d.run(d.shard.sync_group, "p", 2, second.member_id, None, None, None, {})
    assert d.answer(sync_b) is None  # waits for the leader's assignment
    d.run(d.shard.sync_group, "p", 2, first.member_id, None, None, None,
          {first.member_id: b"1", second.member_id: b"2"})
    assert d.answer(sync_b).assignment == b"2"
    # The leader rejoins; the other member never does and is removed when the
    # rebalance timeout (300 ms) fires; the group moves on without it.
    again_req = join(d, "p", first.member_id, protocols=both, session_ms=5000, rebalance_ms=300)
    assert d.answer(again_req) is None and d.timers[("rebalance", "p")] == d.now + 300
    d.advance(299)
    assert d.answer(again_req) is None
    d.advance(1)
    again = d.answer(again_req)
    assert again.error == ErrorCode.none and again.generation == 3
    assert list(d.shard.groups["p"].members) == [first.member_id]
    assert ("heartbeat", "p", second.member_id) not in d.timers
    assert again.protocol == "range"  # alone, its own first choice wins
    # A member whose protocols share nothing with the group is refused.
    odd = d.answer(join(d, "p", protocols=[("sticky", b"")], session_ms=5000, rebalance_ms=300))
    assert odd.error == ErrorCode.inconsistent_group_protocol


def test_sync_is_answered_only_when_the_assignment_is_committed() -> None:
    s = shard()
    d = ShardDriver(s)
    a = d.answer(join(d, "g"))
    follower_req = join(d, "g")
    a2 = d.answer(join(d, "g", a.member_id))
    b = d.answer(follower_req)
    assert a2.generation == b.generation == 2
    # The leader's sync: the assignment is a record; nobody is answered before it commits,
    # and a follower syncing meanwhile waits for it too.
    leader_sync = s.sync_group("g", 2, a.member_id, None, None, None,
                               {a.member_id: b"A", b.member_id: b"B"}, d.now)
    assert isinstance(leader_sync.response, Deferred) and len(leader_sync.records) == 1
    assert leader_sync.replies == [] and s.groups["g"].state == GroupState.COMPLETING_REBALANCE
    follower_sync = s.sync_group("g", 2, b.member_id, None, None, None, {}, d.now)
    assert isinstance(follower_sync.response, Deferred) and follower_sync.records == []
    assert s.groups["g"].members[b.member_id].assignment == b""
    assert leader_sync.committed is not None
    done = leader_sync.committed(s, d.now)
    assert s.groups["g"].state == GroupState.STABLE
    answers = dict(done.replies)
    assert answers[leader_sync.response.key] == SyncResult(ErrorCode.none, b"A", "consumer", "range")
    assert answers[follower_sync.response.key] == SyncResult(ErrorCode.none, b"B", "consumer", "range")


def test_a_failed_assignment_write_answers_every_sync_and_rebalances() -> None:
    s = shard()
    d = ShardDriver(s)
    a = d.answer(join(d, "g"))
    leader_sync = s.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"A"}, d.now)
    assert leader_sync.failed is not None and isinstance(leader_sync.response, Deferred)
    failed = leader_sync.failed(s, ErrorCode.not_coordinator, d.now)
    assert dict(failed.replies)[leader_sync.response.key] == SyncResult(ErrorCode.not_coordinator)
    assert s.groups["g"].state == GroupState.PREPARING_REBALANCE
    assert s.groups["g"].members[a.member_id].assignment == b""


def test_a_restarted_static_member_keeps_its_assignment_and_fences_the_old_one() -> None:
    d = ShardDriver(shard())
    a = d.answer(join(d, "s", instance="i1"))
    d.run(d.shard.sync_group, "s", 1, a.member_id, "i1", None, None, {a.member_id: b"mine"})
    old_sync = d.run(d.shard.sync_group, "s", 1, a.member_id, "i1", None, None, {})
    assert d.answer(old_sync).assignment == b"mine"
    again = d.answer(join(d, "s", instance="i1"))
    assert again.error == ErrorCode.none and again.generation == 1 and again.member_id != a.member_id
    assert again.leader == again.member_id  # the old incarnation led; the new one does
    # ... but must not run its assignor again (JoinGroup v9+: SkipAssignment; older
    # versions are told the previous leader's id, as Kafka's replaceStaticMember)
    assert again.skip_assignment and again.previous_leader == a.member_id
    assert d.run(d.shard.heartbeat, "s", 1, a.member_id, "i1") == ErrorCode.fenced_instance_id
    assert reloaded(d).groups["s"].static_members == {"i1": again.member_id}


def _two_static_members(d: ShardDriver, session_ms: int = 600_000, rebalance_ms: int = 10_000) -> tuple[Any, Any]:
    """Static members A and B of group g, in a stable generation 2 (A leads)."""
    a = d.answer(join(d, "g", instance="A", protocols=[("range", b"gen-1")], session_ms=session_ms,
                      rebalance_ms=rebalance_ms))
    d.run(d.shard.sync_group, "g", 1, a.member_id, "A", None, None, {a.member_id: b"x"})
    b_join = join(d, "g", instance="B", session_ms=session_ms, rebalance_ms=rebalance_ms)
    d.answer(join(d, "g", a.member_id, instance="A", protocols=[("range", b"gen-1")], session_ms=session_ms,
                  rebalance_ms=rebalance_ms))
    b = d.answer(b_join)
    group = d.shard.groups["g"]
    d.run(d.shard.sync_group, "g", 2, a.member_id, "A", None, None, {m: b"x" for m in group.members})
    d.run(d.shard.sync_group, "g", 2, b.member_id, "B", None, None, {})
    assert group.state == GroupState.STABLE and group.generation == 2
    return a, b


def test_a_static_member_restarting_with_new_subscription_bytes_causes_no_rebalance() -> None:
    """A restarted consumer's subscription names no owned partitions and generation -1, so
    its bytes differ from before: KIP-345 still skips the rebalance while the group's
    protocol stays (Kafka compares the protocol the next generation would select)."""
    d = ShardDriver(shard())
    _a, b = _two_static_members(d)
    again = d.answer(join(d, "g", instance="B", protocols=[("range", b"after-restart")], session_ms=600_000))
    group = d.shard.groups["g"]
    assert again.error == ErrorCode.none and again.member_id != b.member_id
    assert group.state == GroupState.STABLE and group.generation == 2


def test_a_static_member_that_does_not_rejoin_in_time_keeps_its_place() -> None:
    """A static member away (restarting, session 60 s) when a rebalance's timeout (5 s)
    passes stays in the group until its session ends, as Kafka; a member that rejoined
    leads in its place. Before, it was removed at the timeout and its partitions moved."""
    d = ShardDriver(shard())
    a = d.answer(join(d, "g", instance="A", session_ms=60_000, rebalance_ms=5_000))
    d.run(d.shard.sync_group, "g", 1, a.member_id, "A", None, None, {a.member_id: b"x"})
    b_join = join(d, "g", instance="B", session_ms=60_000, rebalance_ms=5_000)  # A is away
    d.advance(5_001)
    group = d.shard.groups["g"]
    b = d.answer(b_join)
    assert b.error == ErrorCode.none and b.generation == 2
    assert sorted(group.static_members) == ["A", "B"] and group.leader == b.member_id
    assert group.state == GroupState.COMPLETING_REBALANCE
    # A that never syncs in this generation goes one rebalance timeout later (Kafka's pending
    # sync expiry), and the group rebalances without it: its partitions were held, unread,
    # until its session (60 s) ended.
    synced = d.run(d.shard.sync_group, "g", 2, b.member_id, "B", None, None, {a.member_id: b"a", b.member_id: b"b"})
    assert d.answer(synced).error == ErrorCode.none and group.state == GroupState.STABLE
    d.advance(5_001)
    assert sorted(group.static_members) == ["B"] and group.state == GroupState.PREPARING_REBALANCE


def test_a_static_member_restarting_into_a_full_group_takes_its_own_place() -> None:
    """group.max.size counts a restarting static member (empty member id) as taking its own
    slot, not a new one (KAFKA-20601): refused, a Java client stops for good."""
    d = ShardDriver(shard(max_group_size=2))
    _a, b = _two_static_members(d)
    again = d.answer(join(d, "g", instance="B", session_ms=600_000))
    assert again.error == ErrorCode.none and again.member_id != b.member_id


def test_the_expiry_spares_a_group_between_a_members_two_joins() -> None:
    """A JoinGroup v4+ first gets MEMBER_ID_REQUIRED: the group it made holds only that
    pending id, and the expiry must not delete it before the second join."""
    d = ShardDriver(shard())
    first = d.answer(d.run(d.shard.join_group, "g", "", None, "c", "h", 10_000, 10_000, "consumer",
                           [("range", b"")], True))
    assert first.error == ErrorCode.member_id_required
    assert d.run(d.shard.expire_offsets) == 0
    second = d.run(d.shard.join_group, "g", first.member_id, None, "c", "h", 10_000, 10_000, "consumer",
                   [("range", b"")], True)
    assert d.answer(second).error == ErrorCode.none


def test_a_replaced_static_members_old_id_is_fenced_in_join_and_sync() -> None:
    """Kafka checks a static member's instance id before its member id: the old incarnation
    of a replaced static member gets FENCED_INSTANCE_ID (which stops a Java client), not
    UNKNOWN_MEMBER_ID (on which it rejoins and displaces the live one)."""
    d = ShardDriver(shard())
    a = d.answer(join(d, "g", instance="A"))
    d.run(d.shard.sync_group, "g", 1, a.member_id, "A", None, None, {a.member_id: b"x"})
    assert d.answer(join(d, "g", instance="A")).error == ErrorCode.none  # a second process takes A
    assert d.answer(d.run(d.shard.sync_group, "g", 1, a.member_id, "A", None, None, {})).error \
        == ErrorCode.fenced_instance_id
    assert d.answer(join(d, "g", a.member_id, instance="A")).error == ErrorCode.fenced_instance_id
    assert d.answer(join(d, "g", a.member_id, instance="Z")).error == ErrorCode.unknown_member_id


def test_an_empty_group_without_offsets_is_deleted_by_the_expiry() -> None:
    """Kafka's cleanupExpiredOffsets counts a group with no offsets as all expired and
    deletes it once Empty; dmq kept such groups (auto-commit off) for ever."""
    d = ShardDriver(shard(offsets_retention_ms=60_000))
    a = d.answer(join(d, "g"))
    d.run(d.shard.leave_group, "g", [(a.member_id, None)])
    assert d.shard.groups["g"].state == GroupState.EMPTY
    assert d.run(d.shard.expire_offsets) == 1
    assert "g" not in d.shard.groups and "g" not in reloaded(d).groups


def test_group_max_size_holds_for_every_way_in() -> None:
    """Kafka's acceptJoiningMember on every join: members rejoining with the id
    MEMBER_ID_REQUIRED gave them, and new static members, count too (before, only a
    dynamic join without a member id was checked, so three members got into a group of
    at most two)."""
    d = ShardDriver(shard(max_group_size=2))
    ids = [d.answer(d.run(d.shard.join_group, "g", "", None, "c", "h", 10_000, 10_000, "consumer",
                          [("range", b"")], True)) for _ in range(3)]
    assert [r.error for r in ids] == [ErrorCode.member_id_required] * 3
    rejoined = [d.run(d.shard.join_group, "g", r.member_id, None, "c", "h", 10_000, 10_000, "consumer",
                      [("range", b"")], True) for r in ids]
    assert isinstance(rejoined[2], JoinResult) and rejoined[2].error == ErrorCode.group_max_size_reached
    assert len(d.shard.groups["g"].members) == 2
    d = ShardDriver(shard(max_group_size=1))
    first = join(d, "s", instance="S1")
    assert d.answer(join(d, "s", instance="S2")).error == ErrorCode.group_max_size_reached
    assert d.answer(first).error == ErrorCode.none
    assert d.answer(join(d, "s", instance="S3")).error == ErrorCode.group_max_size_reached
    assert sorted(d.shard.groups["s"].static_members) == ["S1"]


def test_a_member_that_stops_heartbeating_is_removed_after_its_session() -> None:
    d = ShardDriver(shard())
    a = d.answer(join(d, "h", session_ms=6000))
    d.run(d.shard.sync_group, "h", 1, a.member_id, None, None, None, {a.member_id: b""})
    d.advance(5000)
    assert d.run(d.shard.heartbeat, "h", 1, a.member_id, None) == ErrorCode.none
    d.advance(5999)
    assert a.member_id in d.shard.groups["h"].members
    d.advance(1)
    group = d.shard.groups["h"]
    assert not group.members and group.state == GroupState.EMPTY and group.generation == 2
    assert d.run(d.shard.heartbeat, "h", 2, a.member_id, None) == ErrorCode.unknown_member_id


def test_member_id_required_then_join_and_unused_ids_expire() -> None:
    d = ShardDriver(shard())
    first = d.run(d.shard.join_group, "r", "", None, "c", "h", 6000, 6000, "consumer", [("range", b"")], True)
    assert first.error == ErrorCode.member_id_required and first.member_id
    assert ("pending", "r", first.member_id) in d.timers
    joined = d.answer(d.run(d.shard.join_group, "r", first.member_id, None, "c", "h", 6000, 6000,
                            "consumer", [("range", b"")], True))
    assert joined.error == ErrorCode.none and joined.member_id == first.member_id
    assert ("pending", "r", first.member_id) not in d.timers
    unused = d.run(d.shard.join_group, "r", "", None, "c", "h", 6000, 6000, "consumer", [("range", b"")], True)
    assert unused.member_id in d.shard.groups["r"].pending_members
    d.advance(6000)
    assert unused.member_id not in d.shard.groups["r"].pending_members


# ------------------------------------------------------------- a state machine


class GroupMachine(RuleBasedStateMachine):
    """Random joins, syncs, heartbeats, leaves, commits and time passing on one group.

    Invariants: the group's state obeys the transition table (``transition_to``
    raises otherwise); a member waits in at most one parked request of each kind
    and has a heartbeat timer; a Stable group's members got answers; every
    committed offset is what a new leader replaying the log reads."""

    def __init__(self) -> None:
        super().__init__()
        self.d = ShardDriver(GroupShard(0, GroupConfig(num_partitions=1, initial_rebalance_delay_ms=0,
                                                       min_session_timeout_ms=100),
                                        lambda t, p: True))
        self.known: list[str] = []
        self.joins: dict[str, Any] = {}

    def group(self) -> GroupMetadata | None:
        return self.d.shard.groups.get("g")

    @rule()
    def join_new(self) -> None:
        response = join(self.d, "g", session_ms=1000, rebalance_ms=500)
        answer = self.d.answer(response)
        member = answer.member_id if isinstance(answer, JoinResult) else None
        if isinstance(response, Deferred):
            member = response.key[2]  # type: ignore[attr-defined]
        if member:
            self.known.append(member)
            self.joins[member] = response

    @precondition(lambda self: self.known)
    @rule(i=st.integers(min_value=0, max_value=100))
    def rejoin(self, i: int) -> None:
        member = self.known[i % len(self.known)]
        self.joins[member] = join(self.d, "g", member, session_ms=1000, rebalance_ms=500)

    @precondition(lambda self: self.known)
    @rule(i=st.integers(min_value=0, max_value=100), as_leader=st.booleans())
    def sync(self, i: int, as_leader: bool) -> None:
        g = self.group()
        if g is None:
            return
        member = (g.leader or "") if as_leader else self.known[i % len(self.known)]
        self.d.run(self.d.shard.sync_group, "g", g.generation, member, None, None, None,
                   {m: m.encode() for m in g.members})

    @precondition(lambda self: self.known)
    @rule(i=st.integers(min_value=0, max_value=100))
    def heartbeat(self, i: int) -> None:
        g = self.group()
        gen = g.generation if g is not None else 0
        self.d.run(self.d.shard.heartbeat, "g", gen, self.known[i % len(self.known)], None)

    @precondition(lambda self: self.known)
    @rule(i=st.integers(min_value=0, max_value=100))
    def leave(self, i: int) -> None:
        self.d.run(self.d.shard.leave_group, "g", [(self.known[i % len(self.known)], None)])

    @rule(offset=st.integers(min_value=0, max_value=1000))
    def commit_outside_the_group(self, offset: int) -> None:
        self.d.run(self.d.shard.commit_offsets, "g", -1, "", None, [("t", 0, offset, -1, None)])

    @rule(ms=st.integers(min_value=1, max_value=1500))
    def time_passes(self, ms: int) -> None:
        self.d.advance(ms)

    @invariant()
    def members_are_consistent(self) -> None:
        g = self.group()
        if g is None:
            return
        assert g.state in set(GroupState)
        for m in g.members.values():
            assert ("heartbeat", "g", m.member_id) in self.d.timers
            if m.join_waiter is not None:
                assert m.join_waiter in self.d.parked
            if m.sync_waiter is not None:
                assert m.sync_waiter in self.d.parked
                assert g.state == GroupState.COMPLETING_REBALANCE
        if g.state == GroupState.STABLE:
            assert all(m.join_waiter is None and m.sync_waiter is None for m in g.members.values())
        if g.state == GroupState.EMPTY:
            assert not g.members
        waiters = {m.join_waiter for m in g.members.values()} | {m.sync_waiter for m in g.members.values()}
        # Nobody waits for ever: every parked request belongs to a member still in the group.
        assert self.d.parked <= waiters

    @invariant()
    def a_new_leader_reads_the_same_offsets(self) -> None:
        g = self.group()
        fresh = reloaded(self.d).groups.get("g")
        assert (g.offsets if g is not None else {}) == (fresh.offsets if fresh is not None else {})


GroupMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_group_state_machine = GroupMachine.TestCase


def test_offsets_of_a_transaction_count_only_once_it_commits() -> None:
    d = ShardDriver(shard())
    d.run(d.shard.commit_offsets, "g", -1, "", None, [("t", 0, 5, -1, None)])
    assert d.run(d.shard.txn_offset_commit, "tx", "g", 77, 0, -1, "", None,
                 [("t", 0, 9, -1, None), ("t", 1, 3, -1, None)]) == [ErrorCode.none, ErrorCode.none]
    assert d.shard.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 5  # type: ignore[union-attr]
    assert d.shard.unstable_offsets("g") == {("t", 0), ("t", 1)}
    assert d.run(d.shard.complete_transaction, 77, 0, True, 3) == ErrorCode.none
    assert d.shard.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 9  # type: ignore[union-attr]
    assert d.shard.unstable_offsets("g") == set()
    # An aborted transaction's offsets never count.
    d.run(d.shard.txn_offset_commit, "tx", "g", 77, 1, -1, "", None, [("t", 0, 50, -1, None)])
    d.run(d.shard.complete_transaction, 77, 1, False, 3)
    assert d.shard.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 9  # type: ignore[union-attr]
    # A new leader replaying the log (transactional batches and markers) agrees.
    again = reloaded(d)
    assert again.fetch_offsets("g", None) == d.shard.fetch_offsets("g", None)
    assert again.txn_offsets == {}


def test_a_transaction_open_when_the_partition_loads_stays_pending() -> None:
    d = ShardDriver(shard())
    d.run(d.shard.txn_offset_commit, "tx", "g", 5, 0, -1, "", None, [("t", 0, 9, -1, None)])
    again = reloaded(d)
    assert again.fetch_offsets("g", [("t", 0)])[1][("t", 0)] is None
    assert again.unstable_offsets("g") == {("t", 0)}
    again.replay_marker(5, True, loading=False)
    assert again.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 9  # type: ignore[union-attr]


def test_a_member_committing_in_a_transaction_is_fenced_like_any_commit() -> None:
    d = ShardDriver(shard())
    a = d.answer(join(d, "g"))
    d.run(d.shard.sync_group, "g", 1, a.member_id, None, None, None, {a.member_id: b""})
    ok = d.run(d.shard.txn_offset_commit, "tx", "g", 5, 0, 1, a.member_id, None, [("t", 0, 1, -1, None)])
    assert ok == [ErrorCode.none]
    stale = d.run(d.shard.txn_offset_commit, "tx", "g", 5, 0, 0, a.member_id, None, [("t", 0, 1, -1, None)])
    assert stale == [ErrorCode.illegal_generation]
    gone = d.run(d.shard.txn_offset_commit, "tx", "g", 5, 0, 1, "nobody", None, [("t", 0, 1, -1, None)])
    assert gone == [ErrorCode.unknown_member_id]


def test_an_unreadable_record_is_skipped_and_the_others_load() -> None:
    """A value dmq cannot read (a version Kafka never wrote, truncated) is logged and
    skipped, leaving the state as it was; the partition's other records load."""
    offset_key = rec.encode_offset_key(rec.OffsetKey("g", "t", 0))
    log = [
        LogEntry(0, offset_key, rec.encode_offset_value(rec.OffsetValue(5, -1, "", 1))),
        LogEntry(1, offset_key, b"\x00\x09" + b"\x00" * 20),  # offset value v9
        LogEntry(2, rec.encode_offset_key(rec.OffsetKey("new", "t", 0)), b"\x00\x03\x00"),  # truncated
        LogEntry(3, rec.encode_group_key(rec.GroupKey("g")), b"\x00\x07"),  # group value v7
        LogEntry(4, rec.encode_group_key(rec.GroupKey("h")), b"\x00\x03\x00"),  # truncated
        LogEntry(5, rec.encode_offset_key(rec.OffsetKey("h", "t", 1)),
                 rec.encode_offset_value(rec.OffsetValue(9, -1, "", 1))),
        LogEntry(6, offset_key, b"\x00\x03\x00", producer_id=7),  # a transaction's, truncated
    ]
    s = replay_into(shard(), log)
    assert set(s.groups) == {"g", "h"}  # no empty group left by the unreadable "new" offset
    assert s.groups["g"].offsets[("t", 0)].offset == 5 and s.groups["g"].state == GroupState.EMPTY
    assert s.groups["h"].offsets[("t", 1)].offset == 9 and not s.groups["h"].members
    assert s.txn_offsets == {}


@pytest.mark.parametrize("transactional", [False, True])
def test_generation_minus_one_commits_to_an_empty_group_whatever_its_member_id(transactional: bool) -> None:
    """Kafka's validateOffsetCommit: generation -1 on an absent or Empty group commits,
    member id or not (a Java consumer keeps its member id with generation -1 after some
    errors); on a group with members it is checked like any member's commit."""
    d = ShardDriver(shard())

    def commit(group: str, generation: int, member: str, instance: str | None = None) -> Any:
        if transactional:
            return d.run(d.shard.txn_offset_commit, "tx", group, 5, 0, generation, member, instance,
                         [("t", 0, 1, -1, None)])[0]
        return d.run(d.shard.commit_offsets, group, generation, member, instance, [("t", 0, 1, -1, None)])[0]

    assert commit("absent", -1, "consumer-1-abc") == ErrorCode.none
    assert commit("absent2", 3, "consumer-1-abc") == ErrorCode.illegal_generation
    d.run(d.shard.commit_offsets, "empty", -1, "", None, [("t", 1, 1, -1, None)])
    assert d.shard.groups["empty"].state == GroupState.EMPTY
    assert commit("empty", -1, "old-member") == ErrorCode.none
    assert commit("empty", -1, "old-member", "inst") == ErrorCode.none
    a = d.answer(join(d, "g"))
    d.run(d.shard.sync_group, "g", 1, a.member_id, None, None, None, {a.member_id: b""})
    assert commit("g", -1, "old-member") == ErrorCode.unknown_member_id
    assert commit("g", -1, a.member_id) == ErrorCode.illegal_generation
    assert commit("g", 1, a.member_id, "no-such-instance") == ErrorCode.unknown_member_id
    # No member id: the group's members alone commit, but a transaction may (older
    # TxnOffsetCommit versions have no member id).
    assert commit("g", -1, "") == (ErrorCode.none if transactional else ErrorCode.unknown_member_id)


def test_offset_delete_refuses_a_non_empty_group_of_another_protocol() -> None:
    """Kafka's validateOffsetDelete: NON_EMPTY_GROUP for a group with members whose protocol
    type is not "consumer" (which topics it reads is unknown), nothing written; a consumer
    group is refused per subscribed topic only, and any group once empty loses offsets."""
    d = ShardDriver(shard())
    d.run(d.shard.commit_offsets, "c", -1, "", None, [("t", 0, 1, -1, None)])
    a = d.answer(d.run(d.shard.join_group, "c", "", None, "c", "h", 10_000, 10_000, "connect",
                       [("default", b"x")], False))
    assert a.error == ErrorCode.none
    written = len(d.log)
    assert d.run(d.shard.delete_offsets, "c", [("t", 0)]) == (ErrorCode.non_empty_group, {})
    assert len(d.log) == written and ("t", 0) in d.shard.groups["c"].offsets
    d.run(d.shard.leave_group, "c", [(a.member_id, None)])
    assert d.shard.groups["c"].state == GroupState.EMPTY
    assert d.run(d.shard.delete_offsets, "c", [("t", 0)]) == (ErrorCode.none, {("t", 0): ErrorCode.none})
    assert ("t", 0) not in d.shard.groups["c"].offsets


def test_offsets_of_topics_a_stable_consumer_group_left_expire() -> None:
    """Kafka's offsetExpirationCondition: a Stable consumer group whose subscriptions are
    known loses, by commit time, the offsets of topics it no longer subscribes to; those of
    its topics, or that an open transaction will replace, stay, and so does the group. A
    group of another protocol type keeps all of its offsets while it has members."""
    d = ShardDriver(GroupShard(0, GroupConfig(num_partitions=5, initial_rebalance_delay_ms=0,
                                              offsets_retention_ms=60_000), lambda t, p: p < 4))
    a = d.answer(join(d, "g", protocols=[("range", subscription("t"))]))
    d.run(d.shard.sync_group, "g", 1, a.member_id, None, None, None, {a.member_id: b""})
    c = d.answer(d.run(d.shard.join_group, "c", "", None, "c", "h", 10_000, 10_000, "connect",
                       [("default", b"x")], False))
    d.run(d.shard.sync_group, "c", 1, c.member_id, None, None, None, {c.member_id: b""})
    assert d.shard.groups["g"].state == d.shard.groups["c"].state == GroupState.STABLE
    for group, member in (("g", a.member_id), ("c", c.member_id)):
        d.run(d.shard.commit_offsets, group, 1, member, None,
              [("t", 0, 5, -1, None), ("u", 0, 5, -1, None), ("v", 0, 5, -1, None)])
    d.run(d.shard.txn_offset_commit, "tx", "g", 7, 0, 1, a.member_id, None, [("v", 0, 6, -1, None)])
    d.now += 30_000
    for group, member in (("g", a.member_id), ("c", c.member_id)):
        d.run(d.shard.heartbeat, group, 1, member, None)
    assert d.run(d.shard.expire_offsets) == 0
    d.now += 31_000
    for group, member in (("g", a.member_id), ("c", c.member_id)):
        d.run(d.shard.heartbeat, group, 1, member, None)
    assert d.run(d.shard.expire_offsets) == 1
    assert set(d.shard.groups["g"].offsets) == {("t", 0), ("v", 0)}
    assert set(d.shard.groups["c"].offsets) == {("t", 0), ("u", 0), ("v", 0)}
    assert set(reloaded(d).groups["g"].offsets) == {("t", 0), ("v", 0)}


def test_a_commit_with_its_own_retention_expires_then() -> None:
    """OffsetCommit v2-4's retention time (Kafka's expireTimestampMs): written as an
    OffsetCommitValue v1 with the expire timestamp, which expiry honours, loaded or not,
    instead of offsets.retention.minutes; the other offsets keep the broker's retention."""
    d = ShardDriver(shard(offsets_retention_ms=60_000))
    d.run(lambda now: d.shard.commit_offsets("g", -1, "", None, [("t", 0, 5, -1, "m")], now, retention_ms=10_000))
    d.run(d.shard.commit_offsets, "g", -1, "", None, [("t", 1, 6, -1, None)])
    value = rec.decode_offset_value(d.log[0].value or b"")
    assert d.log[0].value is not None and d.log[0].value[:2] == b"\x00\x01"
    assert value == rec.OffsetValue(5, -1, "m", d.now, d.now + 10_000)
    again = reloaded(d)
    assert again.groups["g"].offsets[("t", 0)].expire_timestamp == d.now + 10_000
    d.now += 9_999
    assert d.run(d.shard.expire_offsets) == 0
    d.now += 1
    assert d.run(d.shard.expire_offsets) == 1 and set(d.shard.groups["g"].offsets) == {("t", 1)}
    assert again.expire_offsets(d.now).records == [(d.log[-1].key, None)]  # the loaded shard too
