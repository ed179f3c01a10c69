"""/metrics of a ZooKeeper cluster of three brokers, before and after the controller is SIGKILLed.

Checks the cluster-wide families against the cluster's own metadata: one active
controller (and another one after the kill), every partition led once, the
under-replicated partitions and ISR shrinks the dead broker causes, the
ZooKeeper session state, and the ZooKeeper names the Grafana dashboard uses.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from support.broker import free_port
from support.cluster import Cluster
from support.metrics import Scrape, dashboard_metric_names, scrape
from support.zookeeper import available

TOPIC = "metrics-cluster"
PARTITIONS = 6


@pytest.fixture
def metrics_cluster(tmp_path: Path) -> Iterator[tuple[Cluster, dict[int, str]]]:
    if not available():
        pytest.skip("Debian's zookeeper package is not installed (scripts/test.sh installs it)")
    ports = {i: free_port() for i in (1, 2, 3)}
    c = Cluster(tmp_path, per_broker={i: {"metrics.listener": f"127.0.0.1:{p}"} for i, p in ports.items()})
    try:
        yield c.start(), {i: f"http://127.0.0.1:{p}/metrics" for i, p in ports.items()}
    finally:
        c.stop()


def scrapes(cluster: Cluster, urls: dict[int, str]) -> dict[int, Scrape]:
    return {i: scrape(url) for i, url in urls.items() if cluster.brokers[i].alive()}


def partitions_in_metadata(cluster: Cluster) -> list[tuple[int, list[int], list[int]]]:
    """(leader, replicas, isr) of every partition of every topic, as the brokers answer."""
    md = cluster.metadata()
    return [(p.leader, list(p.replicas), list(p.isrs)) for t in md.topics.values()
            for p in t.partitions.values()]


def test_controller_leaders_and_under_replication_after_a_sigkill(
        metrics_cluster: tuple[Cluster, dict[int, str]]) -> None:
    cluster, urls = metrics_cluster
    cluster.create_topic(TOPIC, PARTITIONS, 3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(600):
        p.produce(TOPIC, key=str(i).encode(), value=str(i).encode())  # keys: every partition
    assert p.flush(30) == 0

    def in_sync() -> dict[int, Scrape] | None:
        """Scrapes once every replica has every record and every ISR is whole (a follower
        slow to start fetching may have left an ISR for a moment after the topic's creation)."""
        now = scrapes(cluster, urls)
        bytes_in = sum(x.value("dmq_topic_bytes_in_total", 0, topic=TOPIC) for x in now.values())
        replicated = sum(x.value("dmq_topic_replication_bytes_in_total", 0, topic=TOPIC) for x in now.values())
        whole = sum(x.value("dmq_replica_under_replicated_partitions") for x in now.values()) == 0
        return now if whole and replicated == 2 * bytes_in > 0 else None

    cluster.wait_for(in_sync, "every replica in sync with every record", timeout=30)
    # A group's coordinator reports its lag on every partition, also those other brokers
    # lead (their end offsets asked of their leaders during the scrape).
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "metrics-cluster-group",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([TOPIC])
        got = 0
        deadline = time.monotonic() + 60
        while got < 600 and time.monotonic() < deadline:
            got += sum(1 for m in c.consume(600 - got, 1.0) if m.error() is None)
        assert got == 600
        c.commit(asynchronous=False)
    finally:
        c.close()

    def lag_everywhere() -> bool:
        now = scrapes(cluster, urls)
        lags = [(i, lbl) for i, x in now.items()
                for lbl in x.labelled("dmq_consumergroup_lag", group="metrics-cluster-group")]
        return (len(lags) == PARTITIONS and len({i for i, _ in lags}) == 1
                and sum(x.total("dmq_consumergroup_lag", group="metrics-cluster-group") for x in now.values()) == 0
                and sum(x.total("dmq_consumergroup_committed_offset", group="metrics-cluster-group")
                        for x in now.values()) == 600)

    cluster.wait_for(lag_everywhere, "the coordinator's lag on every partition, 0", timeout=30)
    s = cluster.wait_for(in_sync, "every replica in sync", timeout=30)
    controller = cluster.controller_id()
    assert {i: x.value("dmq_controller_active") for i, x in s.items()} == {
        i: (1 if i == controller else 0) for i in s}
    assert s[controller].value("dmq_controller_offline_partitions") == 0
    everything = partitions_in_metadata(cluster)
    assert sum(x.value("dmq_replica_leader_partitions") for x in s.values()) == len(everything)
    assert s[controller].value("dmq_controller_partitions") == len(everything)
    # Followers fetch through fetch sessions (KIP-227): every follower replica of every
    # partition is in a session at its leader, one session per follower and leader.
    assert sum(x.value("dmq_fetch_session_partitions") for x in s.values()) >= \
        sum(len(replicas) - 1 for _, replicas, _ in everything) > 0
    assert all(x.value("dmq_fetch_sessions") >= 2 for i, x in s.items()
               if any(leader == i for leader, _, _ in everything))
    for x in s.values():
        assert x.value("dmq_zookeeper_session_state", state="CONNECTED") == 1
        assert x.value("dmq_zookeeper_session_state", state="LOST") == 0
        assert x.value("dmq_cluster_brokers") == 3
    # Records in on the leaders only (each once), replicated to both followers (in_sync).
    assert sum(x.value("dmq_topic_messages_in_total", 0, topic=TOPIC) for x in s.values()) == 600
    # Every ZooKeeper name of the Grafana dashboard is in a cluster broker's scrape.
    zk_names = sorted(n for n in dashboard_metric_names() if n.startswith("dmq_zookeeper_"))
    assert zk_names and all(n in s[controller].samples for n in zk_names), zk_names

    # Partitions led by the survivors lose the dead broker from their ISR: shrinks there.
    victim = controller
    led_by_survivors = sum(1 for leader, _, _ in everything if leader != victim)
    shrinks_before = sum(x.value("dmq_replica_isr_shrinks_total") for i, x in s.items() if i != victim)
    cluster.brokers[victim].kill()
    survivors = [i for i in urls if i != victim]

    def settled() -> bool:
        now = scrapes(cluster, urls)
        md = partitions_in_metadata(cluster)
        active = [i for i in survivors if now[i].value("dmq_controller_active") == 1]
        return (len(active) == 1
                and all(leader in survivors and victim not in isr for leader, _, isr in md)
                and sum(now[i].value("dmq_replica_leader_partitions") for i in survivors) == len(md)
                and sum(now[i].value("dmq_replica_under_replicated_partitions") for i in survivors) == len(md)
                and now[active[0]].value("dmq_controller_offline_partitions") == 0
                and now[active[0]].value("dmq_cluster_brokers") == 2)

    cluster.wait_for(settled, "a new controller, every partition led by a survivor and under-replicated",
                     timeout=60)
    after = scrapes(cluster, urls)
    shrinks = sum(after[i].value("dmq_replica_isr_shrinks_total") for i in survivors)
    assert shrinks - shrinks_before >= led_by_survivors
    for i in survivors:
        assert after[i].value("dmq_replica_under_min_isr_partitions") == 0  # min.insync.replicas=1
        assert after[i].value("dmq_zookeeper_session_state", state="CONNECTED") == 1
        assert after[i].value("dmq_zookeeper_session_expirations_total") == 0
