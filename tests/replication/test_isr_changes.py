"""ISR changes against a ZooKeeper stand-in the test controls (KIP-497, KIP-841).

Each test drives a ReplicaManager on real logs: producers append with
``acks=all``, followers are simulated by their Fetch requests (``replica_id``),
and the ISR writes go to an ``IsrStore`` that the test can hold (ZooKeeper
paused), release, fail, or change behind the leader's back (the controller).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from support.replication import IsrStore, records, replica_manager, settle

from dmq.replication.replica_manager import FetchRequestPartition, ReplicaManager

TP = ("t", 0)
MIN_ISR_2 = {"min.insync.replicas": "2"}


async def follower_fetch(rm: ReplicaManager, replica: int, offset: int) -> None:
    """A follower's Fetch from ``offset``: tells the leader it has everything before it."""
    await rm.fetch_messages([FetchRequestPartition("t", 0, offset, 1 << 20)], max_wait_ms=0,
                            min_bytes=1, max_bytes=1 << 20, replica_id=replica)


def test_an_expansion_in_flight_holds_the_high_watermark_at_the_joiner(tmp_path: Path) -> None:
    """Issue 9, finding 1, as a unit: the joiner F catches up, its expansion write hangs
    (ZooKeeper paused), F stops fetching, the producer keeps going. Nothing may be
    acknowledged beyond F's log end: when the write lands F is in the ISR, and if the
    others die F is elected with what it has."""

    async def scenario() -> None:
        store = IsrStore(isr=[1, 2])
        rm = replica_manager(tmp_path, store, topic_configs=MIN_ISR_2)
        p = rm.become_leader(*TP, "id", 0, [1, 2, 3], store.isr, store.version)
        first = asyncio.ensure_future(rm.append_records({TP: records(10)}, -1, 5.0))
        await settle()
        await follower_fetch(rm, 2, 10)
        assert (await first)[TP].error == ErrorCode.none
        assert p.high_watermark == 10

        store.hold()  # ZooKeeper pauses
        await follower_fetch(rm, 3, 10)  # F caught up: the leader proposes [1, 2, 3]
        await settle()
        assert p.pending_isr == [1, 2, 3] and p.isr == [1, 2]
        # F pauses; the producer and follower 2 go on.
        later = asyncio.ensure_future(rm.append_records({TP: records(20)}, -1, 0.5))
        await settle()
        await follower_fetch(rm, 2, 30)
        assert p.high_watermark == 10  # held at F's log end by the maximal ISR
        assert (await later)[TP].error == ErrorCode.request_timed_out  # never acknowledged

        store.release()  # ZooKeeper returns: the expansion lands
        await settle()
        assert store.isr == [1, 2, 3] and p.isr == [1, 2, 3] and p.pending_isr is None
        # Brokers 1 and 2 die; F (log end 10) is the only ISR member left and is elected:
        # every acknowledged offset (< 10) is on it.
        assert p.high_watermark <= p.followers[3].log_end_offset
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_min_insync_counts_the_confirmed_isr_not_the_pending_one(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = IsrStore(isr=[1])
        rm = replica_manager(tmp_path, store, topic_configs=MIN_ISR_2)
        p = rm.become_leader(*TP, "id", 0, [1, 2], store.isr, store.version)
        store.hold()
        await follower_fetch(rm, 2, 0)
        await settle()
        assert p.pending_isr == [1, 2]
        result = await rm.append_records({TP: records(1)}, -1, 1.0)
        assert result[TP].error == ErrorCode.not_enough_replicas
        store.release()
        await settle()
        result = asyncio.ensure_future(rm.append_records({TP: records(1)}, -1, 5.0))
        await settle()
        await follower_fetch(rm, 2, 1)
        assert (await result)[TP].error == ErrorCode.none
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_a_pending_shrink_keeps_counting_the_leaving_follower(tmp_path: Path) -> None:
    """Until ZooKeeper confirms the shrink, the leaving follower may still be elected,
    so the high watermark waits for it."""

    async def scenario() -> None:
        store = IsrStore(isr=[1, 2, 3])
        rm = replica_manager(tmp_path, store)
        p = rm.become_leader(*TP, "id", 0, [1, 2, 3], store.isr, store.version)
        rm.append_to_local_log(*TP, records(5), 1)
        await follower_fetch(rm, 2, 5)
        await follower_fetch(rm, 3, 5)
        assert p.high_watermark == 5
        store.hold()
        p.followers[3].last_caught_up_ms = 0  # follower 3 lags
        rm.maybe_shrink_isr(lag_max_ms=60_000)  # 3 lags by decades, 2 by this test's run time
        await settle()
        assert p.pending_isr == [1, 2]
        rm.append_to_local_log(*TP, records(5), 1)
        await follower_fetch(rm, 2, 10)
        assert p.high_watermark == 5  # 3 is still in the ISR ZooKeeper has
        store.release()
        await settle()
        assert p.isr == [1, 2] and p.high_watermark == 10
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_a_refused_change_waits_for_the_new_state_and_never_overwrites_it(tmp_path: Path) -> None:
    """Finding 3: the controller drops a broker from the ISR (a new znode version); the
    leader's change written against the old version is refused, and the leader proposes
    nothing until it has seen the controller's state."""

    async def scenario() -> None:
        store = IsrStore(isr=[1, 2])
        rm = replica_manager(tmp_path, store)
        p = rm.become_leader(*TP, "id", 0, [1, 2, 3], store.isr, store.version)
        store.shrink_by_controller(2)  # the watch has not delivered it yet
        await follower_fetch(rm, 3, 0)  # 3 caught up: leader proposes [1, 2, 3] at version 0
        await settle()
        assert store.isr == [1] and store.writes == []  # refused: version moved on
        for _ in range(20):
            await follower_fetch(rm, 3, 0)
        await settle()
        # Nothing written, nothing proposed; the refused change still counts for the high
        # watermark until the new state shows what the store holds.
        assert store.writes == [] and p.pending_isr == [1, 2, 3]
        # The watch delivers the controller's state; now the leader may expand.
        rm.become_leader(*TP, "id", 0, [1, 2, 3], store.isr, store.version)
        await follower_fetch(rm, 3, 0)
        await settle()
        assert store.isr == [1, 3] and p.isr == [1, 3]
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_a_replica_that_is_not_registered_never_joins(tmp_path: Path) -> None:
    """Finding 3 / KIP-841: a follower whose registration is gone keeps fetching; the
    leader must not add it back, however caught up it is (no ISR fight)."""

    async def scenario() -> None:
        registered = {1, 2}
        store = IsrStore(isr=[1, 2])
        rm = replica_manager(tmp_path, store, eligible=lambda b: b in registered)
        p = rm.become_leader(*TP, "id", 0, [1, 2, 3], store.isr, store.version)
        rm.append_to_local_log(*TP, records(3), 1)
        for _ in range(50):
            await follower_fetch(rm, 3, 3)
            await settle()
        assert store.writes == [] and p.isr == [1, 2]
        registered.add(3)  # it registers again
        await follower_fetch(rm, 3, 3)
        await settle()
        assert store.writes == [[1, 2, 3]]
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_a_follower_rejoins_while_producers_keep_appending(tmp_path: Path) -> None:
    """KAFKA-4485 through the ReplicaManager: with the ISR shrunk to the leader, every
    fetch of follower 2 finds a produce landed since its previous answer. The high
    watermark waits for 2 while it is caught up, so 2's fetch offset reaches it and the
    leader writes 2 back into the ISR. Follower 3, unregistered, caught up once and
    stopped: it is neither waited for nor added."""

    async def scenario() -> None:
        store = IsrStore(isr=[1])
        rm = replica_manager(tmp_path, store, eligible=lambda b: b != 3)
        p = rm.become_leader(*TP, "id", 0, [1, 2, 3], store.isr, store.version)
        rm.append_to_local_log(*TP, records(10), 1)
        await follower_fetch(rm, 3, 10)  # at the leader's log end: caught up just now
        given = 0  # 2 comes back from far behind
        for _ in range(3):
            await follower_fetch(rm, 2, given)
            fetched, given = given, p.log.log_end_offset  # the answer carries 2 to the log end
            await settle()
            rm.append_to_local_log(*TP, records(5), 1)
        assert store.writes == [[1, 2]] and p.isr == [1, 2]
        assert p.high_watermark == fetched == 15  # held at 2; were 3 eligible, at 10
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_a_write_with_an_unknown_outcome_keeps_counting_and_is_retried(tmp_path: Path) -> None:
    """The connection drops after ZooKeeper applied the expansion: the leader cannot know
    whether F is in the ISR, so F keeps bounding the high watermark until the store's
    state settles it."""

    async def scenario() -> None:
        store = IsrStore(isr=[1, 2])
        rm = replica_manager(tmp_path, store)
        p = rm.become_leader(*TP, "id", 0, [1, 2, 3], store.isr, store.version)
        store.fail(landed=True)
        await follower_fetch(rm, 3, 0)
        await settle()
        assert store.isr == [1, 2, 3] and p.isr == [1, 2]  # landed, but the leader doesn't know
        assert p.pending_isr == [1, 2, 3]
        rm.append_to_local_log(*TP, records(4), 1)
        await follower_fetch(rm, 2, 4)
        assert p.high_watermark == 0  # 3 (log end 0) may be in the ISR
        store.fail(False)
        p._retry_at_ms = 0  # the backoff has passed
        rm.maybe_shrink_isr(lag_max_ms=60_000)  # the periodic task retries the write
        await settle()
        # Refused (the first attempt had landed, the version moved): still unknown here,
        # so 3 still counts.
        assert store.writes == [[1, 2, 3]] and p.pending_isr == [1, 2, 3]
        await follower_fetch(rm, 2, 4)
        assert p.high_watermark == 0
        rm.become_leader(*TP, "id", 0, [1, 2, 3], store.isr, store.version)  # the watch
        assert p.isr == [1, 2, 3] and p.pending_isr is None
        await follower_fetch(rm, 3, 4)
        assert p.high_watermark == 4
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_an_outcome_from_an_older_leader_epoch_is_ignored(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = IsrStore(isr=[1, 2])
        rm = replica_manager(tmp_path, store)
        p = rm.become_leader(*TP, "id", 0, [1, 2, 3], store.isr, store.version)
        store.hold()
        await follower_fetch(rm, 3, 0)
        await settle()
        # A new epoch (say re-elected after a controller move) while the write hangs.
        store.leader_epoch, store.version = 1, 5
        rm.become_leader(*TP, "id", 1, [1, 2, 3], [1, 2], 5)
        assert p.pending_isr is None
        store.release()
        await settle()
        assert p.isr == [1, 2] and store.writes == []
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_a_batch_committed_just_before_leadership_moves_is_acknowledged(tmp_path: Path) -> None:
    """Found by a chaos run (seed 110): the high watermark passed an acks=all batch, and in
    the same turn of the event loop a controlled shutdown made this broker a follower; the
    waiting produce then answered NOT_LEADER_OR_FOLLOWER for a committed batch, the client
    sent it again, and after an epoch bump it was written twice."""

    async def scenario() -> None:
        store = IsrStore(isr=[1, 2])
        rm = replica_manager(tmp_path, store, topic_configs=MIN_ISR_2)
        p = rm.become_leader(*TP, "id", 0, [1, 2], store.isr, store.version)
        produce = asyncio.ensure_future(rm.append_records({TP: records(3)}, -1, 5.0))
        await settle()
        await follower_fetch(rm, 2, 3)  # the high watermark passes the batch...
        rm.become_follower(*TP, "id", 2, 1, [1, 2], [1, 2], store.version + 1)  # ...and it moves
        assert p.high_watermark == 3 and not p.is_leader
        assert (await produce)[TP].error == ErrorCode.none
        # A batch not committed when leadership moved still fails, as it must.
        p = rm.become_leader(*TP, "id", 2, [1, 2], [1, 2], store.version + 2)
        store.leader_epoch, store.version = 2, store.version + 2
        late = asyncio.ensure_future(rm.append_records({TP: records(2)}, -1, 5.0))
        await settle()
        rm.become_follower(*TP, "id", 2, 3, [1, 2], [1, 2], store.version + 1)
        assert (await late)[TP].error == ErrorCode.not_leader_or_follower
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_an_isr_change_is_logged_when_the_stores_watch_brings_it_before_the_writes_answer(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """ZooKeeper delivered the data watch's event (the leader's own new ISR, a newer
    version) before the SetData reply; the leader took the state from the watch, and the
    reply then found nothing left to change: the shrink and the expansion were never
    logged (tests/cluster/test_link_faults.py waits for those lines, and failed about one
    run in four). Each change is still counted once (as the watch's refresh counts it)."""

    async def scenario() -> None:
        store = IsrStore(isr=[1, 2])
        rm = replica_manager(tmp_path, store)
        p = rm.become_leader(*TP, "id", 0, [1, 2], store.isr, store.version)
        store.on_landed = lambda: rm.become_leader(*TP, "id", 0, [1, 2], store.isr, store.version)
        with caplog.at_level(logging.INFO, logger="dmq.replication"):
            rm.maybe_shrink_isr(lag_max_ms=-1)  # follower 2 has not caught up "for long"
            await settle()
            assert p.isr == [1] and p.pending_isr is None
            await follower_fetch(rm, 2, 0)  # it fetches again, caught up: the leader adds it
            await settle()
            assert p.isr == [1, 2] and p.pending_isr is None
        lines = [r.getMessage() for r in caplog.records if "ISR" in r.getMessage()]
        assert lines == ["t-0: ISR [1, 2] -> [1] (lagging)", "t-0: ISR [1] -> [1, 2] (caught up)"], lines
        assert (rm.isr_shrinks, rm.isr_expands) == (1, 1)

    asyncio.run(scenario())
