"""The console of a ZooKeeper cluster of three brokers: each broker's ZooKeeper session,
DescribeLogDirs on every broker (a replica's size on each), and a stopped broker's
partitions shown under-replicated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from support.cluster import Cluster
from support.console import ConsoleProcess, cells, get
from support.zookeeper import available


@pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")
def test_cluster_page_zookeeper_sessions_sizes_and_under_replication(tmp_path: Path) -> None:
    c = Cluster(tmp_path).start()
    console = None
    try:
        c.create_topic("web-rf3", partitions=2, rf=3)
        p = Producer({"bootstrap.servers": c.bootstrap, "log_level": 0, "acks": "all"})
        for i in range(100):
            p.produce("web-rf3", b"x" * 300, partition=i % 2)
        assert p.flush(20) == 0
        c.wait_for(lambda: all(len(x.isrs) == 3 for x in c.metadata("web-rf3").topics["web-rf3"].partitions.values()),
                   "all replicas in sync")

        # DescribeLogDirs from kafka-python's admin: every broker has both partitions.
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
        dirs = admin.describe_log_dirs({"web-rf3": [0, 1]})
        admin.close()
        assert sorted(d["broker"] for d in dirs) == [1, 2, 3]
        for d in dirs:
            [log_dir] = d["log_dirs"]
            assert log_dir["log_dir"] == str(c.brokers[d["broker"]].data_dir.resolve())
            sizes = {p["partition_index"]: p["partition_size"] for t in log_dir["topics"] for p in t["partitions"]}
            assert set(sizes) == {0, 1} and all(s > 50 * 300 for s in sizes.values()), d

        console = ConsoleProcess(c.bootstrap, tmp_path / "console.log").start()
        page = get(console.url, "/cluster")
        assert [r[0] for r in cells(page.text, "brokers")[1:]] == ["1", "2", "3"]
        zk = cells(page.text, "zookeeper")[1:]
        assert [(r[0], r[1], r[3]) for r in zk] == [(str(i), c.zk_connect, "CONNECTED") for i in (1, 2, 3)]
        assert all(re.fullmatch(r"0x[0-9a-f]+", r[2]) and r[2] != "0x0" for r in zk)
        replica_sizes = cells(get(console.url, "/topics/web-rf3").text, "partitions")[1][8]
        assert re.fullmatch(r"\d: [\d.]+ KiB, \d: [\d.]+ KiB, \d: [\d.]+ KiB", replica_sizes), replica_sizes

        # A broker stops: its replicas leave the ISRs, the cluster page shows them.
        leader = c.partition("web-rf3", 0).leader
        stopped = next(i for i in (1, 2, 3) if i != leader and i != c.controller_id())
        c.brokers[stopped].kill()
        c.wait_for(lambda: all(len(x.isrs) == 2 for x in c.metadata("web-rf3").topics["web-rf3"].partitions.values()),
                   "the stopped broker out of the ISRs")
        page = get(console.url, "/cluster")
        under = [(r[0], r[1]) for r in cells(page.text, "under-replicated")[1:]]
        assert ("web-rf3", "0") in under and ("web-rf3", "1") in under
        assert str(stopped) not in [r[0] for r in cells(page.text, "brokers")[1:]]  # unregistered
    finally:
        if console is not None:
            console.close()
        c.stop()
