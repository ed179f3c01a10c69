"""The ZooKeeper metadata store against a real ZooKeeper (Debian's package)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from support.zookeeper import ZooKeeperProcess, available, wait_for
from support.zookeeper import connected_store as store

pytestmark = pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")

from dmq.cluster.metadata import BrokerInfo, MetadataError, PartitionState  # noqa: E402
from dmq.cluster.zookeeper import ZooKeeperMetadataStore, assign_replicas  # noqa: E402


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperProcess]:
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    yield zk
    zk.stop()


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())


def test_registration_and_controller_failover(zookeeper: ZooKeeperProcess) -> None:
    async def body() -> None:
        a, b = await store(zookeeper, 1), await store(zookeeper, 2)
        try:
            await wait_for(lambda: [x.broker_id for x in b.brokers()] == [1, 2])
            assert await a.try_become_controller() and not await b.try_become_controller()
            await wait_for(lambda: b.controller_id() == 1)
            first_epoch = a.controller_epoch
            await a.register_broker(BrokerInfo(1, "127.0.0.1", 9091))  # its own registration: kept
            other = await store(zookeeper, 1, register=False)
            try:
                with pytest.raises(MetadataError, match="registered in ZooKeeper by a live session"):
                    await other.register_broker(BrokerInfo(1, "h", 1), wait_s=1)  # one per id
            finally:
                await other.stop()
            await a.stop()  # the controller's session ends: its ephemeral znodes go
            await wait_for(lambda: [x.broker_id for x in b.brokers()] == [2] and b.controller_id() == -1)
            assert await b.try_become_controller()
            assert b.controller_epoch == first_epoch + 1
            await wait_for(lambda: b.controller_id() == 2)
        finally:
            await b.stop()
    run(body)


def test_topics_in_kafka_layout_seen_by_every_broker(zookeeper: ZooKeeperProcess) -> None:
    async def body() -> None:
        stores = [await store(zookeeper, i) for i in (1, 2, 3)]
        a = stores[0]
        try:
            await wait_for(lambda: len(a.brokers()) == 3)
            await a.try_become_controller()
            topic = await a.create_topic("orders", 3, 2, {"retention.ms": "1000"})
            assert sorted(s.leader for s in topic.partitions.values()) == [1, 2, 3]  # leaders spread
            assert all(len(set(s.replicas)) == 2 for s in topic.partitions.values())
            await wait_for(lambda: "orders" in stores[2].topics())
            seen = stores[2].topics()["orders"]
            assert seen.topic_id == topic.topic_id and seen.configs == {"retention.ms": "1000"}
            raw = json.loads((await a.client.get("/brokers/topics/orders"))[0])
            assert raw["version"] == 3 and set(raw["partitions"]) == {"0", "1", "2"}
            state = json.loads((await a.client.get("/brokers/topics/orders/partitions/0/state"))[0])
            assert set(state) >= {"controller_epoch", "leader", "leader_epoch", "isr"}
            with pytest.raises(MetadataError):
                await a.create_topic("orders", 1, 1, {})
            await a.create_partitions("orders", 5)
            await wait_for(lambda: len(stores[1].topics().get("orders", seen).partitions) == 5)
            await a.delete_topic("orders")
            await wait_for(lambda: "orders" not in stores[1].topics())
        finally:
            for s in stores:
                await s.stop()
    run(body)


def test_losing_create_leaves_the_winners_configs(zookeeper: ZooKeeperProcess) -> None:
    """A second create of the same topic (say a Metadata auto-create racing CreateTopics) fails
    as a whole: it must not overwrite the first one's config overrides (min.insync.replicas!)."""
    async def body() -> None:
        a, b = await store(zookeeper, 1), await store(zookeeper, 2)
        try:
            await a.create_topic("raced", 1, 2, {"min.insync.replicas": "2"})
            with pytest.raises(MetadataError) as e:
                await b.create_topic("raced", 1, 1, {})
            assert e.value.error == "topic_already_exists"
            data, _ = await a.client.get("/config/topics/raced")
            assert json.loads(data)["config"] == {"min.insync.replicas": "2"}
            await wait_for(lambda: (t := b.topic("raced")) is not None
                           and t.configs == {"min.insync.replicas": "2"})
            # A config znode left behind without a topic does not block a new create.
            await a.client.create("/config/topics/orphan", b'{"version":1,"config":{"retention.ms":"5"}}')
            await b.create_topic("orphan", 1, 1, {"retention.ms": "7"})
            await wait_for(lambda: (t := a.topic("orphan")) is not None and t.configs == {"retention.ms": "7"})
        finally:
            await a.stop()
            await b.stop()
    run(body)


def test_partition_state_changes_only_by_compare_and_set(zookeeper: ZooKeeperProcess) -> None:
    async def body() -> None:
        a, b = await store(zookeeper, 1), await store(zookeeper, 2)
        try:
            await wait_for(lambda: len(a.brokers()) == 2)
            await a.try_become_controller()
            await a.create_topic("cas", 1, 2, {})
            version = await a.partition_state_version("cas", 0)
            new = await a.update_partition_state("cas", 0, PartitionState([1, 2], 2, 1, [2]), version)
            assert new == version + 1
            with pytest.raises(MetadataError):  # a stale version loses
                await a.update_partition_state("cas", 0, PartitionState([1, 2], 1, 2, [1]), version)
            await a.stop()
            await wait_for(lambda: b.controller_id() == -1)
            await b.try_become_controller()
            current = await b.partition_state_version("cas", 0)
            await b.update_partition_state("cas", 0, PartitionState([1, 2], 2, 2, [2]), current)
            stale = await store(zookeeper, 1, register=False)
            stale.controller_epoch = 1  # what the old controller knew
            with pytest.raises(MetadataError, match="newer controller"):
                await stale.update_partition_state("cas", 0, PartitionState([1, 2], 1, 3, [1]),
                                                   await stale.partition_state_version("cas", 0))
            await stale.stop()
            assert await b.partition_state("cas", 0) == PartitionState([1, 2], 2, 2, [2])
        finally:
            await b.stop()
    run(body)


def test_isr_update_is_a_compare_and_set_against_the_leaders_version(zookeeper: ZooKeeperProcess) -> None:
    async def body() -> None:
        a = await store(zookeeper, 1)
        try:
            await a.create_topic("isr", 1, 1, {})
            version = await a.partition_state_version("isr", 0)
            assert await a.update_isr("isr", 0, 1, 0, [1], version) == version + 1
            assert await a.update_isr("isr", 0, 1, 0, [1], version) is None  # stale version
            assert await a.update_isr("isr", 0, 1, 5, [1], version + 1) is None  # wrong epoch
            assert a.topics()["isr"].partitions[0].version == version + 1
        finally:
            await a.stop()
    run(body)


def test_producer_id_blocks_are_unique(zookeeper: ZooKeeperProcess) -> None:
    async def body() -> list[int]:
        stores = [await store(zookeeper, i) for i in (1, 2, 3)]
        starts: list[int] = []

        async def take(s: ZooKeeperMetadataStore) -> None:
            for _ in range(10):
                starts.append(await s.allocate_producer_ids(100))

        try:
            await asyncio.gather(*(take(s) for s in stores))
        finally:
            for s in stores:
                await s.stop()
        return starts

    starts = asyncio.run(body())
    assert sorted(starts) == [100 * i for i in range(30)]


def test_zookeeper_restart_loses_no_state(zookeeper: ZooKeeperProcess) -> None:
    async def first() -> str:
        a = await store(zookeeper, 1)
        await a.create_topic("kept", 2, 1, {"cleanup.policy": "compact"})
        await a.stop()
        return a.cluster_id

    async def second(cluster_id: str) -> None:
        b = await store(zookeeper, 1)
        try:
            await wait_for(lambda: "kept" in b.topics())
            assert b.cluster_id == cluster_id
            assert b.topics()["kept"].configs == {"cleanup.policy": "compact"}
            assert sorted(b.topics()["kept"].partitions) == [0, 1]
        finally:
            await b.stop()

    cluster_id = asyncio.run(first())
    zookeeper.stop()
    zookeeper.start()
    asyncio.run(second(cluster_id))


def test_assignment_is_even() -> None:
    a = assign_replicas([1, 2, 3], 6, 3)
    assert all(len(set(r)) == 3 for r in a.values())
    assert sorted(r[0] for r in a.values()) == [1, 1, 2, 2, 3, 3]
    with pytest.raises(MetadataError):
        assign_replicas([1, 2], 1, 3)


def test_group_configs_are_seen_by_every_broker_and_kept(zookeeper: ZooKeeperProcess) -> None:
    """Group configs (Kafka's GROUP resource) live in /config/groups/<group>, in the shape of
    topic configs: a write through one broker reaches the others' caches by the watch, an
    empty one removes the znode, and a broker starting later reads them."""
    async def body() -> None:
        a, b = await store(zookeeper, 1), await store(zookeeper, 2)
        try:
            await a.set_group_configs("workers", {"share.auto.offset.reset": "earliest"})
            assert a.group_configs("workers") == {"share.auto.offset.reset": "earliest"}
            await wait_for(lambda: b.group_configs("workers") == {"share.auto.offset.reset": "earliest"})
            await b.set_group_configs("workers", {"share.isolation.level": "read_committed"})
            await wait_for(lambda: a.group_configs("workers") == {"share.isolation.level": "read_committed"})
            await a.set_group_configs("other", {"share.delivery.count.limit": "3"})
            c = await store(zookeeper, 3)
            try:
                assert c.group_configs("other") == {"share.delivery.count.limit": "3"}
                await a.set_group_configs("other", {})
                await wait_for(lambda: c.group_configs("other") == {} and b.group_configs("other") == {})
                assert await a.client.exists("/config/groups/other") is None
                await a.set_group_configs("other", {"share.delivery.count.limit": "4"})  # back again
                await wait_for(lambda: c.group_configs("other") == {"share.delivery.count.limit": "4"})
            finally:
                await c.stop()
        finally:
            await a.stop()
            await b.stop()
    run(body)


def test_a_topic_created_again_does_not_keep_the_earlier_topics_partition_states(
        zookeeper: ZooKeeperProcess) -> None:
    """A broker that still caches the deleted topic when it reads the new one of the same
    name (its watches were late, its session was lost) takes the new topic's partition
    states. It used to keep the cached ones wherever their state version was higher,
    which the earlier topic's, changed more often, usually was: the new topic got the old
    leader, epoch and ISR, and its state watches were then ignored as older."""
    async def body() -> None:
        a = await store(zookeeper, 1)
        try:
            await a.try_become_controller()
            await a.create_topic("again", 1, 1, {})
            for epoch in (1, 2, 3):
                version = await a.partition_state_version("again", 0)
                await a.update_partition_state("again", 0, PartitionState([1], 1, epoch, [1]), version)
            await wait_for(lambda: a.topics()["again"].partitions[0].leader_epoch == 3)
            earlier = a.topics()["again"]
            await a.delete_topic("again")
            await a.create_topic("again", 1, 1, {})
            a._topics["again"] = earlier  # what a late broker still caches
            await a.refresh_topic("again")
            now = a.topics()["again"]
            assert now.topic_id != earlier.topic_id
            assert now.partitions[0] == await a.partition_state("again", 0)
            assert now.partitions[0].leader_epoch == 4  # above the deleted topic's epochs
        finally:
            await a.stop()
    run(body)


def test_a_topic_created_again_starts_above_the_deleted_topics_leader_epochs(zookeeper: ZooKeeperProcess) -> None:
    """Fetch v12 and OffsetForLeaderEpoch name topics, not ids: a broker whose metadata lags
    behind a topic deleted and created again must not meet the other incarnation in the same
    leader epoch (its fetches, truncations and ISR writes would pass the epoch checks). The
    deletion records the highest epoch the topic reached, atomically with the removal of its
    znodes, and the next topic of that name starts above it; a first topic starts at 0."""
    async def body() -> None:
        a = await store(zookeeper, 1)
        try:
            await a.try_become_controller()
            created = await a.create_topic("floor", 2, 1, {})
            assert {s.leader_epoch for s in created.partitions.values()} == {0}
            version = await a.partition_state_version("floor", 1)
            await a.update_partition_state("floor", 1, PartitionState([1], 1, 7, [1]), version)
            await a.delete_topic("floor")
            assert await a.epoch_floor("floor") == 7
            again = await a.create_topic("floor", 2, 1, {})
            assert {s.leader_epoch for s in again.partitions.values()} == {8}
            grown = await a.create_partitions("floor", 3)
            assert grown.partitions[2].leader_epoch == 8  # added partitions start above the floor too
            # A controller deciding from the deleted topic's state (cached: version 0, epoch 7)
            # must not write it over the new topic's state (also at version 0).
            with pytest.raises(MetadataError):
                await a.update_partition_state("floor", 1, PartitionState([1], 1, 7, [1]), 0, base_epoch=7)
            await a.update_partition_state("floor", 1, PartitionState([1], 1, 9, [1]), 0, base_epoch=8)
            await a.delete_topic("floor")
            assert await a.epoch_floor("floor") == 9
            assert await a.epoch_floor("never") == -1
        finally:
            await a.stop()
    run(body)


def test_config_changes_are_compare_and_set(zookeeper: ZooKeeperProcess) -> None:
    """A config change is a read-modify-write of one znode. Another broker's write landing
    between this one's read and write was overwritten (the write had no version), so one of
    two concurrent IncrementalAlterConfigs through different brokers was lost. Now the write
    checks the version read and, having lost, reads again and applies the change to that."""
    from dmq.cluster.zk import codecs, paths

    async def body() -> None:
        a, b = await store(zookeeper, 1), await store(zookeeper, 2)
        try:
            await a.create_topic("configured", 1, 1, {"cleanup.policy": "compact"})
            for path, update in ((paths.topic_config("configured"),
                                  lambda change: a.update_topic_configs("configured", change)),
                                 (paths.broker_config("1"), lambda change: a.update_broker_configs("1", change)),
                                 (paths.group_config("g"), lambda change: a.update_group_configs("g", change))):
                seen: list[dict[str, str]] = []

                def change(current: dict[str, str], path: str = path,
                           seen: list[dict[str, str]] = seen) -> dict[str, str]:
                    if not seen:  # the other broker's write lands after this read
                        other = {**current, "segment.ms": "5"}
                        if b.client.kazoo.exists(path) is None:
                            b.client.kazoo.create(path, codecs.encode_config(other), makepath=True)
                        else:
                            b.client.kazoo.set(path, codecs.encode_config(other))
                    seen.append(current)
                    return {**current, "retention.ms": "9"}
                written = await update(change)
                assert written["segment.ms"] == "5" and written["retention.ms"] == "9", path
                assert len(seen) == 2 and seen[1]["segment.ms"] == "5"
                assert codecs.decode_config(b.client.kazoo.get(path)[0]) == written
            await wait_for(lambda: b.topic("configured") is not None and b.topic("configured").configs == {
                "cleanup.policy": "compact", "segment.ms": "5", "retention.ms": "9"})
            def refuse(current: dict[str, str]) -> dict[str, str]:
                raise MetadataError("invalid_config", "no")
            with pytest.raises(MetadataError) as refused:  # a change that raises writes nothing
                await a.update_group_configs("g", refuse)
            assert refused.value.error == "invalid_config"
            assert a.group_configs("g") == {"segment.ms": "5", "retention.ms": "9"}
        finally:
            await a.stop()
            await b.stop()
    run(body)


def test_new_partitions_take_the_assignment_given_and_wait_for_reassignments(
        zookeeper: ZooKeeperProcess) -> None:
    """create_partitions placed new partitions itself whatever CreatePartitions asked; and
    adding partitions to a topic being reassigned is REASSIGNMENT_IN_PROGRESS (Kafka's
    ZkAdminManager), checked against the topic znode's version it writes with."""
    from dmq.cluster.zk import codecs, paths

    async def body() -> None:
        stores = [await store(zookeeper, i) for i in (1, 2, 3)]
        a = stores[0]
        try:
            await a.create_topic("placed", 1, 2, {}, {0: [1, 2]})
            grown = await a.create_partitions("placed", 3, {1: [3, 1], 2: [2, 3]})
            assert {p: s.replicas for p, s in grown.partitions.items()} == {0: [1, 2], 1: [3, 1], 2: [2, 3]}
            assert grown.partitions[1].leader == 3 and grown.partitions[2].isr == [2, 3]
            data, stat = await a.client.get(paths.topic("placed"))
            raw = codecs.load(data)
            raw["adding_replicas"] = {"0": [3]}
            await a.client.set(paths.topic("placed"), codecs.dump(raw), version=stat.version)
            with pytest.raises(MetadataError) as refused:
                await a.create_partitions("placed", 4)
            assert refused.value.error == "reassignment_in_progress"
            assert str(refused.value) == "A partition reassignment is in progress for the topic 'placed'."
        finally:
            for s in stores:
                await s.stop()
    run(body)
