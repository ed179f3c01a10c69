"""The controller and its store against a real ZooKeeper (Debian's package), driven one
event at a time: elections that half went through, a deposed controller, a broker that
restarted before the controller saw it gone, and refreshes and registrations that fail
for a moment. Each of these once left the cluster without a working controller, acting
on a stale view, or with a replica in the ISR that had lost its data."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.zookeeper import ZooKeeperProcess, available, wait_for
from support.zookeeper import connected_store as store

pytestmark = pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")

from dmq.cluster.controller import Controller, ControllerEvent  # noqa: E402
from dmq.cluster.metadata import PartitionState  # noqa: E402
from dmq.cluster.zk import codecs, paths  # noqa: E402
from dmq.cluster.zk.client import Op, ZooKeeperUnavailable  # noqa: E402
from dmq.cluster.zookeeper import ControllerMovedError, ZooKeeperMetadataStore  # noqa: E402
from dmq.config import BrokerConfig  # noqa: E402

E = ControllerEvent


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperProcess]:
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    yield zk
    zk.stop()


def run(body: Any) -> None:
    asyncio.run(body())


async def elected(s: ZooKeeperMetadataStore) -> Controller:
    c = Controller(s, BrokerConfig())
    await c._handle({E.CONTROLLER_CHANGE})
    assert c.active
    return c


def test_an_election_whose_answer_was_lost_is_completed(zookeeper: ZooKeeperProcess) -> None:
    """The election's transaction went through but its answer did not reach the broker: the
    retry finds /controller held by its own session and takes the epoch it wrote. Before,
    the retry saw NodeExists and gave up, and no broker was the controller while that
    session lived."""
    async def body() -> None:
        a, b = await store(zookeeper, 1), await store(zookeeper, 2)
        try:
            found = await a.client.get_or_none(paths.CONTROLLER_EPOCH)
            bump = (Op.set(paths.CONTROLLER_EPOCH, str(int(found[0]) + 1).encode(), int(found[1].version))
                    if found is not None else Op.create(paths.CONTROLLER_EPOCH, b"1"))
            await a.client.transaction([Op.create(paths.CONTROLLER, codecs.encode_controller(1, 0), ephemeral=True),
                                        bump])
            written = int((await a.client.get(paths.CONTROLLER_EPOCH))[0])
            assert await a.try_become_controller()
            assert a.controller_epoch == written
            assert not await b.try_become_controller()
            c = await elected(a)
            assert c.active
        finally:
            await a.stop()
            await b.stop()
    run(body)


def test_a_deposed_controller_resigns_and_its_writes_are_refused(zookeeper: ZooKeeperProcess) -> None:
    """Broker 2 becomes the controller (broker 1's /controller deleted, as an operator forces
    a move). Broker 1's writes, the partition state, an admin znode and an assignment,
    are refused by the /controller_epoch check whatever epoch the partition carries, and it
    stops acting once it sees broker 2 named. Before, it stayed active and its partition
    writes went through."""
    async def body() -> None:
        a, b = await store(zookeeper, 1), await store(zookeeper, 2)
        try:
            await wait_for(lambda: len(a.brokers()) == 2)
            old = await elected(a)
            await a.create_topic("z", 1, 2, {}, assignment={0: [1, 2]})
            await a.client.delete(paths.CONTROLLER)
            assert await b.try_become_controller()
            state, version = await a.read_partition_state("z", 0)  # type: ignore[misc]
            with pytest.raises(ControllerMovedError):
                await a.update_partition_state("z", 0, PartitionState([1, 2], 1, state.leader_epoch + 1, [1]),
                                               version)
            await a.write_admin("/admin/preferred_replica_election", [{"topic": "z", "partition": 0}], -1)
            _, admin_version = await a.read_admin("/admin/preferred_replica_election")
            with pytest.raises(ControllerMovedError):
                await a.write_admin("/admin/preferred_replica_election", [], admin_version, as_controller=True)
            raw, topic_version = await a.read_assignment("z")  # type: ignore[misc]
            with pytest.raises(ControllerMovedError):
                await a.write_assignment("z", raw, topic_version)
            assert await a.read_partition_state("z", 0) == (state, version)
            await wait_for(lambda: a.controller_id() == 2)
            await old._handle({E.CONTROLLER_CHANGE})
            assert not old.active
            new = Controller(b, BrokerConfig())
            await new._handle({E.CONTROLLER_CHANGE})
            assert new.active  # the current controller's writes are not refused
            await b.update_partition_state("z", 0, PartitionState([1, 2], 1, state.leader_epoch + 1, [1, 2]),
                                           version)
        finally:
            await a.stop()
            await b.stop()
    run(body)


def test_a_broker_that_registered_again_leaves_the_isr_and_its_leaderships(zookeeper: ZooKeeperProcess) -> None:
    """Broker 3 restarts and registers again before the controller looks: the ids are the
    same, its registration's czxid is not. It is handled as gone and back: out of every
    ISR, and the partition it led gets another leader in a new epoch. Before, it stayed in
    the ISR (a replica back with less data, a lost disk, could then be elected) and kept
    leading in the same epoch."""
    async def body() -> None:
        a, b, c3 = await store(zookeeper, 1), await store(zookeeper, 2), await store(zookeeper, 3)
        again: ZooKeeperMetadataStore | None = None
        try:
            await wait_for(lambda: len(a.brokers()) == 3)
            controller = await elected(a)
            await a.create_topic("bounce", 2, 3, {}, assignment={0: [3, 1, 2], 1: [1, 2, 3]})
            await controller._handle({E.TOPIC_CHANGE})
            led, _ = await a.read_partition_state("bounce", 0)  # type: ignore[misc]
            assert (led.leader, sorted(led.isr)) == (3, [1, 2, 3])
            await c3.stop()
            again = await store(zookeeper, 3)
            assert await a.broker_ids() == [1, 2, 3]  # the same ids as before the restart
            await controller._handle({E.BROKER_CHANGE})
            p0, _ = await a.read_partition_state("bounce", 0)  # type: ignore[misc]
            p1, _ = await a.read_partition_state("bounce", 1)  # type: ignore[misc]
            assert p0.leader == 1 and p0.leader_epoch > led.leader_epoch and 3 not in p0.isr
            assert p1.leader == 1 and sorted(p1.isr) == [1, 2]
            await controller._handle({E.BROKER_CHANGE})  # nothing more happens
            assert (await a.read_partition_state("bounce", 1))[0] == p1  # type: ignore[index]
        finally:
            for s in (a, b, again):
                if s is not None:
                    await s.stop()
    run(body)


def test_a_failed_broker_list_refresh_does_not_bring_back_an_old_list(zookeeper: ZooKeeperProcess) -> None:
    """A refresh of the broker list fails; a newer list is applied meanwhile. The retry read
    the old list again and replaced the cache with it: broker 2 vanished from metadata
    until /brokers/ids changed again."""
    async def body() -> None:
        a, b = await store(zookeeper, 1), await store(zookeeper, 2)
        try:
            await wait_for(lambda: sorted(x.broker_id for x in a.brokers()) == [1, 2])
            real = a.client.get_or_none
            failed = []

            async def failing_once(path: str) -> Any:
                if not failed and path.startswith(paths.BROKER_IDS):
                    failed.append(path)
                    raise ZooKeeperUnavailable("a test's timeout")
                return await real(path)

            a.client.get_or_none = failing_once  # type: ignore[method-assign]
            a._enqueue("brokers", ["1"])  # the list of an older watch event
            a._enqueue("brokers", ["1", "2"])
            await a.synced()
            assert failed
            await asyncio.sleep(1.5)  # past the retry
            await a.synced()
            assert sorted(x.broker_id for x in a.brokers()) == [1, 2]
        finally:
            await a.stop()
            await b.stop()
    run(body)


def test_registering_again_after_a_lost_session_is_tried_until_it_succeeds(zookeeper: ZooKeeperProcess) -> None:
    """After a session expiry the broker registers again. One ZooKeeper call that timed out
    ended it: the broker stayed unregistered with ``session_lost`` set, taking no metadata
    change, its new partitions without a leader."""
    async def body() -> None:
        a = await store(zookeeper, 1)
        try:
            await a.client.delete(paths.broker(1))  # as the expired session's znode went
            a.session_lost = True
            real = a.client.create
            calls = []

            async def failing_twice(path: str, *args: Any, **kw: Any) -> Any:
                calls.append(path)
                if len(calls) <= 2:
                    raise ZooKeeperUnavailable("a test's timeout")
                return await real(path, *args, **kw)

            a.client.create = failing_twice  # type: ignore[method-assign]
            assert await asyncio.wait_for(a.reregister(), 15)
            assert not a.session_lost and len(calls) == 3
            assert await a.client.exists(paths.broker(1)) is not None
        finally:
            await a.stop()
    run(body)
