"""SharePartitionManager against a real Log/ReplicaManager and the in-memory persister."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from support.share import TID, TP0, TP1
from support.share import ShareEnv as Env
from support.share import run_share_env as run

from dmq.record.batch import iter_headers
from dmq.share.partition import AckBatch, AcquiredRange, RecordState
from dmq.share.persister import SharePartitionKey

ACCEPT, RELEASE = 1, 2


def test_earliest_acquires_whole_batches_and_returns_their_bytes(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(5)
        env.produce(5)
        r = (await env.fetch())[TP0]
        assert r.error == ErrorCode.none
        assert r.acquired == (AcquiredRange(0, 9, 1),)
        assert [h.base_offset for _, h in iter_headers(r.records)] == [0, 5]
        # the start the reset chose is written at once
        assert env.stored().start_offset == 0
        # nothing more to acquire: empty records, never None
        again = (await env.fetch("b"))[TP0]
        assert again.records == b"" and again.acquired == ()
    run(tmp_path, scenario)


def test_latest_by_default_starts_at_the_high_watermark(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(5)
        assert (await env.fetch())[TP0].acquired == ()
        assert env.stored().start_offset == 5
        env.produce(3)
        assert (await env.fetch())[TP0].acquired == (AcquiredRange(5, 7, 1),)
    run(tmp_path, scenario, earliest=False)


def test_batch_size_splits_at_batch_boundaries_and_max_records_spans_partitions(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        for _ in range(3):
            env.produce(4)
        env.produce(4, index=1)
        r = await env.fetch(partitions=(TP0, TP1), max_records=6, batch_size=4)
        # a soft limit: whole batches, 8 records from partition 0, nothing left for partition 1
        assert r[TP0].acquired == (AcquiredRange(0, 3, 1), AcquiredRange(4, 7, 1))
        assert r[TP1].acquired == () and r[TP1].error == ErrorCode.none
    run(tmp_path, scenario)


def test_accept_is_written_before_the_answer_and_advances_the_start(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(10)
        await env.fetch()
        errors = await env.manager.acknowledge("g", "a", {TP0: [AckBatch(0, 9, (ACCEPT,))]})
        assert errors == {TP0: ErrorCode.none}
        assert env.stored().start_offset == 10
        sp = env.manager.share_partition("g", TID, 0)
        assert sp is not None and sp.start_offset == 10
    run(tmp_path, scenario)


def test_a_failed_write_undoes_the_acknowledgement(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(10)
        await env.fetch()
        env.persister.fail_writes.append(ErrorCode.coordinator_not_available)
        errors = await env.manager.acknowledge("g", "a", {TP0: [AckBatch(0, 9, (ACCEPT,))]})
        assert errors == {TP0: ErrorCode.coordinator_not_available}
        sp = env.manager.share_partition("g", TID, 0)
        assert sp is not None and sp.start_offset == 0
        run5 = sp.state_of(5)
        assert run5 is not None and run5.state is RecordState.ACQUIRED
        assert env.stored().start_offset == 0
        errors = await env.manager.acknowledge("g", "a", {TP0: [AckBatch(0, 9, (ACCEPT,))]})
        assert errors == {TP0: ErrorCode.none} and env.stored().start_offset == 10
    run(tmp_path, scenario)


def test_acknowledgement_errors(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(10)
        await env.fetch()
        acks = await env.manager.acknowledge("g", "b", {TP0: [AckBatch(0, 9, (ACCEPT,))]})
        assert acks == {TP0: ErrorCode.invalid_record_state}  # not b's records
        acks = await env.manager.acknowledge("g", "a", {TP0: [AckBatch(5, 2, (ACCEPT,))]})
        assert acks == {TP0: ErrorCode.invalid_request}
        acks = await env.manager.acknowledge("g", "a", {(uuid.UUID(int=99), 0): [AckBatch(0, 1, (ACCEPT,))]})
        assert acks == {(uuid.UUID(int=99), 0): ErrorCode.unknown_topic_id}
    run(tmp_path, scenario)


def test_a_state_never_initialized_is_initialized_at_the_reset_offset(tmp_path: Path) -> None:
    """The share coordinator answers a state never initialized with start -1; the manager
    initializes it where the reset policy says (a write would be refused) and delivers."""
    async def scenario(env: Env) -> None:
        env.produce(3)
        r = (await env.fetch())[TP0]
        assert r.error == ErrorCode.none and r.acquired == (AcquiredRange(0, 2, 1),), r
        assert env.stored().start_offset == 0
        assert env.manager.share_partition("g", TID, 0) is not None
    run(tmp_path, scenario)


def test_release_redelivers_with_a_higher_delivery_count(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(10)
        await env.fetch("a")
        acks = await env.manager.acknowledge("g", "a", {TP0: [AckBatch(0, 2, (ACCEPT,)),
                                                              AckBatch(3, 3, (RELEASE,))]})
        assert acks == {TP0: ErrorCode.none}
        r = (await env.fetch("b"))[TP0]
        assert r.acquired == (AcquiredRange(3, 3, 2),)
        assert [h.base_offset for _, h in iter_headers(r.records)] == [0]  # the whole batch
        assert env.stored().start_offset == 3
    run(tmp_path, scenario)


def test_expired_locks_make_records_available_again(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(4)
        await env.fetch("a")
        writes = env.persister.writes
        await asyncio.sleep(0.3)
        assert env.persister.writes > writes  # the expiry was written
        assert (await env.fetch("b"))[TP0].acquired == (AcquiredRange(0, 3, 2),)
    run(tmp_path, scenario, lock_ms=50)


def test_long_poll_is_woken_by_new_data(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        loop = asyncio.get_running_loop()
        start = loop.time()
        task = asyncio.ensure_future(env.fetch(max_wait_ms=5000))
        await asyncio.sleep(0.05)
        assert not task.done()
        env.produce(2)
        r = (await asyncio.wait_for(task, 2))[TP0]
        assert r.acquired == (AcquiredRange(0, 1, 1),)
        assert loop.time() - start < 2
    run(tmp_path, scenario)


def test_long_poll_is_woken_by_released_records_and_times_out_otherwise(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(3)
        await env.fetch("a")
        assert (await env.fetch("b", max_wait_ms=50))[TP0].acquired == ()  # timed out, empty
        task = asyncio.ensure_future(env.fetch("b", max_wait_ms=5000))
        await asyncio.sleep(0.05)
        assert not task.done()
        await env.manager.release_member("g", "a", [TP0])
        r = (await asyncio.wait_for(task, 2))[TP0]
        assert r.acquired == (AcquiredRange(0, 2, 2),)
    run(tmp_path, scenario)


def test_losing_leadership_drops_the_share_partition_and_a_new_epoch_reloads(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(10)
        await env.fetch("a")
        await env.manager.acknowledge("g", "a", {TP0: [AckBatch(0, 4, (ACCEPT,))]})
        env.rm.become_follower("t", 0, TID.hex, 2, 1, [1, 2], [1, 2])
        assert (await env.fetch("a"))[TP0].error == ErrorCode.not_leader_or_follower
        assert env.manager.share_partition("g", TID, 0) is None
        env.rm.become_leader("t", 0, TID.hex, 2, [1, 2], [1])
        # reloaded in epoch 2: 5..9 were written as available with one delivery
        r = (await env.fetch("b"))[TP0]
        assert r.acquired == (AcquiredRange(5, 9, 2),)
        assert env.stored().leader_epoch == 2
    run(tmp_path, scenario)


def test_a_fenced_write_drops_the_share_partition(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(4)
        await env.fetch("a")
        env.persister.fail_writes.append(ErrorCode.fenced_leader_epoch)
        acks = await env.manager.acknowledge("g", "a", {TP0: [AckBatch(0, 3, (ACCEPT,))]})
        assert acks == {TP0: ErrorCode.not_leader_or_follower}
        assert env.manager.share_partition("g", TID, 0) is None
    run(tmp_path, scenario)


def test_a_state_deleted_under_a_loaded_share_partition_is_loaded_again(tmp_path: Path) -> None:
    """DeleteShareGroupOffsets or DeleteGroups deleted the state while a session kept the
    share-partition loaded: the share coordinator answers every write of a key it does
    not have INVALID_REQUEST, which the client got as UNKNOWN_SERVER_ERROR, for every
    acknowledgement, for as long as the share-partition stayed loaded. Now the write's
    answer drops it, as a fence does, the client is told NOT_LEADER_OR_FOLLOWER
    (retriable), and the next fetch starts from the state as it is now."""
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(5)
        assert (await env.fetch("a"))[TP0].acquired == (AcquiredRange(0, 4, 1),)
        await env.persister.delete_state(SharePartitionKey("g", TID, 0))
        acks = await env.manager.acknowledge("g", "a", {TP0: [AckBatch(0, 4, (ACCEPT,))]})
        assert acks == {TP0: ErrorCode.not_leader_or_follower}
        assert env.manager.share_partition("g", TID, 0) is None
        # No state any more: the reset policy (earliest here) decides again, from scratch.
        assert (await env.fetch("b"))[TP0].acquired == (AcquiredRange(0, 4, 1),)
        assert env.stored().start_offset == 0
    run(tmp_path, scenario)


def test_a_write_finding_the_topic_gone_drops_the_share_partition(tmp_path: Path) -> None:
    """UNKNOWN_TOPIC_OR_PARTITION from a write (the topic deleted under it) drops the
    share-partition too; the client is told so (retriable) rather than having it kept."""
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(2)
        await env.fetch("a")
        env.persister.fail_writes.append(ErrorCode.unknown_topic_or_partition)
        acks = await env.manager.acknowledge("g", "a", {TP0: [AckBatch(0, 1, (ACCEPT,))]})
        assert acks == {TP0: ErrorCode.unknown_topic_or_partition}
        assert env.manager.share_partition("g", TID, 0) is None
    run(tmp_path, scenario)


def test_only_what_the_group_coordinator_vouches_for_gets_a_state(tmp_path: Path) -> None:
    """A ShareFetch (or ShareAcknowledge) for any group id made the leader initialize a
    durable state for it, so anyone with READ on a group pattern could fill
    __share_group_state with states of made-up groups, which no admin API deletes. Now a
    state never initialized is created only once ``may_initialize`` (the broker asks the
    group's coordinator) agrees; otherwise the request gets its error and nothing is
    written or kept loaded. A state that exists is read without asking."""
    asked: list[tuple[str, str, tuple[uuid.UUID, int]]] = []

    async def may_initialize(group: str, member: str, tp: tuple[uuid.UUID, int]) -> ErrorCode:
        asked.append((group, member, tp))
        if group != "g":
            return ErrorCode.group_id_not_found
        return ErrorCode.none if member == "a" else ErrorCode.unknown_member_id

    async def scenario(env: Env) -> None:
        env.manager.close()
        env.manager = env.new_manager(may_initialize)
        env.produce(3)
        assert (await env.fetch("a", group="made-up"))[TP0].error == ErrorCode.group_id_not_found
        acks = await env.manager.acknowledge("made-up", "a", {TP0: [AckBatch(0, 0, (ACCEPT,))]})
        assert acks == {TP0: ErrorCode.group_id_not_found}
        assert (await env.fetch("stranger"))[TP0].error == ErrorCode.unknown_member_id
        assert env.persister.states == {} and env.manager.share_partition("made-up", TID, 0) is None
        assert env.manager.share_partition("g", TID, 0) is None
        assert (await env.fetch("a"))[TP0].acquired == (AcquiredRange(0, 2, 1),)
        assert env.stored().start_offset == 0
        assert asked[-1] == ("g", "a", TP0)
        # Initialized: loading it again (a new leader, say) reads it without asking.
        asked.clear()
        env.manager.close()
        env.manager = env.new_manager(may_initialize)
        assert (await env.fetch("stranger"))[TP0].acquired == (AcquiredRange(0, 2, 1),)
        assert asked == []
    run(tmp_path, scenario)


def test_a_new_manager_resumes_from_the_persisted_state(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(6)
        await env.fetch("a")
        await env.manager.acknowledge("g", "a", {TP0: [AckBatch(0, 5, (2, 1, 1, 3, 1, 1))]})
        env.manager.close()
        env.manager = env.new_manager()
        r = (await env.fetch("b"))[TP0]
        assert r.acquired == (AcquiredRange(0, 0, 2),)
    run(tmp_path, scenario)


def test_groups_are_independent(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state("g1", (0,))
        await env.init_state("g2", (0,))
        env.produce(3)
        assert (await env.fetch("a", group="g1"))[TP0].acquired == (AcquiredRange(0, 2, 1),)
        assert (await env.fetch("a", group="g2"))[TP0].acquired == (AcquiredRange(0, 2, 1),)
    run(tmp_path, scenario)


def test_the_answer_waits_for_the_write_and_other_operations_wait_for_the_lock(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(4)
        await env.fetch("a")
        gate = asyncio.Event()
        write = env.persister.write_state

        async def slow_write(*args: object, **kw: object) -> ErrorCode:
            await gate.wait()
            return await write(*args, **kw)  # type: ignore[arg-type]

        env.persister.write_state = slow_write  # type: ignore[method-assign]
        ack = asyncio.ensure_future(env.manager.acknowledge("g", "a", {TP0: [AckBatch(0, 3, (RELEASE,))]}))
        await asyncio.sleep(0.01)  # the acknowledgement holds the lock, its write pending
        other = asyncio.ensure_future(env.fetch("b"))
        await asyncio.sleep(0.05)
        assert not ack.done() and not other.done()  # the fetch waits for the share-partition's lock
        gate.set()
        assert await ack == {TP0: ErrorCode.none}
        assert (await other)[TP0].acquired == (AcquiredRange(0, 3, 2),)  # sees the release
    run(tmp_path, scenario)


def test_a_lock_that_expired_during_a_failed_write_expires_after_the_undo(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(2)
        await env.fetch("a")
        gate = asyncio.Event()

        async def failing_write(*args: object, **kw: object) -> ErrorCode:
            await gate.wait()
            return ErrorCode.coordinator_not_available

        write = env.persister.write_state
        env.persister.write_state = failing_write  # type: ignore[method-assign]
        ack = asyncio.ensure_future(env.manager.acknowledge("g", "a", {TP0: [AckBatch(0, 1, (ACCEPT,))]}))
        await asyncio.sleep(0.15)  # the lock (50 ms) expires while the write is pending
        env.persister.write_state = write  # type: ignore[method-assign]
        gate.set()
        assert await ack == {TP0: ErrorCode.coordinator_not_available}
        await asyncio.sleep(0.05)
        assert (await env.fetch("b"))[TP0].acquired == (AcquiredRange(0, 1, 2),)
    run(tmp_path, scenario, lock_ms=50)


def test_a_wall_clock_stepped_back_does_not_keep_records_locked(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Lock deadlines were wall-clock times: the wall clock stepped back an hour (NTP)
    right after an acquisition, the timer fired on time but found the deadline an hour
    away, and the records stayed locked for that hour. Deadlines are monotonic now
    (Kafka's hiResClockMs), so the lock (200 ms) runs out after 200 ms."""
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(3)
        assert (await env.fetch("a"))[TP0].acquired == (AcquiredRange(0, 2, 1),)
        stepped = time.time() - 3600
        monkeypatch.setattr(time, "time", lambda: stepped)
        await asyncio.sleep(0.5)
        sp = env.manager.share_partition("g", TID, 0)
        assert sp is not None and sp.state_of(0) is not None
        assert sp.state_of(0).state is RecordState.AVAILABLE  # type: ignore[union-attr]
    run(tmp_path, scenario, lock_ms=200)


def test_a_wall_clock_stepped_forward_does_not_expire_locks_early(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The other way round: the wall clock jumped an hour ahead, and the next
    acquisition's timer (re-armed for the earliest deadline) expired a 30 s lock at
    once, so another member got records the first still held."""
    async def scenario(env: Env) -> None:
        await env.init_state()
        env.produce(3)
        assert (await env.fetch("a"))[TP0].acquired == (AcquiredRange(0, 2, 1),)
        ahead = time.time() + 3600
        monkeypatch.setattr(time, "time", lambda: ahead)
        env.produce(3)
        assert (await env.fetch("b"))[TP0].acquired == (AcquiredRange(3, 5, 1),)
        await asyncio.sleep(0.05)
        assert (await env.fetch("c"))[TP0].acquired == ()
    run(tmp_path, scenario)
