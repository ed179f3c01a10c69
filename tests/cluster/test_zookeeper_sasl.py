"""Brokers log in to ZooKeeper with SASL DIGEST-MD5 (zookeeper.sasl.jaas.config, the
entry of Kafka's JAAS Client section) when ZooKeeper requires it; a wrong password is
refused with one line and never logged."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess
from support.zookeeper import ZooKeeperProcess, available

JAAS = ('org.apache.zookeeper.server.auth.DigestLoginModule required username="broker" '
        'password="{password}";')


def test_brokers_log_in_to_zookeeper_with_sasl(tmp_path: Path, topic_name: str) -> None:
    if not available():
        pytest.skip("Debian's zookeeper package is not installed (scripts/test.sh installs it)")
    zk = ZooKeeperProcess(tmp_path / "zk", sasl_users={"broker": "zk-secret"}).start()
    common = {"zookeeper.connect": f"{zk.connect}/dmq", "zookeeper.session.timeout.ms": "4000",
              "zookeeper.connection.timeout.ms": "3000", "group.initial.rebalance.delay.ms": "0",
              "offsets.topic.num.partitions": "3"}
    broker = BrokerProcess(tmp_path / "b1", {**common, "broker.id": "1",
                                             "zookeeper.sasl.jaas.config": JAAS.format(password="zk-secret")})
    try:
        broker.start(timeout=60)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic_name, b"over a SASL ZooKeeper session")
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic_name])
        msg = None
        for _ in range(60):
            msg = consumer.poll(1)
            if msg is not None and not msg.error():
                break
        consumer.close()
        assert msg is not None and msg.value() == b"over a SASL ZooKeeper session"
        # A wrong password, or none: the broker cannot reach ZooKeeper and says so.
        for extra in ({"zookeeper.sasl.jaas.config": JAAS.format(password="wrong")}, {}):
            other = BrokerProcess(tmp_path / f"b2-{len(extra)}", {**common, "broker.id": "2", **extra})
            with pytest.raises(RuntimeError, match="cannot connect to ZooKeeper"):
                other.start(timeout=60)
            assert "wrong" not in other.log_text() and "zk-secret" not in other.log_text()
        assert "zk-secret" not in broker.log_text()
    finally:
        broker.close()
        zk.stop()
