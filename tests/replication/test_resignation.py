"""A leader cut off from its followers resigns instead of shrinking the ISR below
``min.insync.replicas`` (issue 9: a leader cut from its peers and clients but not
from ZooKeeper kept its partitions unavailable for as long as the cut lasted).

Driven on a ReplicaManager with real logs and the ZooKeeper stand-in of
``support.replication``; a follower "lags" by having its last catch-up set back
and goes "silent" by having its last fetch set back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from support.replication import IsrStore, replica_manager, settle

from dmq.replication.partition import Partition, now_ms
from dmq.replication.replica_manager import ReplicaManager

TP = ("t", 0)
MIN_ISR_2 = {"min.insync.replicas": "2"}
LAG_MS = 200
RESIGN_MS = 1000


def lead(rm: ReplicaManager, store: IsrStore, epoch: int = 0) -> Partition:
    store.leader_epoch = epoch
    return rm.become_leader(*TP, "id", epoch, [1, 2, 3], store.isr, store.version)


def lagging(p: Partition, *followers: int, silent_ms: int = 10 * RESIGN_MS) -> None:
    """The followers have not caught up for long, and sent no fetch for ``silent_ms``."""
    for r in followers:
        p.followers[r].last_caught_up_ms = 0
        p.followers[r].last_fetch_ms = now_ms() - silent_ms


def test_a_leader_whose_followers_fell_silent_resigns_once_then_shrinks(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = IsrStore(isr=[1, 2, 3])
        rm = replica_manager(tmp_path, store, topic_configs=MIN_ISR_2)
        p = lead(rm, store)
        lagging(p, 2, 3)
        rm.maybe_shrink_isr(LAG_MS, RESIGN_MS)
        await settle()
        assert store.resignations == [0] and store.writes == [] and p.isr == [1, 2, 3]
        rm.maybe_shrink_isr(LAG_MS, RESIGN_MS)  # the controller has not acted yet: wait
        await settle()
        assert store.resignations == [0] and store.writes == []
        # A lag period later, still the leader: shrink as Kafka does.
        await asyncio.sleep(LAG_MS * 1.5 / 1000)
        rm.maybe_shrink_isr(LAG_MS, RESIGN_MS)
        await settle()
        assert store.resignations == [0] and store.writes == [[1]] and p.isr == [1]
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_the_leader_waits_until_the_followers_were_silent_longer_than_a_session(
        tmp_path: Path) -> None:
    """Between the lag bound and ``resign_after_ms`` it neither shrinks nor resigns: dead
    followers would still be registered then, and it must not hand over to one."""

    async def scenario() -> None:
        store = IsrStore(isr=[1, 2, 3])
        rm = replica_manager(tmp_path, store, topic_configs=MIN_ISR_2)
        p = lead(rm, store)
        lagging(p, 2, 3, silent_ms=RESIGN_MS // 2)
        rm.maybe_shrink_isr(LAG_MS, RESIGN_MS)
        await settle()
        assert store.resignations == [] and store.writes == [] and p.isr == [1, 2, 3]
        await asyncio.sleep(RESIGN_MS / 1000)
        rm.maybe_shrink_isr(LAG_MS, RESIGN_MS)
        await settle()
        assert store.resignations == [0] and store.writes == []
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_resigning_is_asked_again_in_a_new_leader_epoch(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = IsrStore(isr=[1, 2, 3])
        rm = replica_manager(tmp_path, store, topic_configs=MIN_ISR_2)
        p = lead(rm, store)
        lagging(p, 2, 3)
        rm.maybe_shrink_isr(LAG_MS, RESIGN_MS)
        await settle()
        # The controller elected 2; later 1 leads again, and is cut off again.
        rm.become_follower(*TP, "id", 2, 1, [1, 2, 3], [2, 3], store.version + 1)
        store.version += 2
        p = lead(rm, store, epoch=2)
        lagging(p, 2, 3)
        rm.maybe_shrink_isr(LAG_MS, RESIGN_MS)
        await settle()
        assert store.resignations == [0, 2] and store.writes == []
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_a_resignation_zookeeper_did_not_take_is_asked_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = IsrStore(isr=[1, 2, 3])
        rm = replica_manager(tmp_path, store, topic_configs=MIN_ISR_2)
        p = lead(rm, store)
        lagging(p, 2, 3)
        store.fail()
        rm.maybe_shrink_isr(LAG_MS, RESIGN_MS)
        await settle()
        assert store.resignations == []
        store.fail(False)
        rm.maybe_shrink_isr(LAG_MS, RESIGN_MS)
        await settle()
        assert store.resignations == [0] and store.writes == []
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_a_lagging_follower_the_isr_can_spare_is_dropped_as_before(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = IsrStore(isr=[1, 2, 3])
        rm = replica_manager(tmp_path, store, topic_configs=MIN_ISR_2)
        p = lead(rm, store)
        lagging(p, 3)
        rm.maybe_shrink_isr(LAG_MS, RESIGN_MS)
        await settle()
        assert store.resignations == [] and store.writes == [[1, 2]]
        rm.log_manager.shutdown()

    asyncio.run(scenario())


def test_no_resignation_when_followers_are_slow_gone_or_too_few(tmp_path: Path) -> None:
    """Kafka's shrink when the followers still fetch (slow, not cut off), when they are
    not registered (dead or shutting down), when one follower could not take acks=all
    writes without this leader either, and when min.insync.replicas is 1."""

    async def scenario(base: Path, isr: list[int], configs: dict[str, str],
                       eligible: set[int], silent_ms: int = 10 * RESIGN_MS) -> IsrStore:
        store = IsrStore(isr=isr)
        rm = replica_manager(base, store, eligible=lambda r: r in eligible, topic_configs=configs)
        p = lead(rm, store)
        lagging(p, *[r for r in isr if r != 1], silent_ms=silent_ms)
        rm.maybe_shrink_isr(LAG_MS, RESIGN_MS)
        await settle()
        rm.log_manager.shutdown()
        return store

    for name, store in {
        "slow": asyncio.run(scenario(tmp_path / "a", [1, 2, 3], MIN_ISR_2, {1, 2, 3}, silent_ms=0)),
        "unregistered": asyncio.run(scenario(tmp_path / "b", [1, 2, 3], MIN_ISR_2, {1, 2})),
        "one follower": asyncio.run(scenario(tmp_path / "c", [1, 2], MIN_ISR_2, {1, 2, 3})),
        "min isr 1": asyncio.run(scenario(tmp_path / "d", [1, 2, 3], {}, {1, 2, 3})),
    }.items():
        assert store.resignations == [] and store.writes == [[1]], name
