"""Share groups (KIP-932) in the group shard, without an event loop: membership,
epochs, fencing, session timeouts, assignment, describe, and rebuilding by replay."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.errors import ErrorCode
from support.coordinator import ShardDriver, replay_into

from dmq.group import records as rec
from dmq.group.shard import GroupConfig, GroupShard, JoinResult
from dmq.group.share_assignor import sharing
from dmq.group.share_group import (
    DescribedShareGroup,
    InitializedTopic,
    ShareConfig,
    ShareHeartbeatResult,
    ShareTopic,
    session_key,
    state_initialization_error,
)

ONE = ShareTopic(uuid.UUID(int=1), 1)
FOUR = ShareTopic(uuid.UUID(int=4), 4)


def topics() -> dict[str, ShareTopic]:
    return {"one": ONE, "four": FOUR}


def shard(meta: dict[str, ShareTopic] | None = None, **share: int) -> GroupShard:
    meta = topics() if meta is None else meta
    config = GroupConfig(num_partitions=5, initial_rebalance_delay_ms=0, share=ShareConfig(**share))
    return GroupShard(0, config, lambda t, p: t in meta and p < meta[t].partitions, meta.get)


def reloaded(d: ShardDriver) -> GroupShard:
    """A new coordinator after a failover: the shard rebuilt by replaying the log."""
    old: GroupShard = d.shard
    return replay_into(GroupShard(0, old.config, old.partition_exists, old.share.topics), d.log)  # type: ignore[no-any-return]


def hb(d: ShardDriver, member: str, epoch: int, subscribe: list[str] | None = None, group: str = "sg",
       rack: str | None = None) -> ShareHeartbeatResult:
    result = d.run(d.shard.share_group_heartbeat, group, member, epoch, rack, subscribe, "client", "/10.0.0.1")
    assert isinstance(result, ShareHeartbeatResult)
    return result


def join(d: ShardDriver, member: str, subscribe: list[str], group: str = "sg") -> ShareHeartbeatResult:
    result = hb(d, member, 0, subscribe, group)
    assert result.error == ErrorCode.none, result
    return result


def parts(result: ShareHeartbeatResult, topic: ShareTopic) -> tuple[int, ...]:
    assert result.assignment is not None
    return result.assignment.get(topic.topic_id, ())


def snapshot(s: GroupShard) -> dict[str, Any]:
    """Everything durable about the share groups, to compare a shard with its replay."""
    return {
        gid: (g.group_epoch, g.metadata_hash, g.assignment_epoch, g.target, g.initialized,
              {mid: (m.client_id, m.client_host, m.rack_id, m.subscribed_topic_names, m.member_epoch,
                     m.previous_member_epoch, m.assigned) for mid, m in g.members.items()})
        for gid, g in s.share.groups.items()
    }


def record_types(d: ShardDriver, since: int) -> list[int]:
    return [rec.decode_key(e.key).record_type for e in d.log[since:]  # type: ignore[arg-type, union-attr]
            if e.key is not None]


# ------------------------------------------------------------------- joining


def test_join_creates_the_group_and_answers_the_assignment_at_once() -> None:
    d = ShardDriver(shard())
    first = join(d, "m1", ["four"])
    assert (first.member_id, first.member_epoch, first.heartbeat_interval_ms) == ("m1", 1, 5000)
    assert parts(first, FOUR) == (0, 1, 2, 3)
    assert record_types(d, 0) == [rec.SHARE_MEMBER_METADATA, rec.SHARE_STATE_PARTITION_METADATA,
                                  rec.SHARE_GROUP_METADATA, rec.SHARE_TARGET_ASSIGNMENT_MEMBER,
                                  rec.SHARE_TARGET_ASSIGNMENT_METADATA, rec.SHARE_CURRENT_MEMBER_ASSIGNMENT]
    assert d.timers == {session_key("sg", "m1"): d.now + 45_000}
    group = d.shard.share_group("sg")
    assert group is not None and group.state == "Stable"
    assert d.shard.share_initialized_partitions("sg") == {("four", p) for p in range(4)}
    assert set(d.shard.share_group_members("sg")) == {"m1"}


def test_three_members_share_a_one_partition_topic() -> None:
    d = ShardDriver(shard())
    a, b, c = join(d, "a", ["one"]), join(d, "b", ["one"]), join(d, "c", ["one"])
    assert (a.member_epoch, b.member_epoch, c.member_epoch) == (1, 2, 3)
    assert parts(a, ONE) == parts(b, ONE) == parts(c, ONE) == (0,)
    again = hb(d, "a", 1)  # a catches up with the group: same partition, new epoch
    assert again.member_epoch == 3 and again.assignment is None  # unchanged: not repeated


def test_two_members_split_four_partitions_and_a_leave_gives_the_other_everything() -> None:
    d = ShardDriver(shard())
    a = join(d, "a", ["four"])
    b = join(d, "b", ["four"])
    assert len(parts(b, FOUR)) == 2
    a2 = hb(d, "a", a.member_epoch)
    assert a2.member_epoch == b.member_epoch == 2
    assert sorted(parts(a2, FOUR) + parts(b, FOUR)) == [0, 1, 2, 3]
    left = hb(d, "b", -1)
    assert (left.error, left.member_id, left.member_epoch, left.assignment) == (ErrorCode.none, "b", -1, None)
    assert session_key("sg", "b") not in d.timers
    a3 = hb(d, "a", 2)
    assert a3.member_epoch == 3 and parts(a3, FOUR) == (0, 1, 2, 3)  # the leave bumped the group to 3
    assert hb(d, "b", -1).error == ErrorCode.unknown_member_id
    assert hb(d, "b", 2).error == ErrorCode.unknown_member_id
    assert hb(d, "x", -1, group="nope").error == ErrorCode.group_id_not_found


def test_rejoining_with_epoch_zero_answers_the_current_state() -> None:
    d = ShardDriver(shard())
    a = join(d, "a", ["four"])
    logged = len(d.log)
    again = join(d, "a", ["four"])
    assert again.member_epoch == a.member_epoch and parts(again, FOUR) == (0, 1, 2, 3)
    assert len(d.log) == logged  # nothing changed, nothing written


def test_the_assignment_is_sent_on_join_full_requests_and_changes_only() -> None:
    d = ShardDriver(shard())
    a = join(d, "a", ["four"])
    assert hb(d, "a", a.member_epoch).assignment is None
    full = hb(d, "a", a.member_epoch, ["four"])  # a full request (after an error, say)
    assert full.assignment is not None and parts(full, FOUR) == (0, 1, 2, 3)
    join(d, "b", ["four"])
    changed = hb(d, "a", a.member_epoch)
    assert changed.assignment is not None and len(parts(changed, FOUR)) == 2


def test_subscription_changes_bump_the_epoch_and_reassign() -> None:
    d = ShardDriver(shard())
    a = join(d, "a", ["one"])
    both = hb(d, "a", a.member_epoch, ["one", "four"])
    assert both.member_epoch == 2 and parts(both, ONE) == (0,) and parts(both, FOUR) == (0, 1, 2, 3)
    only_four = hb(d, "a", 2, ["four"])
    assert only_four.member_epoch == 3 and only_four.assignment == {FOUR.topic_id: (0, 1, 2, 3)}


def test_topics_created_or_grown_later_are_assigned_at_the_next_heartbeat() -> None:
    meta = topics()
    d = ShardDriver(shard(meta))
    a = join(d, "a", ["later"])
    assert a.assignment == {} and a.member_epoch == 1  # subscribed to nothing that exists
    assert hb(d, "a", 1).member_epoch == 1  # no change, no bump
    later = meta["later"] = ShareTopic(uuid.UUID(int=99), 2)
    created = hb(d, "a", 1)
    assert created.member_epoch == 2 and parts(created, later) == (0, 1)
    meta["later"] = ShareTopic(later.topic_id, 3)
    grown = hb(d, "a", 2)
    assert grown.member_epoch == 3 and parts(grown, later) == (0, 1, 2)
    # Deleted and created again under the same name: a new id, the old one forgotten.
    again = meta["later"] = ShareTopic(uuid.UUID(int=100), 1)
    recreated = hb(d, "a", 3)
    assert recreated.assignment == {again.topic_id: (0,)}
    assert d.shard.share_initialized_partitions("sg") == {("later", 0)}
    del meta["later"]
    gone = hb(d, "a", recreated.member_epoch)
    assert gone.assignment == {}


# -------------------------------------------------------------------- errors


def test_epoch_checks() -> None:
    d = ShardDriver(shard())
    join(d, "a", ["four"])
    join(d, "b", ["four"])
    a = hb(d, "a", 1)
    assert a.member_epoch == 2
    assert hb(d, "a", 3).error == ErrorCode.fenced_member_epoch  # ahead of the coordinator
    assert hb(d, "a", 1).error == ErrorCode.none  # the previous epoch: a lost response is forgiven
    join(d, "c", ["four"])
    assert hb(d, "a", 2).member_epoch == 3
    assert hb(d, "a", 1).error == ErrorCode.fenced_member_epoch  # older than the previous one
    assert hb(d, "nobody", 3).error == ErrorCode.unknown_member_id
    assert hb(d, "a", 5, group="missing").error == ErrorCode.group_id_not_found


def test_invalid_requests() -> None:
    d = ShardDriver(shard())
    for member, epoch, subscribe, group, rack in [
        ("", 0, ["one"], "sg", None),           # no member id
        ("m" * 37, 0, ["one"], "sg", None),     # a member id longer than 36
        ("m", 0, ["one"], "", None),            # no group id
        ("m", 0, ["one"], "sg", ""),            # an empty rack
        ("m", 0, None, "sg", None),             # a join without topics
        ("m", 0, [], "sg", None),
        ("m", -2, None, "sg", None),            # an epoch below -1
    ]:
        result = hb(d, member, epoch, subscribe, group, rack)
        assert result.error == ErrorCode.invalid_request and result.message, (member, epoch, group)
    assert d.log == [] and d.shard.share.groups == {}


def test_a_full_group_refuses_new_members() -> None:
    d = ShardDriver(shard(max_size=2))
    join(d, "a", ["one"])
    join(d, "b", ["one"])
    assert hb(d, "c", 0, ["one"]).error == ErrorCode.group_max_size_reached
    assert hb(d, "a", 0, ["one"]).error == ErrorCode.none  # a member rejoining is no new member


def test_share_and_classic_groups_share_one_namespace() -> None:
    d = ShardDriver(shard())
    join(d, "a", ["one"])
    joined = d.run(d.shard.join_group, "sg", "", None, "c", "h", 10_000, 10_000, "consumer",
                   [("range", b"")], False)
    assert joined == JoinResult(ErrorCode.inconsistent_group_protocol, "")
    assert d.run(d.shard.commit_offsets, "sg", -1, "", None, [("one", 0, 5, -1, None)]) == \
        [ErrorCode.group_id_not_found]
    assert d.run(d.shard.txn_offset_commit, "tx", "sg", 1, 0, -1, "", None, [("one", 0, 5, -1, None)]) == \
        [ErrorCode.group_id_not_found]
    assert d.shard.fetch_offsets("sg", None) == (ErrorCode.group_id_not_found, {})
    assert d.run(d.shard.delete_offsets, "sg", [("one", 0)])[0] == ErrorCode.group_id_not_found
    assert "sg" not in d.shard.groups
    # A classic group's id is no share group.
    d.run(d.shard.commit_offsets, "classic", -1, "", None, [("one", 0, 5, -1, None)])
    result = hb(d, "a", 0, ["one"], group="classic")
    assert result.error == ErrorCode.group_id_not_found and result.message == "Group classic is not a share group."
    described = d.shard.share_group_describe(["classic", "missing", "sg"])
    assert [g.error for g in described] == [ErrorCode.group_id_not_found, ErrorCode.group_id_not_found,
                                            ErrorCode.none]


# ------------------------------------------------------------ sessions, leave


def test_a_silent_member_is_fenced_when_its_session_runs_out() -> None:
    d = ShardDriver(shard())
    join(d, "a", ["four"])
    b = join(d, "b", ["four"])
    d.advance(30_000)
    hb(d, "b", b.member_epoch)  # b keeps its session alive; a says nothing
    d.advance(20_000)
    group = d.shard.share_group("sg")
    assert group is not None and set(group.members) == {"b"}
    assert hb(d, "a", 2).error == ErrorCode.unknown_member_id
    rest = hb(d, "b", b.member_epoch)
    assert rest.member_epoch == 3 and parts(rest, FOUR) == (0, 1, 2, 3)
    assert "a" not in reloaded(d).share.groups["sg"].members


def test_the_last_member_leaving_leaves_an_empty_group() -> None:
    d = ShardDriver(shard())
    join(d, "a", ["one"])
    hb(d, "a", -1)
    (described,) = d.shard.share_group_describe(["sg"])
    assert (described.state, described.group_epoch, described.assignment_epoch, described.members) == \
        ("Empty", 2, 1, ())
    assert d.shard.listed_groups(["empty"]) == d.shard.listed_groups(types=["SHARE"])
    rejoined = join(d, "a", ["one"])
    assert rejoined.member_epoch == 3 and parts(rejoined, ONE) == (0,)


# --------------------------------------------------------------- admin APIs


def test_describe_lists_members_with_topic_names() -> None:
    d = ShardDriver(shard())
    join(d, "a", ["one", "four"])
    hb(d, "b", 0, ["four"], rack="r1")
    (g,) = d.shard.share_group_describe(["sg"])
    assert (g.error, g.state, g.group_epoch, g.assignment_epoch, g.assignor_name) == \
        (ErrorCode.none, "Stable", 2, 2, "simple")
    b = next(m for m in g.members if m.member_id == "b")
    assert (b.rack_id, b.client_id, b.client_host, b.subscribed_topic_names, b.member_epoch) == \
        ("r1", "client", "/10.0.0.1", ("four",), 2)
    assert all(name == "four" and len(ps) == 2 for _, name, ps in b.assignment)


def test_only_a_member_of_a_share_group_gets_an_assigned_partitions_state_initialized() -> None:
    """What a share-partition's leader asks the coordinator before creating durable state:
    it created a state for whatever group id and partition a ShareFetch named, so any
    principal with READ on a group pattern filled __share_group_state with states of
    made-up groups that no admin API deletes."""
    d = ShardDriver(shard())
    join(d, "a", ["four"])
    d.run(d.shard.commit_offsets, "classic", -1, "", None, [("one", 0, 5, -1, None)])

    def may(group: str, member: str, topic: ShareTopic, partition: int) -> ErrorCode:
        (described,) = d.shard.share_group_describe([group])
        return state_initialization_error(described, member, topic.topic_id, partition)

    assert [may("sg", "a", FOUR, p) for p in range(4)] == [ErrorCode.none] * 4
    assert may("nobody", "a", FOUR, 0) == ErrorCode.group_id_not_found
    assert may("classic", "a", FOUR, 0) == ErrorCode.group_id_not_found
    assert may("sg", "stranger", FOUR, 0) == ErrorCode.unknown_member_id
    assert may("sg", "a", ONE, 0) == ErrorCode.invalid_request  # nobody subscribes: never initialized
    assert may("sg", "a", FOUR, 4) == ErrorCode.invalid_request
    hb(d, "a", -1)
    assert may("sg", "a", FOUR, 0) == ErrorCode.unknown_member_id
    for error in (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress):
        assert state_initialization_error(DescribedShareGroup("sg", error), "a", FOUR.topic_id, 0) == \
            ErrorCode.coordinator_not_available


def test_list_groups_by_type_and_state() -> None:
    d = ShardDriver(shard())
    join(d, "a", ["one"])
    d.run(d.shard.commit_offsets, "classic", -1, "", None, [("one", 0, 5, -1, None)])
    listed = {(g.group_id, g.protocol_type, g.state, g.group_type) for g in d.shard.listed_groups()}
    assert listed == {("sg", "share", "Stable", "share"), ("classic", "", "Empty", "classic")}
    assert [g.group_id for g in d.shard.listed_groups(types=["Share"])] == ["sg"]
    assert [g.group_id for g in d.shard.listed_groups(types=["classic"])] == ["classic"]
    assert [g.group_id for g in d.shard.listed_groups(["STABLE"])] == ["sg"]
    assert d.shard.listed_groups(types=["consumer"]) == []


def test_delete_groups_only_when_empty() -> None:
    d = ShardDriver(shard())
    join(d, "a", ["one"])
    assert d.run(d.shard.delete_group, "sg") == ErrorCode.non_empty_group
    hb(d, "a", -1)
    since = len(d.log)
    assert d.run(d.shard.delete_group, "sg") == ErrorCode.none
    assert record_types(d, since) == [rec.SHARE_TARGET_ASSIGNMENT_METADATA, rec.SHARE_STATE_PARTITION_METADATA,
                                      rec.SHARE_GROUP_METADATA]
    assert all(e.value is None for e in d.log[since:])
    assert d.shard.share_group("sg") is None and "sg" not in reloaded(d).share.groups
    assert d.run(d.shard.delete_group, "sg") == ErrorCode.group_id_not_found
    # The id is free again, for a group of either kind.
    assert d.run(d.shard.commit_offsets, "sg", -1, "", None, [("one", 0, 5, -1, None)]) == [ErrorCode.none]


def test_offsets_changed_only_on_an_empty_share_group_and_kept_by_replay() -> None:
    """Alter/DeleteShareGroupOffsets' part on the group: record 15 gains the altered
    partitions and loses the deleted topics; a group with members, a classic group and
    an unknown id are refused."""
    d = ShardDriver(shard())
    seven = uuid.UUID(int=7)
    assert d.run(d.shard.share_offsets_changed, "sg", {}, frozenset()) == ErrorCode.group_id_not_found
    join(d, "a", ["one"])
    add = {FOUR.topic_id: InitializedTopic("four", frozenset({2}))}
    assert d.run(d.shard.share_offsets_changed, "sg", add, frozenset()) == ErrorCode.non_empty_group
    hb(d, "a", -1)
    since = len(d.log)
    assert d.run(d.shard.share_offsets_changed, "sg", add, frozenset()) == ErrorCode.none
    assert record_types(d, since) == [rec.SHARE_STATE_PARTITION_METADATA]
    assert d.shard.share_initialized_partitions("sg") == {("one", 0), ("four", 2)}
    since = len(d.log)
    assert d.run(d.shard.share_offsets_changed, "sg", add, frozenset()) == ErrorCode.none
    assert len(d.log) == since, "nothing new: nothing written"
    assert d.run(d.shard.share_offsets_changed, "sg", {}, frozenset({ONE.topic_id, seven})) == ErrorCode.none
    assert d.shard.share_offsets_target("sg") == (ErrorCode.none, {FOUR.topic_id: InitializedTopic(
        "four", frozenset({2}))})
    assert reloaded(d).share_initialized_partitions("sg") == {("four", 2)}
    d.run(d.shard.commit_offsets, "classic", -1, "", None, [("one", 0, 5, -1, None)])
    assert d.run(d.shard.share_offsets_changed, "classic", add, frozenset()) == ErrorCode.group_id_not_found
    assert d.shard.share_offsets_target("classic")[0] == ErrorCode.group_id_not_found


# ------------------------------------------------------------------ failover


def test_a_new_coordinator_loads_the_groups_and_members_resume() -> None:
    d = ShardDriver(shard())
    a = join(d, "a", ["four"])
    b = join(d, "b", ["four"])
    hb(d, "a", a.member_epoch)
    hb(d, "c", 0, ["one"], group="other")
    hb(d, "c", -1, group="other")
    new = reloaded(d)
    assert snapshot(new) == snapshot(d.shard)
    failover = ShardDriver(new, d.now)
    failover.apply(new.on_loaded(failover.now))
    assert set(failover.timers) == {session_key("sg", "a"), session_key("sg", "b")}
    resumed = hb(failover, "b", b.member_epoch)
    assert resumed.error == ErrorCode.none and resumed.member_epoch == b.member_epoch
    assert failover.log == []  # nothing to change
    assert new.share_initialized_partitions("sg") == d.shard.share_initialized_partitions("sg")
    # A member that stays silent after the failover is fenced a session later.
    failover.advance(40_000)
    hb(failover, "b", b.member_epoch)
    failover.advance(10_000)
    assert set(new.share_group_members("sg")) == {"b"}


def test_records_written_by_the_shard_itself_are_not_applied_twice() -> None:
    d = ShardDriver(shard())
    join(d, "a", ["four"])
    before = snapshot(d.shard)
    for entry in d.log:  # what the runtime replays after the commit: already reflected
        assert entry.key is not None
        d.shard.replay(entry.key, entry.value, loading=False)
    assert snapshot(d.shard) == before


# -------------------------------------------------------- stateful property


class ShareGroupMachine(RuleBasedStateMachine):
    """Members join, heartbeat, change subscriptions, leave or go silent, topics grow,
    the coordinator fails over; the group always converges on a SimpleAssignor
    assignment, and replaying the log always rebuilds the live state."""

    MEMBERS = ("m1", "m2", "m3", "m4", "m5")

    def __init__(self) -> None:
        super().__init__()
        self.meta = {"one": ONE, "four": FOUR, "three": ShareTopic(uuid.UUID(int=3), 3)}
        self.driver = ShardDriver(shard(self.meta))
        self.epochs: dict[str, int] = {}  # what each live client believes its epoch is

    @property
    def group(self) -> Any:
        return self.driver.shard.share_group("sg")

    @rule(member=st.sampled_from(MEMBERS), subscribe=st.sets(st.sampled_from(["one", "four", "three", "none"]),
                                                               min_size=1))
    def join(self, member: str, subscribe: set[str]) -> None:
        result = hb(self.driver, member, 0, sorted(subscribe))
        assert result.error == ErrorCode.none and result.assignment is not None
        self.epochs[member] = result.member_epoch

    @precondition(lambda self: self.epochs)
    @rule(data=st.data(), resubscribe=st.none() | st.sets(st.sampled_from(["one", "four", "three"]), min_size=1))
    def heartbeat(self, data: st.DataObject, resubscribe: set[str] | None) -> None:
        member = data.draw(st.sampled_from(sorted(self.epochs)))
        result = hb(self.driver, member, self.epochs[member], sorted(resubscribe) if resubscribe else None)
        assert result.error == ErrorCode.none, result
        assert result.member_epoch >= self.epochs[member]
        self.epochs[member] = result.member_epoch

    @precondition(lambda self: self.epochs)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        member = data.draw(st.sampled_from(sorted(self.epochs)))
        assert hb(self.driver, member, -1).member_epoch == -1
        del self.epochs[member]

    @precondition(lambda self: self.epochs)
    @rule(data=st.data())
    def go_silent(self, data: st.DataObject) -> None:
        member = data.draw(st.sampled_from(sorted(self.epochs)))
        self.driver.fire(session_key("sg", member))
        assert hb(self.driver, member, self.epochs.pop(member)).error == ErrorCode.unknown_member_id

    @rule()
    def grow_a_topic(self) -> None:
        three = self.meta["three"]
        self.meta["three"] = ShareTopic(three.topic_id, three.partitions + 1)

    @rule()
    def fail_over(self) -> None:
        new = reloaded(self.driver)
        assert snapshot(new) == snapshot(self.driver.shard)
        driver = ShardDriver(new, self.driver.now)
        driver.log = self.driver.log  # the same partition, now led by another broker
        driver.apply(new.on_loaded(driver.now))
        self.driver = driver

    @invariant()
    def members_are_the_live_clients(self) -> None:
        group = self.group
        assert set(group.members if group else ()) == set(self.epochs)
        if group is not None:
            assert group.assignment_epoch <= group.group_epoch
            assert all(m.member_epoch <= group.assignment_epoch for m in group.members.values())
            assert {k[2] for k in self.driver.timers if k[0] == "share-session"} == set(group.members)

    @invariant()
    def once_everyone_heartbeats_the_assignment_is_the_simple_assignors(self) -> None:
        if not self.epochs:
            return
        probe = ShardDriver(reloaded(self.driver), self.driver.now)
        answers = {m: hb(probe, m, e) for m, e in self.epochs.items()}
        answers = {m: hb(probe, m, r.member_epoch, sorted(probe.shard.share_group("sg").members[m]
                                                          .subscribed_topic_names))
                   for m, r in answers.items()}  # a second round: everyone at the final epoch
        group = probe.shard.share_group("sg")
        assert len({r.member_epoch for r in answers.values()}) == 1
        subscribers: dict[str, set[str]] = {}
        for m in group.members.values():
            for name in m.subscribed_topic_names:
                subscribers.setdefault(name, set()).add(m.member_id)
        homogeneous = len({m.subscribed_topic_names for m in group.members.values()}) == 1
        everything = sum(self.meta[n].partitions for n in subscribers if n in self.meta)
        for name, who in subscribers.items():
            if name not in self.meta:
                continue
            topic = self.meta[name]
            counts = [sum(1 for m in who if p in (answers[m].assignment or {}).get(topic.topic_id, ()))
                      for p in range(topic.partitions)]
            expected = sharing(len(group.members), everything) if homogeneous else sharing(len(who), topic.partitions)
            assert counts == [expected] * topic.partitions, (name, counts, expected)


ShareGroupMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
test_share_group_machine = ShareGroupMachine.TestCase


def test_a_failed_write_is_undone_only_if_nothing_changed_the_group_since() -> None:
    s = shard()
    first = s.share_group_heartbeat("sg", "a", 0, None, ["four"], "c", "h", 0)
    assert first.failed is not None
    first.failed(s, ErrorCode.not_enough_replicas, 0)
    assert s.share_group("sg") is None
    s.share_group_heartbeat("sg", "a", 0, None, ["four"], "c", "h", 0)
    second = s.share_group_heartbeat("sg", "b", 0, None, ["four"], "c", "h", 0)
    third = s.share_group_heartbeat("sg", "c", 0, None, ["four"], "c", "h", 0)
    assert second.failed is not None and third.failed is not None
    second.failed(s, ErrorCode.request_timed_out, 0)  # c joined after it: its records follow b's
    assert set(s.share_group_members("sg")) == {"a", "b", "c"}
    undo = third.failed(s, ErrorCode.not_enough_replicas, 0)
    assert set(s.share_group_members("sg")) == {"a", "b"}
    assert {t.key for t in undo.timers} == {session_key("sg", "a"), session_key("sg", "b")}
