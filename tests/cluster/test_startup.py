"""A broker of a ZooKeeper cluster says it is up ("listening on") only once a controller
is known. It used to say so about 100 ms before it had elected itself in a new cluster:
a client's first Metadata got controller id -1, and librdkafka's admin client then waited
for a controller it never asked about again, so the first CreateTopics went unanswered
for its whole timeout (seen as a flaky ZooKeeper SASL test)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from support.broker import BrokerProcess
from support.zookeeper import ZooKeeperProcess, available


@pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")
def test_a_new_clusters_first_broker_is_up_with_a_controller(tmp_path: Path) -> None:
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    try:
        for attempt in range(4):  # each a new cluster (its own chroot): the broker elects itself
            broker = BrokerProcess(tmp_path / f"b{attempt}", {
                "broker.id": "1", "zookeeper.connect": f"{zk.connect}/c{attempt}",
                "zookeeper.session.timeout.ms": "6000"})
            try:
                broker.start(timeout=60)
                admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
                md = admin.list_topics(timeout=10)
                assert md.controller_id == 1, f"attempt {attempt}: controller {md.controller_id} once up"
            finally:
                broker.close()
    finally:
        zk.stop()
