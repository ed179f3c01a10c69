"""Brokers log in to ZooKeeper with SASL DIGEST-MD5 (zookeeper.sasl.jaas.config, the
entry of Kafka's JAAS Client section) when ZooKeeper requires it, and with
zookeeper.set.acl create znodes only they may change (credentials only they may read);
a wrong password is refused with one line and never logged."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from support.broker import BrokerProcess
from support.zookeeper import ZooKeeperProcess, available

JAAS = ('org.apache.zookeeper.server.auth.DigestLoginModule required username="broker" '
        'password="{password}";')


# Twice in the whole suite beside other workers its CreateTopics was not answered within 30 s
# (the broker had become the controller and logged nothing more); never alone, nor under
# synthetic CPU load. Run alone until the cause is found (noted on issue 14).
@pytest.mark.run_alone
def test_brokers_log_in_to_zookeeper_with_sasl(tmp_path: Path, topic_name: str) -> None:
    if not available():
        pytest.skip("Debian's zookeeper package is not installed (scripts/test.sh installs it)")
    zk = ZooKeeperProcess(tmp_path / "zk", sasl_users={"broker": "zk-secret", "other": "o-secret"}).start()
    common = {"zookeeper.connect": f"{zk.connect}/dmq", "zookeeper.session.timeout.ms": "4000",
              "zookeeper.connection.timeout.ms": "3000", "group.initial.rebalance.delay.ms": "0",
              "offsets.topic.num.partitions": "3"}
    broker = BrokerProcess(tmp_path / "b1", {**common, "broker.id": "1", "zookeeper.set.acl": "true",
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
        # zookeeper.set.acl: another identity reads the topic's znode but cannot change it,
        # and cannot read SCRAM credentials at all.
        upsert = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                              b"bob-secret")
        for fut in admin.alter_user_scram_credentials([upsert]).values():
            fut.result(30)
        other = KazooClient(hosts=f"{zk.connect}/dmq", timeout=5, sasl_options={
            "mechanism": "DIGEST-MD5", "username": "other", "password": "o-secret"})
        other.start(timeout=15)
        try:
            data, _ = other.get(f"/brokers/topics/{topic_name}")
            assert b"partitions" in data
            with pytest.raises(NoAuthError):
                other.set(f"/brokers/topics/{topic_name}", b"{}")
            with pytest.raises(NoAuthError):
                other.get("/config/users/bob")
            acls = {(a.id.scheme, a.id.id, a.perms) for a in other.get_acls(f"/brokers/topics/{topic_name}")[0]}
            assert acls == {("sasl", "broker", 31), ("world", "anyone", 1)}  # ALL for the broker, READ
        finally:
            other.stop()
            other.close()
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
