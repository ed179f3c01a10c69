"""The coordinator runtime: append, wait for commit, replay in order, then answer."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import Hashable, Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from support.coordinator import MemoryWriter

from dmq.cluster.metadata import BrokerInfo, PartitionState, TopicMetadata
from dmq.coordinator import runtime as runtime_module
from dmq.coordinator.runtime import (
    Cancel,
    CoordinatorResult,
    CoordinatorRuntime,
    Deferred,
    EndMarker,
    LogEntry,
    Schedule,
    coordinator_broker,
)
from dmq.group import records as rec
from dmq.group.coordinator import GroupConfig, GroupCoordinator, ShareConfig, ShareTopic
from dmq.group.metadata import GroupState
from dmq.group.share_group import DescribedShareGroup


class ListShard:
    """A toy shard: its durable state is the list of values it replayed."""

    def __init__(self, partition: int, leader_epoch: int) -> None:
        self.partition = partition
        self.values: list[bytes] = []
        self.fired: list[Hashable] = []
        self.loaded_from_log = 0

    def replay_marker(self, producer_id: int, commit: bool, *, loading: bool) -> None:
        self.values.append(b"commit" if commit else b"abort")

    def replay(self, key: bytes, value: bytes | None, *, loading: bool, producer_id: int = -1,
               offset: int = -1) -> None:
        assert value is not None
        self.values.append(value)
        if loading:
            self.loaded_from_log += 1

    def on_loaded(self, now_ms: int) -> CoordinatorResult:
        return CoordinatorResult()

    def on_timer(self, key: Hashable, now_ms: int) -> CoordinatorResult:
        self.fired.append(key)
        return CoordinatorResult(replies=[(key, f"timer {key}")])


def add(value: bytes) -> Any:
    def op(shard: ListShard, now: int) -> CoordinatorResult:
        return CoordinatorResult(response=f"added {value.decode()}", records=[(b"k", value)])
    return op


def seen_then_add(value: bytes) -> Any:
    """An operation that answers the values its shard has replayed, and writes ``value``."""
    def op(shard: ListShard, now: int) -> CoordinatorResult:
        return CoordinatorResult(response=list(shard.values), records=[(b"k", value)])
    return op


def runtime(writer: MemoryWriter, timeout_ms: int = 5000) -> CoordinatorRuntime[ListShard]:
    rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(writer, ListShard, timeout_ms)
    rt.set_led({0: 1})
    return rt


def error(e: ErrorCode) -> str:
    return f"error {e.name}"


def test_an_answer_waits_for_commit_and_records_replay_in_offset_order() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)
        shard = rt.shard(0)
        assert shard is not None
        w.hold()
        first = asyncio.create_task(rt.write(0, add(b"a"), error))
        second = asyncio.create_task(rt.write(0, add(b"b"), error))
        await asyncio.sleep(0.01)
        assert not first.done() and not second.done() and shard.values == []
        w.release(0, upto=1)  # the high watermark passes the first write only
        assert await first == "added a"
        assert shard.values == [b"a"] and not second.done()
        w.release()
        assert await second == "added b" and shard.values == [b"a", b"b"]

    asyncio.run(scenario())


def test_a_write_that_failed_to_commit_is_replayed_when_the_watermark_passes_it() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)
        shard = rt.shard(0)
        assert shard is not None
        w.hold()
        w.fail_commit = ErrorCode.request_timed_out
        assert await rt.write(0, add(b"a"), error) == "error coordinator_not_available"
        assert shard.values == []
        w.fail_commit = None
        w.release()
        assert await rt.write(0, add(b"b"), error) == "added b"
        assert shard.values == [b"a", b"b"]  # the log holds both: so does the shard

    asyncio.run(scenario())


def test_an_append_refused_as_not_leader_answers_not_coordinator_until_leadership_moves() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)
        w.fail_append = ErrorCode.not_leader_or_follower
        assert await rt.write(0, add(b"a"), error) == "error not_coordinator"
        rt.set_led({})  # what the backend does when the new leadership reaches it
        assert rt.shard(0) is None
        assert await rt.write(0, add(b"a"), error) == "error not_coordinator"
        w.fail_append = None
        rt.set_led({0: 2})
        assert await rt.write(0, add(b"a"), error) == "added a"

    asyncio.run(scenario())


def test_a_partition_metadata_says_is_led_here_but_not_loaded_yet_answers_load_in_progress() -> None:
    """Another broker's FindCoordinator may name this one as soon as metadata does; until
    the local replica takes the role and the shard loads, clients must retry here, not
    look elsewhere."""
    async def scenario() -> None:
        w = MemoryWriter()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(w, ListShard)
        assert await rt.write(0, add(b"a"), error) == "error not_coordinator"
        assert rt.read(0, lambda shard: "read", error) == "error not_coordinator"
        w.leading.add(0)  # metadata: this broker leads partition 0; set_led not yet called
        assert await rt.write(0, add(b"a"), error) == "error coordinator_load_in_progress"
        assert rt.read(0, lambda shard: "read", error) == "error coordinator_load_in_progress"
        assert await rt.write(1, add(b"a"), error) == "error not_coordinator"
        rt.set_led({0: 1})
        assert await rt.write(0, add(b"a"), error) == "added a"
        await rt.close()
        assert await rt.write(0, add(b"a"), error) == "error not_coordinator"  # shutting down

    asyncio.run(scenario())


class OneTopicStore:
    """The two reads ``coordinator_broker`` makes of a metadata store."""

    def __init__(self, leaders: dict[int, int]) -> None:
        self.meta = TopicMetadata("__consumer_offsets", "0" * 32, {
            p: PartitionState([leader], leader, 1, [leader]) for p, leader in leaders.items()})

    def topic(self, name: str) -> TopicMetadata | None:
        return self.meta if name == self.meta.name else None

    def brokers(self) -> list[BrokerInfo]:
        return [BrokerInfo(1, "h1", 1), BrokerInfo(2, "h2", 2)]


def test_find_coordinator_names_a_leader_here_only_once_its_shard_is_loaded() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(w, ListShard)
        store = OneTopicStore({0: 1, 1: 2, 2: -1})  # this broker is 1
        w.leading.add(0)

        def named(partition: int) -> int | None:
            node = coordinator_broker(store, "__consumer_offsets", partition, rt)  # type: ignore[arg-type]
            return node.broker_id if node is not None else None

        assert named(0) is None  # led here, shard not loaded: COORDINATOR_NOT_AVAILABLE
        assert named(1) == 2  # led by another broker: named (it answers for its own shard)
        assert named(2) is None  # no leader
        assert named(7) is None  # no such partition
        rt.set_led({0: 1})
        assert named(0) == 1
        await rt.close()

    asyncio.run(scenario())


def test_parked_requests_are_answered_by_later_replies_or_not_coordinator_on_unload() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)

        def park(key: str) -> Any:
            return lambda shard, now: CoordinatorResult(response=Deferred(key))

        waiting = asyncio.create_task(rt.write(0, park("x"), error))
        other = asyncio.create_task(rt.write(0, park("y"), error))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        # A reply goes out once the records of the operation carrying it are committed.
        w.hold()
        answer = asyncio.create_task(rt.write(0, lambda s, n: CoordinatorResult(
            response="ok", records=[(b"k", b"v")], replies=[("x", "your answer")]), error))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        w.release()
        assert await answer == "ok" and await waiting == "your answer"
        rt.set_led({})  # leadership moved
        assert await other == "error not_coordinator"

    asyncio.run(scenario())


def test_timers_fire_as_operations_and_stop_on_unload() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)
        shard = rt.shard(0)
        assert shard is not None
        parked = asyncio.create_task(rt.write(0, lambda s, n: CoordinatorResult(
            response=Deferred("t1"), timers=[Schedule("t1", 20), Schedule("t2", 20), Cancel("t2"),
                                             Schedule("t3", 50)]), error))
        assert await asyncio.wait_for(parked, 2) == "timer t1"
        assert shard.fired == ["t1"] and rt.timer_keys(0) == {"t3"}
        rt.set_led({})
        await asyncio.sleep(0.1)
        assert shard.fired == ["t1"]

    asyncio.run(scenario())


def test_a_new_leader_epoch_reloads_the_shard_from_the_log() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)
        await rt.write(0, add(b"a"), error)
        await rt.write(0, add(b"b"), error)
        before = rt.shard(0)
        rt.set_led({0: 1})
        assert rt.shard(0) is before  # same epoch: nothing to do
        rt.set_led({0: 2, 1: 2})
        after = rt.shard(0)
        assert after is not before and after is not None
        assert after.values == [b"a", b"b"] and after.loaded_from_log == 2
        assert rt.loaded_partitions() == {0, 1}

    asyncio.run(scenario())


def test_a_closed_runtime_loads_nothing_again() -> None:
    """Chaos run, seed 20261122: a reconcile after the broker's shutdown had closed the
    runtime saw every led partition as unloaded and read the closed logs (EBADF)."""
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)
        await rt.write(0, add(b"a"), error)
        await rt.close()
        assert rt.loaded_partitions() == set()
        w.read = None  # type: ignore[assignment,method-assign]  # a closed log: reading would fail
        rt.set_led({0: 1, 1: 1})
        assert rt.loaded_partitions() == set()
        assert await rt.write(0, add(b"b"), error) == "error not_coordinator"

    asyncio.run(scenario())


def test_an_exclusive_operation_sees_every_earlier_write() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)
        w.hold()
        pending = asyncio.create_task(rt.write(0, add(b"a"), error))
        await asyncio.sleep(0.01)
        seen = asyncio.create_task(rt.write(0, lambda s, n: CoordinatorResult(response=list(s.values)),
                                            error, exclusive=True))
        await asyncio.sleep(0.01)
        assert not seen.done()
        w.release()
        assert await pending == "added a"
        assert await seen == [b"a"]

    asyncio.run(scenario())


def test_an_exclusive_operation_also_sees_a_write_appended_while_it_woke() -> None:
    """The last pending write commits, and its follow-up appends another write in the same
    step, before the exclusive operation resumes. The operation waits for that one too: it
    ran on state without it and its records landed after it (an expiry's tombstone after
    an acknowledged commit)."""
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)
        w.hold()

        def with_follow_up(shard: ListShard, now: int) -> CoordinatorResult:
            return CoordinatorResult(response="added a", records=[(b"k", b"a")],
                                     committed=lambda s, n: CoordinatorResult(records=[(b"k", b"f")]))

        first = asyncio.create_task(rt.write(0, with_follow_up, error))
        await asyncio.sleep(0.01)
        seen = asyncio.create_task(rt.write(0, seen_then_add(b"x"), error, exclusive=True))
        await asyncio.sleep(0.01)
        w.release(0, upto=len(w.logs[0]))  # "a" commits; its follow-up "f" is held
        assert await first == "added a"
        await asyncio.sleep(0.01)
        assert [e.value for e in w.logs[0]] == [b"a", b"f"]
        assert not seen.done()
        w.release()
        assert await seen == [b"a", b"f"]
        assert [e.value for e in w.logs[0]] == [b"a", b"f", b"x"]

    asyncio.run(scenario())


def test_writes_that_queue_behind_a_waiting_exclusive_operation_do_not_starve_it() -> None:
    """An exclusive operation waits for the pending writes; writes that come meanwhile
    wait for it, so a steady stream of them (offset commits) cannot keep it waiting
    until it times out (an expiry, a DeleteGroups)."""
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)
        w.hold()
        first = asyncio.create_task(rt.write(0, add(b"a"), error))
        await asyncio.sleep(0.01)
        seen = asyncio.create_task(rt.write(0, seen_then_add(b"x"), error, exclusive=True))
        await asyncio.sleep(0.01)
        later = asyncio.create_task(rt.write(0, add(b"b"), error))
        await asyncio.sleep(0.01)
        assert [e.value for e in w.logs[0]] == [b"a"]  # b waits behind the exclusive operation
        w.release()
        assert await seen == [b"a"]
        assert (await first, await later) == ("added a", "added b")
        assert [e.value for e in w.logs[0]] == [b"a", b"x", b"b"]

    asyncio.run(scenario())


def test_a_keyed_operation_waits_for_pending_writes_of_its_key_only() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)
        w.hold()
        first = asyncio.create_task(rt.write(0, add(b"a"), error, key="one"))
        await asyncio.sleep(0.01)
        other = asyncio.create_task(rt.write(0, seen_then_add(b"o"), error, key="two"))
        same = asyncio.create_task(rt.write(0, seen_then_add(b"s"), error, key="one"))
        await asyncio.sleep(0.01)
        assert [e.value for e in w.logs[0]] == [b"a", b"o"]  # "two" ran at once, "one" waits
        w.release()
        assert await first == "added a"
        assert await other == []
        assert await same == [b"a", b"o"]

    asyncio.run(scenario())


# -------------------------------------------------------- the group coordinator


def group_coordinator(w: MemoryWriter) -> GroupCoordinator:
    c = GroupCoordinator(GroupConfig(num_partitions=1, initial_rebalance_delay_ms=0), w,
                         lambda t, p: True)
    c.set_led({0: 1})
    return c


def test_a_commit_is_answered_and_readable_only_once_replicated() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        c = group_coordinator(w)
        w.hold()
        commit = asyncio.create_task(c.commit_offsets("g", -1, "", None, [("t", 0, 9, -1, None)]))
        await asyncio.sleep(0.01)
        assert not commit.done()
        assert c.fetch_offsets("g", [("t", 0)]) == (ErrorCode.none, {("t", 0): None})
        w.release()
        assert await commit == [ErrorCode.none]
        offset = c.fetch_offsets("g", [("t", 0)])[1][("t", 0)]
        assert offset is not None and offset.offset == 9
        await c.close()

    asyncio.run(scenario())


def test_sync_group_is_answered_once_the_assignment_is_replicated() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        c = group_coordinator(w)
        joined = await c.join_group("g", "", None, "c", "h", 10_000, 10_000, "consumer",
                                    [("range", b"")], require_known_member=False)
        w.hold()
        sync = asyncio.create_task(c.sync_group("g", joined.generation, joined.member_id, None, None, None,
                                                {joined.member_id: b"A"}))
        await asyncio.sleep(0.01)
        assert not sync.done()
        w.release()
        result = await sync
        assert result.error == ErrorCode.none and result.assignment == b"A"
        # The replicated record is what a new coordinator loads.
        c.set_led({0: 2})
        group = c.describe_group("g")
        assert group is not None and group.members[joined.member_id].assignment == b"A"
        await c.close()

    asyncio.run(scenario())


def test_a_coordinator_that_loses_leadership_answers_waiting_members_not_coordinator() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        c = group_coordinator(w)
        first = await c.join_group("g", "", None, "c", "h", 10_000, 10_000, "consumer", [("range", b"")],
                                   require_known_member=False)
        second = asyncio.create_task(c.join_group("g", "", None, "c", "h", 10_000, 10_000, "consumer",
                                                  [("range", b"")], require_known_member=False))
        await asyncio.sleep(0.01)
        assert not second.done()  # waits for the first member to rejoin
        c.set_led({})
        assert (await second).error == ErrorCode.not_coordinator
        assert await c.heartbeat("g", first.generation, first.member_id, None) == ErrorCode.not_coordinator
        await c.close()

    asyncio.run(scenario())


def join(c: GroupCoordinator, member: str = "", session_ms: int = 300) -> Any:
    return c.join_group("g", member, None, "c", "h", session_ms, session_ms, "consumer", [("range", b"")],
                        require_known_member=False)


def small_group_coordinator(w: MemoryWriter, initial_delay_ms: int = 0, timeout_ms: int = 5000
                            ) -> GroupCoordinator:
    c = GroupCoordinator(GroupConfig(num_partitions=1, initial_rebalance_delay_ms=initial_delay_ms,
                                     min_session_timeout_ms=10), w, lambda t, p: True, timeout_ms)
    c.set_led({0: 1})
    return c


def test_a_leader_whose_sync_is_cancelled_mid_write_still_completes_the_generation() -> None:
    """Review finding: the write's follow-up ran in the request's task, so a client that
    went away while its SyncGroup waited for replication left the group in
    CompletingRebalance for ever (and its parked request kept the dead member alive)."""
    async def scenario() -> None:
        w = MemoryWriter()
        c = small_group_coordinator(w)
        a = await join(c)
        b_join = asyncio.create_task(join(c))
        await asyncio.sleep(0.01)
        a2 = await join(c, a.member_id)
        b = await b_join
        follower_sync = asyncio.create_task(c.sync_group("g", b.generation, b.member_id, None, None, None, {}))
        w.hold()
        leader_sync = asyncio.create_task(c.sync_group("g", a2.generation, a.member_id, None, None, None,
                                                       {a.member_id: b"A", b.member_id: b"B"}))
        await asyncio.sleep(0.01)
        leader_sync.cancel()  # the leader's connection closed
        await asyncio.sleep(0.01)
        w.release()
        result = await asyncio.wait_for(follower_sync, 2)
        assert result.error == ErrorCode.none and result.assignment == b"B"
        group = c.describe_group("g")
        assert group is not None and group.state == GroupState.STABLE
        # The dead leader's session now runs out (nothing parked keeps it alive).
        await asyncio.sleep(0.5)
        assert a.member_id not in group.members
        await c.close()

    asyncio.run(scenario())


def test_a_timer_that_writes_sets_its_timers_before_any_later_request_runs() -> None:
    """Review finding: a session expiry that empties the group was written from a task
    of its own, and its timers (cancelling the rebalance) landed after a JoinGroup
    that had just started the initial delay: that member waited for ever."""
    async def scenario() -> None:
        w = MemoryWriter()
        c = small_group_coordinator(w, initial_delay_ms=100)
        a = await join(c)
        await c.sync_group("g", a.generation, a.member_id, None, None, None, {a.member_id: b"A"})
        newcomer = asyncio.create_task(join(c))  # ready to run when A's session expires
        await asyncio.sleep(0.5)  # A sends no heartbeat: its 300 ms session runs out
        result = await asyncio.wait_for(newcomer, 2)
        assert result.error == ErrorCode.none and result.generation >= 2
        await c.close()

    asyncio.run(scenario())


def test_replies_of_a_failed_write_are_delivered() -> None:
    """Review finding: a LeaveGroup answering a parked JoinGroup, whose group record
    could not be appended, left that JoinGroup parked until the shard unloaded."""
    async def scenario() -> None:
        w = MemoryWriter()
        c = small_group_coordinator(w, initial_delay_ms=3000)
        parked = asyncio.create_task(join(c))  # waits out the initial delay
        await asyncio.sleep(0.01)
        group = c.describe_group("g")
        assert group is not None
        member = next(iter(group.members))
        w.fail_append = ErrorCode.not_enough_replicas
        await c.leave_group("g", [(member, None)])
        w.fail_append = None
        result = await asyncio.wait_for(parked, 1)
        assert result.error == ErrorCode.unknown_member_id
        await c.close()

    asyncio.run(scenario())


def test_a_commit_that_timed_out_is_replayed_once_replicated_and_deletes_then_work() -> None:
    """Review finding: it stayed pending until another write of the partition committed,
    so deleting the group timed out again and again and OffsetFetch hid the offset."""
    async def scenario() -> None:
        w = MemoryWriter()
        c = small_group_coordinator(w, timeout_ms=200)
        w.hold()
        w.fail_commit = ErrorCode.request_timed_out
        assert await c.commit_offsets("g", -1, "", None, [("t", 0, 5, -1, None)]) == \
            [ErrorCode.coordinator_not_available]
        w.fail_commit = None
        w.release()  # the high watermark passes it a moment later
        await asyncio.sleep(0.3)
        offset = c.fetch_offsets("g", [("t", 0)])[1][("t", 0)]
        assert offset is not None and offset.offset == 5
        assert await c.delete_groups(["g"]) == {"g": ErrorCode.none}
        assert c.fetch_offsets("g", [("t", 0)])[1][("t", 0)] is None
        await c.close()

    asyncio.run(scenario())


def test_a_storage_error_fails_the_write_and_keeps_the_shard() -> None:
    """Review finding: one failed append unloaded the shard while this broker still led
    its partition: every group there answered NOT_COORDINATOR until a restart."""
    async def scenario() -> None:
        w = MemoryWriter()
        c = small_group_coordinator(w)
        w.fail_append = ErrorCode.kafka_storage_error
        assert await c.commit_offsets("g", -1, "", None, [("t", 0, 1, -1, None)]) == [ErrorCode.not_coordinator]
        w.fail_append = None
        assert await c.commit_offsets("g", -1, "", None, [("t", 0, 2, -1, None)]) == [ErrorCode.none]
        await c.close()

    asyncio.run(scenario())


def test_a_failed_commit_keeps_the_errors_of_entries_it_did_not_hold() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        c = GroupCoordinator(GroupConfig(num_partitions=1, initial_rebalance_delay_ms=0), w,
                             lambda t, p: t == "t")
        c.set_led({0: 1})
        w.fail_append = ErrorCode.not_enough_replicas
        assert await c.commit_offsets("g", -1, "", None, [("t", 0, 1, -1, None), ("x", 0, 1, -1, None)]) == \
            [ErrorCode.coordinator_not_available, ErrorCode.unknown_topic_or_partition]
        await c.close()

    asyncio.run(scenario())


def test_transactional_records_and_markers_replay_in_log_order_and_load_the_same() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)
        txn = await rt.write(0, lambda s, n: CoordinatorResult(response="txn", records=[(b"k", b"t1")],
                                                             producer=(7, 0)), error)
        marker = await rt.write(0, lambda s, n: CoordinatorResult(response="marker",
                                                                marker=EndMarker(7, 0, True, 1)), error)
        assert (txn, marker) == ("txn", "marker")
        assert [(e.producer_id, e.marker is not None) for e in w.logs[0]] == [(7, False), (7, True)]
        shard = rt.shard(0)
        assert shard is not None and shard.values == [b"t1", b"commit"]
        rt.set_led({0: 2})
        reloaded = rt.shard(0)
        assert reloaded is not None and reloaded.values == [b"t1", b"commit"]

    asyncio.run(scenario())


def test_a_plain_commit_after_a_transactions_offset_outlives_the_transactions_commit() -> None:
    """TxnOffsetCommit of t-0 to 100, then a plain OffsetCommit to 200, then the
    transaction commits: 200 stays, the later record (Kafka's replayEndTransactionMarker).
    100 was served instead, until a load after compaction (which keeps the later record
    of the key) served 200: the offset changed under the group when its coordinator moved."""
    async def scenario() -> None:
        w = MemoryWriter()
        c = group_coordinator(w)
        assert await c.txn_offset_commit("tx", "g", 7, 0, -1, "", None, [("t", 0, 100, -1, None)]) == [0]
        assert await c.commit_offsets("g", -1, "", None, [("t", 0, 200, -1, None)]) == [0]
        assert await c.complete_transaction(0, 7, 0, True, 1) == ErrorCode.none

        def served() -> int | None:
            error, offsets = c.fetch_offsets("g", [("t", 0)])
            assert error == ErrorCode.none
            om = offsets[("t", 0)]
            return None if om is None else om.offset

        assert served() == 200
        c.set_led({})
        c.set_led({0: 2})  # a new coordinator loads the log
        await asyncio.sleep(0.01)
        assert served() == 200
        # And the other order: the transaction's record after the plain commit wins.
        assert await c.commit_offsets("g", -1, "", None, [("t", 0, 300, -1, None)]) == [0]
        assert await c.txn_offset_commit("tx", "g", 8, 0, -1, "", None, [("t", 0, 400, -1, None)]) == [0]
        assert await c.complete_transaction(0, 8, 0, True, 2) == ErrorCode.none
        assert served() == 400

    asyncio.run(scenario())


def share_coordinator(w: MemoryWriter, session_ms: int = 45_000) -> GroupCoordinator:
    topic = ShareTopic(uuid.UUID(int=7), 2)
    c = GroupCoordinator(GroupConfig(num_partitions=1, share=ShareConfig(session_timeout_ms=session_ms)), w,
                         lambda t, p: t == "t" and p < 2, topics={"t": topic}.get)
    c.set_led({0: 1})
    return c


def test_a_share_heartbeat_is_answered_once_replicated_and_a_new_leader_keeps_the_group() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        c = share_coordinator(w)
        w.hold()
        joining = asyncio.create_task(c.share_group_heartbeat("sg", "m1", 0, None, ["t"], "c", "h"))
        await asyncio.sleep(0.01)
        assert not joining.done()
        w.release()
        joined = await joining
        assert (joined.error, joined.member_epoch, joined.assignment) == \
            (ErrorCode.none, 1, {uuid.UUID(int=7): (0, 1)})
        assert (await c.share_group_heartbeat("sg", "m1", 1, None, None, "c", "h")).assignment is None
        c.set_led({0: 2})  # a new leader epoch: the shard is rebuilt from the log
        group = c.share_group("sg")
        assert group is not None and group.members["m1"].member_epoch == 1
        assert c.share_initialized_partitions("sg") == {("t", 0), ("t", 1)}
        resumed = await c.share_group_heartbeat("sg", "m1", 1, None, None, "c", "h")
        assert resumed.error == ErrorCode.none and resumed.member_epoch == 1
        (described,) = c.share_group_describe(["sg"])
        assert described.state == "Stable" and [m.member_id for m in described.members] == ["m1"]
        assert [g.group_type for g in c.list_groups()] == ["share"]
        c.set_led({})
        assert (await c.share_group_heartbeat("sg", "m1", 1, None, None, "c", "h")).error == \
            ErrorCode.not_coordinator
        assert c.share_group_describe(["sg", ""]) == [DescribedShareGroup("sg", ErrorCode.not_coordinator),
                                                      DescribedShareGroup("", ErrorCode.invalid_group_id)]
        assert c.share_group_members("sg") is None
        await c.close()

    asyncio.run(scenario())


def test_a_share_member_whose_session_runs_out_is_fenced_by_the_runtimes_timer() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        c = share_coordinator(w, session_ms=50)
        await c.share_group_heartbeat("sg", "m1", 0, None, ["t"], "c", "h")
        await asyncio.sleep(0.2)
        assert c.share_group_members("sg") == {}
        assert (await c.share_group_heartbeat("sg", "m1", 1, None, None, "c", "h")).error == \
            ErrorCode.unknown_member_id
        await c.close()

    asyncio.run(scenario())


def test_a_share_change_whose_records_cannot_be_written_is_undone() -> None:
    """Kept, a failed join would leave nothing for the member's retry to write: a new
    coordinator would not know the group, and answer GROUP_ID_NOT_FOUND (fatal to
    librdkafka)."""
    async def scenario() -> None:
        w = MemoryWriter()
        c = share_coordinator(w)
        w.fail_append = ErrorCode.not_enough_replicas
        failed = await c.share_group_heartbeat("sg", "m1", 0, None, ["t"], "c", "h")
        assert failed.error == ErrorCode.coordinator_not_available
        assert c.share_group("sg") is None
        w.fail_append = None
        retried = await c.share_group_heartbeat("sg", "m1", 0, None, ["t"], "c", "h")
        assert (retried.error, retried.member_epoch) == (ErrorCode.none, 1)
        w.fail_append = ErrorCode.not_enough_replicas
        assert (await c.share_group_heartbeat("sg", "m1", -1, None, None, "c", "h")).error == \
            ErrorCode.coordinator_not_available
        members = c.share_group_members("sg")
        assert members is not None and set(members) == {"m1"}  # the leave is undone, its session restored
        assert any(k[0] == "share-session" for k in c.runtime.timer_keys(0) if isinstance(k, tuple))
        w.fail_append = None
        c.set_led({0: 2})
        group = c.share_group("sg")
        assert group is not None and group.members["m1"].member_epoch == 1
        await c.close()

    asyncio.run(scenario())


def values(shard: ListShard, now: int) -> CoordinatorResult:
    """An operation answered from the shard's state alone: no records."""
    return CoordinatorResult(response=list(shard.values))


def test_an_answer_from_a_loaded_tail_not_yet_committed_waits_for_it() -> None:
    """A new leader's log may end with records the old one wrote but never committed (a
    new leader after this one may not have them): what a shard answers from them without
    writing anything waits until they are committed, or fails (chaos seed 403: an
    AddPartitionsToTxn retried on a new coordinator was confirmed from such a tail, the
    tail was then lost, and the transaction's records never got markers)."""
    async def scenario() -> None:
        w = MemoryWriter()
        w.logs[0] = [LogEntry(0, b"k", b"a"), LogEntry(1, b"k", b"b")]
        w.committed[0] = 1  # offset 1 is not committed
        rt = runtime(w)
        assert rt.shard(0) is not None and rt.shard(0).values == [b"a", b"b"]  # type: ignore[union-attr]
        answer = asyncio.create_task(rt.write(0, values, error))
        await asyncio.sleep(0.01)
        assert not answer.done()
        w.release()
        assert await answer == [b"a", b"b"]
        # Committed now: the next answer is at once.
        assert await asyncio.wait_for(rt.write(0, values, error), 0.5) == [b"a", b"b"]

    asyncio.run(scenario())


def test_an_answer_from_an_uncommitted_tail_fails_when_it_cannot_commit() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        w.logs[0] = [LogEntry(0, b"k", b"a")]
        w.committed[0] = 0
        w.fail_commit = ErrorCode.request_timed_out
        rt = runtime(w)
        assert await rt.write(0, values, error) == "error coordinator_not_available"

    asyncio.run(scenario())


def test_an_answer_without_records_waits_for_an_earlier_write_still_in_flight() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)
        w.hold()
        first = asyncio.create_task(rt.write(0, add(b"a"), error))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(rt.write(0, values, error))
        await asyncio.sleep(0.01)
        assert not first.done() and not second.done()
        w.release()
        assert await first == "added a"
        assert await second == []  # computed before the write replayed; answered after it

    asyncio.run(scenario())


def test_replies_of_an_uncommitted_answer_fail_with_it() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w)
        parked = asyncio.create_task(rt.write(
            0, lambda shard, now: CoordinatorResult(response=Deferred("p")), error))
        await asyncio.sleep(0.01)
        w.hold()
        w.fail_commit = ErrorCode.request_timed_out
        pending = asyncio.create_task(rt.write(0, add(b"a"), error))
        await asyncio.sleep(0.01)
        replying = await rt.write(0, lambda shard, now: CoordinatorResult(
            response="replied", replies=[("p", "answer to p")]), error)
        assert replying == "error coordinator_not_available"
        assert await parked == "error coordinator_not_available"
        assert await pending == "error coordinator_not_available"

    asyncio.run(scenario())


def test_a_read_of_a_loaded_tail_not_yet_committed_is_load_in_progress() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        w.logs[0] = [LogEntry(0, b"k", b"a"), LogEntry(1, b"k", b"b")]
        w.committed[0] = 1
        rt = runtime(w)
        assert rt.read(0, lambda s: list(s.values), error) == "error coordinator_load_in_progress"
        w.release()
        await asyncio.sleep(0.01)  # the runtime watches the tail commit
        assert rt.read(0, lambda s: list(s.values), error) == [b"a", b"b"]

    asyncio.run(scenario())


class BrokenLogWriter(MemoryWriter):
    """Reading partition ``broken``'s log fails (a corrupt batch, say)."""

    def __init__(self, broken: int) -> None:
        super().__init__()
        self.broken = broken
        self.reads = 0

    def read(self, partition: int) -> Iterator[LogEntry]:
        if partition == self.broken:
            self.reads += 1
            raise ValueError("corrupt batch")
        return super().read(partition)


def test_a_partition_whose_load_fails_does_not_stop_the_others() -> None:
    async def scenario() -> None:
        w = BrokenLogWriter(broken=1)
        for p in (0, 1, 2):
            w.logs[p] = [LogEntry(0, b"k", f"v{p}".encode())]
            w.committed[p] = 1
        w.leading = {0, 1, 2}
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(w, ListShard)
        rt.set_led({0: 1, 1: 1, 2: 1})  # does not raise
        assert rt.loaded_partitions() == {0, 2}
        # As Kafka's failed coordinator: NOT_COORDINATOR, not LOAD_IN_PROGRESS for ever (nor a
        # ListGroups answering LOAD_IN_PROGRESS for ever), until its leadership changes.
        assert rt.absent_error(1) == ErrorCode.not_coordinator and not rt.any_loading(3)
        assert await rt.write(2, add(b"x"), error) == "added x"
        rt.set_led({0: 1, 1: 1, 2: 1})  # another reconcile: the same epoch is not read again
        assert w.reads == 1
        w.broken = -1
        rt.set_led({0: 1, 1: 2, 2: 1})  # a new leader epoch loads it again
        assert rt.loaded_partitions() == {0, 1, 2}
        shard = rt.shard(1)
        assert shard is not None and shard.values == [b"v1"]
        await rt.close()
    asyncio.run(scenario())


def test_an_unreadable_offsets_record_does_not_stop_loading() -> None:
    """A GroupMetadataValue v2 (written by Kafka before 2.3) and a value no Kafka wrote, in
    one partition: both partitions load, the v2 group with them, the other record skipped."""
    async def scenario() -> None:
        w = MemoryWriter()
        v2 = (struct.pack(">hh", 2, 8) + b"consumer" + struct.pack(">ihhqi", 1, -1, -1, 0, 0))
        w.logs[0] = [LogEntry(0, rec.encode_group_key(rec.GroupKey("old")), v2),
                     LogEntry(1, rec.encode_group_key(rec.GroupKey("odd")), b"\x00\x63"),
                     LogEntry(2, rec.encode_offset_key(rec.OffsetKey("g0", "t", 0)),
                              rec.encode_offset_value(rec.OffsetValue(3, -1, "", 1)))]
        w.logs[1] = [LogEntry(0, rec.encode_offset_key(rec.OffsetKey("g1", "t", 0)),
                              rec.encode_offset_value(rec.OffsetValue(5, -1, "", 1)))]
        w.committed = {0: 3, 1: 1}
        w.leading = {0, 1}
        gc = GroupCoordinator(GroupConfig(num_partitions=2), w, lambda t, p: True)
        gc.set_led({0: 0, 1: 0})
        assert gc.runtime.loaded_partitions() == {0, 1}
        shard0, shard1 = gc.runtime.shard(0), gc.runtime.shard(1)
        assert shard0 is not None and shard1 is not None
        assert set(shard0.groups) == {"old", "g0"} and shard0.groups["old"].generation == 1
        assert shard1.groups["g1"].offsets[("t", 0)].offset == 5
        await gc.close()
    asyncio.run(scenario())


def test_read_after_writes_sees_every_write_appended_before_it() -> None:
    """A read that waits for the writes appended before it (Kafka's write operation with
    no records): answered from their replayed state, not held up by later writes."""
    async def scenario() -> None:
        w = MemoryWriter()
        rt = runtime(w, timeout_ms=300)
        w.hold()
        first = asyncio.ensure_future(rt.write(0, add(b"a"), error))
        await asyncio.sleep(0)
        assert rt.read(0, lambda s: list(s.values), error) == []  # a plain read: at once
        read = asyncio.ensure_future(rt.read_after_writes(0, lambda s: list(s.values), error))
        await asyncio.sleep(0.01)
        assert not read.done()
        second = asyncio.ensure_future(rt.write(0, add(b"b"), error))  # not queued behind the read
        await asyncio.sleep(0.01)
        assert len(w.logs[0]) == 2
        w.release(0, upto=1)  # the first write only
        assert await read == [b"a"]
        w.release()
        assert await first == "added a" and await second == "added b"
        # Not committed in time: COORDINATOR_NOT_AVAILABLE; the shard unloaded: NOT_COORDINATOR.
        w.hold()
        pending = asyncio.ensure_future(rt.write(0, add(b"c"), error))
        await asyncio.sleep(0)
        assert await rt.read_after_writes(0, lambda s: list(s.values), error) == \
            error(ErrorCode.coordinator_not_available)
        read = asyncio.ensure_future(rt.read_after_writes(0, lambda s: list(s.values), error))
        await asyncio.sleep(0.01)
        rt.set_led({})
        assert await read == error(ErrorCode.not_coordinator)
        pending.cancel()
        await rt.close()
    asyncio.run(scenario())


@pytest.mark.run_alone  # measures the event loop's stalls
def test_a_large_load_leaves_the_event_loop_serving() -> None:
    """Replaying a large partition (100k commits) runs in slices: the loop's longest stall
    stays near LOAD_SLICE_S (before, the whole load, about a second here, ran in one go),
    the partition answers COORDINATOR_LOAD_IN_PROGRESS meanwhile, and leadership moving
    away stops the load."""
    async def scenario() -> None:
        w = MemoryWriter()
        n = 100_000
        w.logs[0] = [LogEntry(i, rec.encode_offset_key(rec.OffsetKey(f"g{i % 100}", "t", i // 100 % 50)),
                              rec.encode_offset_value(rec.OffsetValue(i, -1, "", 1))) for i in range(n)]
        w.committed[0] = n
        w.leading = {0}
        gc = GroupCoordinator(GroupConfig(num_partitions=1), w, lambda t, p: True)
        stalls: list[float] = []
        ticking = True

        async def tick() -> None:
            loop = asyncio.get_running_loop()
            last = loop.time()
            while ticking:
                await asyncio.sleep(0.001)
                now = loop.time()
                stalls.append(now - last)
                last = now

        ticker = asyncio.ensure_future(tick())
        await asyncio.sleep(0.01)
        started = time.monotonic()
        gc.set_led({0: 0})
        assert gc.runtime.loading(0) and gc.fetch_offsets("g1", None) == (ErrorCode.coordinator_load_in_progress, {})
        assert await gc.commit_offsets("g1", -1, "", None, [("t", 0, 1, -1, None)]) == \
            [ErrorCode.coordinator_load_in_progress]
        while gc.runtime.shard(0) is None:
            await asyncio.sleep(0.001)
        took = time.monotonic() - started
        ticking = False
        await ticker
        error, offsets = gc.fetch_offsets("g1", None)
        assert error == ErrorCode.none and len(offsets) == 50
        # Before: one stall as long as the load. (A garbage collection in a long test run
        # can stall the loop on its own for a while: hence the bound's slack.)
        assert max(stalls) < min(0.25, took / 3), (max(stalls), took)
        # Leadership moving away while it loads: the load stops, nothing is loaded after.
        gc.set_led({0: 1})
        assert gc.runtime.loading(0)
        w.leading = set()
        gc.set_led({})
        await asyncio.sleep(0.2)
        assert gc.runtime.shard(0) is None and not gc.runtime.loading(0)
        await gc.close()
    asyncio.run(scenario())


def test_many_partitions_starting_to_load_at_once_share_one_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty partitions of 3000 commits led at once: set_led replays them for one
    LOAD_SLICE_S in all, not one each, before the loop serves again; they all load.
    The runtime's clock steps 1 ms each time it is read (64 records between reads), so
    what is replayed before the loop serves again does not depend on this machine's speed
    (a wall-clock bound failed on a loaded CI machine)."""
    class SteppingClock:
        now = 0.0

        def monotonic(self) -> float:
            self.now += 0.001
            return self.now

        def time(self) -> float:
            return time.time()
    monkeypatch.setattr(runtime_module, "time", SteppingClock())

    async def scenario() -> None:
        w = MemoryWriter()
        partitions = 20
        for p in range(partitions):
            w.logs[p] = [LogEntry(i, rec.encode_offset_key(rec.OffsetKey(f"g{i % 10}", "t", i % 7)),
                                  rec.encode_offset_value(rec.OffsetValue(i, -1, "", 1))) for i in range(3000)]
            w.committed[p] = 3000
        w.leading = set(range(partitions))
        gc = GroupCoordinator(GroupConfig(num_partitions=partitions), w, lambda t, p: True)
        gc.set_led(dict.fromkeys(range(partitions), 0))
        replayed_at_once = sum(loader.count for loader in gc.runtime._loading.values())
        one_slice = 64 * round(runtime_module.LOAD_SLICE_S / 0.001)
        # One slice for the first partition, then 64 records (one look at the clock) for
        # each other; before, one slice each: 20 * 640 records.
        assert replayed_at_once <= one_slice + 64 * (partitions - 1), replayed_at_once
        while gc.runtime.loaded_partitions() != set(range(partitions)):
            await asyncio.sleep(0.005)
        await gc.close()
    asyncio.run(scenario())
