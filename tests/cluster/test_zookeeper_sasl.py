"""Brokers log in to ZooKeeper with SASL DIGEST-MD5 (zookeeper.sasl.jaas.config, the
entry of Kafka's JAAS Client section) when ZooKeeper requires it, and with
zookeeper.set.acl create znodes only they may change (credentials only they may read);
a wrong password is refused with one line and never logged."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
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
from support.proxy import TcpProxy
from support.zookeeper import ZooKeeperProcess, available

JAAS = ('org.apache.zookeeper.server.auth.DigestLoginModule required username="broker" '
        'password="{password}";')


# Its first CreateTopics once went unanswered for 30 s: the broker said it was up before it had
# elected itself controller, and librdkafka's admin client waited for the controller its first
# Metadata did not name (fixed in the broker's start; tests/cluster/test_startup.py).
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


def test_a_connection_dropped_during_the_sasl_login_is_retried(tmp_path: Path, topic_name: str) -> None:
    """kazoo takes a connection dropped in the middle of its SASL exchange (ZooKeeper
    restarting, a network blip) for a refused login and stops reconnecting for good: the
    broker was out of ZooKeeper for ever (every metadata change failing) after a drop at
    that moment. Once a broker has been connected, it starts a new connection after such
    a failure, as Kafka's ZooKeeperClient reinitializes after an AuthFailed."""
    if not available():
        pytest.skip("Debian's zookeeper package is not installed (scripts/test.sh installs it)")
    zk = ZooKeeperProcess(tmp_path / "zk", sasl_users={"broker": "zk-secret"}).start()
    proxy = TcpProxy("127.0.0.1", zk.port).start()
    broker = BrokerProcess(tmp_path / "b1", {
        "broker.id": "1", "zookeeper.connect": f"{proxy.address}/dmq", "zookeeper.session.timeout.ms": "4000",
        "zookeeper.connection.timeout.ms": "3000", "offsets.topic.num.partitions": "1",
        "zookeeper.sasl.jaas.config": JAAS.format(password="zk-secret")})
    try:
        broker.start(timeout=60)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        admin.create_topics([NewTopic(f"{topic_name}-before", 1, 1)])[f"{topic_name}-before"].result(30)
        # The next connection passes its Connect request and drops on its first SASL token.
        proxy.drop_after_client_frames = 1
        proxy.reset()
        deadline = time.monotonic() + 20
        while "AUTH_FAILED" not in broker.log_text() and "login to ZooKeeper failed" not in broker.log_text():
            assert time.monotonic() < deadline, "the reconnection never reached the SASL login"
            time.sleep(0.2)
        proxy.drop_after_client_frames = None
        # Back in ZooKeeper: a topic can be created again (its znodes written, its leader elected).
        created = None
        deadline = time.monotonic() + 40
        while created is None:
            try:
                admin.create_topics([NewTopic(f"{topic_name}-after", 1, 1)])[f"{topic_name}-after"].result(15)
                created = True
            except Exception as e:  # noqa: BLE001 - REQUEST_TIMED_OUT while ZooKeeper is out of reach
                assert time.monotonic() < deadline, f"the broker never got back into ZooKeeper: {e}"
                time.sleep(1)
        # Its leader is listed once this broker leads it: after its new session has
        # registered it again (the old registration may take the session timeout to go).
        leader = -1
        deadline = time.monotonic() + 40
        while leader != 1 and time.monotonic() < deadline:
            try:
                topics = admin.list_topics(f"{topic_name}-after", timeout=10).topics
                leader = topics[f"{topic_name}-after"].partitions[0].leader
            except KafkaException:
                pass  # a transport failure while the broker comes back (seen in CI): ask again
            time.sleep(0.2)
        assert leader == 1
        assert "zk-secret" not in broker.log_text()
    finally:
        broker.close()
        proxy.close()
        zk.stop()
