"""The ZooKeeper metadata store against a real ZooKeeper (Debian's package)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.zookeeper import ZooKeeperProcess, available

pytestmark = pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")

from dmq.cluster.metadata import BrokerInfo, MetadataError, PartitionState  # noqa: E402
from dmq.cluster.zookeeper import ZooKeeperMetadataStore, assign_replicas  # noqa: E402


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperProcess]:
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    yield zk
    zk.stop()


def store(zk: ZooKeeperProcess, broker_id: int, chroot: str = "/dmq") -> ZooKeeperMetadataStore:
    s = ZooKeeperMetadataStore(zk.connect + chroot, broker_id, session_timeout_ms=3000)
    s.register_broker(BrokerInfo(broker_id, "127.0.0.1", 9090 + broker_id))
    return s


def wait_for(cond, timeout: float = 15) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_registration_and_controller_failover(zookeeper: ZooKeeperProcess) -> None:
    a, b = store(zookeeper, 1), store(zookeeper, 2)
    try:
        wait_for(lambda: [x.broker_id for x in b.brokers()] == [1, 2])
        assert a.try_become_controller() and not b.try_become_controller()
        wait_for(lambda: b.controller_id() == 1)
        first_epoch = a.controller_epoch
        a.register_broker(BrokerInfo(1, "127.0.0.1", 9091))  # its own registration: kept
        other = ZooKeeperMetadataStore(zookeeper.connect + "/dmq", 1, session_timeout_ms=3000)
        try:
            with pytest.raises(MetadataError, match="registered in ZooKeeper by a live session"):
                other.register_broker(BrokerInfo(1, "h", 1), wait_s=1)  # one registration per id
        finally:
            other.close()
        a.close()  # the controller's session ends: its ephemeral znodes go
        wait_for(lambda: [x.broker_id for x in b.brokers()] == [2] and b.controller_id() == -1)
        assert b.try_become_controller()
        assert b.controller_epoch == first_epoch + 1
        wait_for(lambda: b.controller_id() == 2)
    finally:
        b.close()


def test_topics_in_kafka_layout_seen_by_every_broker(zookeeper: ZooKeeperProcess) -> None:
    stores = [store(zookeeper, i) for i in (1, 2, 3)]
    a = stores[0]
    try:
        wait_for(lambda: len(a.brokers()) == 3)
        a.try_become_controller()
        topic = a.create_topic("orders", 3, 2, {"retention.ms": "1000"})
        assert sorted(s.leader for s in topic.partitions.values()) == [1, 2, 3]  # leaders spread
        assert all(len(set(s.replicas)) == 2 for s in topic.partitions.values())
        wait_for(lambda: "orders" in stores[2].topics())
        seen = stores[2].topics()["orders"]
        assert seen.topic_id == topic.topic_id and seen.configs == {"retention.ms": "1000"}
        raw = json.loads(a.zk.get("/brokers/topics/orders")[0])
        assert raw["version"] == 3 and set(raw["partitions"]) == {"0", "1", "2"}
        state = json.loads(a.zk.get("/brokers/topics/orders/partitions/0/state")[0])
        assert set(state) >= {"controller_epoch", "leader", "leader_epoch", "isr"}
        with pytest.raises(MetadataError):
            a.create_topic("orders", 1, 1, {})
        a.create_partitions("orders", 5)
        wait_for(lambda: len(stores[1].topics().get("orders", seen).partitions) == 5)
        a.delete_topic("orders")
        wait_for(lambda: "orders" not in stores[1].topics())
    finally:
        for s in stores:
            s.close()


def test_losing_create_leaves_the_winners_configs(zookeeper: ZooKeeperProcess) -> None:
    """A second create of the same topic (say a Metadata auto-create racing CreateTopics) fails
    as a whole: it must not overwrite the first one's config overrides (min.insync.replicas!)."""
    a, b = store(zookeeper, 1), store(zookeeper, 2)
    try:
        a.create_topic("raced", 1, 2, {"min.insync.replicas": "2"})
        with pytest.raises(MetadataError) as e:
            b.create_topic("raced", 1, 1, {})
        assert e.value.error == "topic_already_exists"
        data, _ = a.zk.get("/config/topics/raced")
        assert json.loads(data)["config"] == {"min.insync.replicas": "2"}
        wait_for(lambda: (t := b.topic("raced")) is not None and t.configs == {"min.insync.replicas": "2"})
        # A config znode left behind without a topic does not block a new create.
        a.zk.create("/config/topics/orphan", b'{"version":1,"config":{"retention.ms":"5"}}')
        b.create_topic("orphan", 1, 1, {"retention.ms": "7"})
        wait_for(lambda: (t := a.topic("orphan")) is not None and t.configs == {"retention.ms": "7"})
    finally:
        a.close()
        b.close()


def test_partition_state_changes_only_by_compare_and_set(zookeeper: ZooKeeperProcess) -> None:
    a, b = store(zookeeper, 1), store(zookeeper, 2)
    try:
        wait_for(lambda: len(a.brokers()) == 2)
        a.try_become_controller()
        a.create_topic("cas", 1, 2, {})
        version = a.partition_state_version("cas", 0)
        new = a.update_partition_state("cas", 0, PartitionState([1, 2], 2, 1, [2]), version)
        assert new == version + 1
        with pytest.raises(MetadataError):  # a stale version loses
            a.update_partition_state("cas", 0, PartitionState([1, 2], 1, 2, [1]), version)
        a.close()
        wait_for(lambda: b.controller_id() == -1)
        b.try_become_controller()
        current = b.partition_state_version("cas", 0)
        b.update_partition_state("cas", 0, PartitionState([1, 2], 2, 2, [2]), current)
        stale = ZooKeeperMetadataStore(zookeeper.connect + "/dmq", 1, session_timeout_ms=3000)
        stale.controller_epoch = 1  # what the old controller knew
        with pytest.raises(MetadataError, match="newer controller"):
            stale.update_partition_state("cas", 0, PartitionState([1, 2], 1, 3, [1]),
                                         stale.partition_state_version("cas", 0))
        stale.close()
        assert b.partition_state("cas", 0) == PartitionState([1, 2], 2, 2, [2])
    finally:
        b.close()


def test_producer_id_blocks_are_unique(zookeeper: ZooKeeperProcess) -> None:
    stores = [store(zookeeper, i) for i in (1, 2, 3)]
    starts: list[int] = []
    lock = threading.Lock()

    def take(s: ZooKeeperMetadataStore) -> None:
        for _ in range(10):
            start = s.allocate_producer_ids(100)
            with lock:
                starts.append(start)

    threads = [threading.Thread(target=take, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for s in stores:
        s.close()
    assert sorted(starts) == [100 * i for i in range(30)]


def test_zookeeper_restart_loses_no_state(zookeeper: ZooKeeperProcess) -> None:
    a = store(zookeeper, 1)
    a.create_topic("kept", 2, 1, {"cleanup.policy": "compact"})
    cluster_id = a.cluster_id
    a.close()
    zookeeper.stop()
    zookeeper.start()
    b = store(zookeeper, 1)
    try:
        wait_for(lambda: "kept" in b.topics())
        assert b.cluster_id == cluster_id
        assert b.topics()["kept"].configs == {"cleanup.policy": "compact"}
        assert sorted(b.topics()["kept"].partitions) == [0, 1]
    finally:
        b.close()


def test_assignment_is_even() -> None:
    a = assign_replicas([1, 2, 3], 6, 3)
    assert all(len(set(r)) == 3 for r in a.values())
    assert sorted(r[0] for r in a.values()) == [1, 1, 2, 2, 3, 3]
    with pytest.raises(MetadataError):
        assign_replicas([1, 2], 1, 3)
