"""Three brokers that talk SASL_SSL (SCRAM-SHA-512, a broker user) to each other while
clients use PLAINTEXT: followers replicate over the inter-broker listener's TLS and SASL,
and the brokers reach ZooKeeper over TLS only (zookeeper.ssl.*, client certificates).

The topic is created before the broker user exists: followers cannot authenticate, so
they fall out of the ISR, and the brokers' logs say why; once the user is added (stored
in ZooKeeper under /config/users, watched by every broker) they catch up and the ISR is
whole again, with every acknowledged record on every replica."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from support.broker import BrokerProcess
from support.certs import KEY_PASSWORD, make_pki
from support.cluster import Cluster
from support.ports import free_port
from support.zookeeper import ZooKeeperProcess, available

BROKER_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
               'username="broker" password="broker-secret";')


def test_replication_over_sasl_ssl(tmp_path: Path, topic_name: str) -> None:
    if not available():
        pytest.skip("Debian's zookeeper package is not installed (scripts/test.sh installs it)")
    pki = make_pki(tmp_path / "pki")
    cluster = Cluster(tmp_path, overrides={
        "zookeeper.ssl.client.enable": "true",
        "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
        "zookeeper.ssl.keystore.location": str(pki.server_keystore),
        "zookeeper.ssl.keystore.password": KEY_PASSWORD, "zookeeper.ssl.keystore.type": "PEM",
        "zookeeper.ssl.truststore.location": str(pki.ca), "zookeeper.ssl.truststore.type": "PEM",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": BROKER_JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        "replica.fetch.backoff.ms": "200",
    })
    # ZooKeeper serves TLS only, on the port the brokers were given.
    cluster.zookeeper = ZooKeeperProcess(tmp_path / "zk", port=cluster.zookeeper.port,
                                         tls=(pki.server_keystore_plain, pki.ca))
    inter_ports = {}
    for broker_id, b in cluster.brokers.items():
        inter_ports[broker_id] = free_port()
        b.listeners = f"PLAINTEXT://127.0.0.1:{b.port},SASL_SSL://127.0.0.1:{inter_ports[broker_id]}"
    try:
        cluster.start()
        admin = cluster.admin()
        # Clients on PLAINTEXT are given the PLAINTEXT endpoints.
        assert {b.port for b in cluster.metadata().brokers.values()} == {b.port for b in cluster.brokers.values()}
        admin.create_topics([NewTopic(topic_name, 2, 3)])[topic_name].result(30)
        cluster.wait_for(lambda: all(len(p.isrs) == 1 for p in cluster.metadata(topic_name)
                                     .topics[topic_name].partitions.values()),
                         "followers without credentials leave the ISR", timeout=60)
        logs = "".join(b.log_text() for b in cluster.brokers.values())
        assert "failed: SASL authentication with 127.0.0.1:" in logs
        assert any(f"127.0.0.1:{port} failed" in logs for port in inter_ports.values())
        # The broker user, through any broker: every broker sees it through its watch.
        upsert = UserScramCredentialUpsertion("broker", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              b"broker-secret")
        for fut in admin.alter_user_scram_credentials([upsert]).values():
            fut.result(30)
        cluster.wait_for(lambda: all(len(p.isrs) == 3 for p in cluster.metadata(topic_name)
                                     .topics[topic_name].partitions.values()),
                         "followers authenticate and rejoin the ISR", timeout=60)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(200):
            producer.produce(topic_name, key=str(i).encode(), value=f"v{i}".encode())
        assert producer.flush(30) == 0
        # A transaction over partitions led by several brokers: its coordinator sends the
        # markers to the other leaders over the inter-broker listener (SASL_SSL).
        leaders = {p.leader for p in cluster.metadata(topic_name).topics[topic_name].partitions.values()}
        txn = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "secure-txn"})
        txn.init_transactions(30)
        txn.begin_transaction()
        for p in range(2):
            txn.produce(topic_name, partition=p, value=f"txn{p}".encode())
        txn.commit_transaction(30)
        committed = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "secure-txn-check",
                              "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        committed.subscribe([topic_name])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 60
        while not {b"txn0", b"txn1"} <= seen and time.monotonic() < deadline:
            msg = committed.poll(1)
            if msg is not None and not msg.error():
                seen.add(msg.value())
        committed.close()
        assert {b"txn0", b"txn1"} <= seen, (leaders, len(seen))
        # Kill each partition's leader in turn: the followers had everything.
        leader = cluster.partition(topic_name, 0).leader
        cluster.brokers[leader].kill()
        cluster.wait_for(lambda: cluster.partition(topic_name, 0).leader not in (-1, leader),
                         "a new leader from the ISR", timeout=60)
        consumer = Consumer({"bootstrap.servers": cluster.reachable_bootstrap(), "group.id": "secure-check",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic_name])
        got: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(got) < 202 and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and not msg.error():
                got.add(msg.value())
        consumer.close()
        assert {f"v{i}".encode() for i in range(200)} <= got
        for b in cluster.brokers.values():
            assert "broker-secret" not in b.log_text() and KEY_PASSWORD not in b.log_text()
        # Without TLS a broker cannot reach this ZooKeeper: it says so and stops.
        plain = BrokerProcess(tmp_path / "plain", {"zookeeper.connect": cluster.zk_connect,
                                                   "broker.id": "9", "zookeeper.session.timeout.ms": "4000",
                                                   "zookeeper.connection.timeout.ms": "3000"})
        with pytest.raises(RuntimeError, match="cannot connect to ZooKeeper"):
            plain.start(timeout=60)
    finally:
        cluster.stop()


def test_replication_over_ssl_with_client_certificates(tmp_path: Path, topic_name: str) -> None:
    """An SSL inter-broker listener that requires client certificates: followers present
    the broker's certificate (the key store) and replicate."""
    if not available():
        pytest.skip("Debian's zookeeper package is not installed (scripts/test.sh installs it)")
    pki = make_pki(tmp_path / "pki")
    cluster = Cluster(tmp_path, overrides={
        "inter.broker.listener.name": "INTERNAL",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
        "listener.name.internal.ssl.client.auth": "required",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
    })
    for b in cluster.brokers.values():
        b.listeners = f"PLAINTEXT://127.0.0.1:{b.port},INTERNAL://127.0.0.1:{free_port()}"
    try:
        cluster.start()
        cluster.create_topic(topic_name, partitions=2, rf=3)  # waits for the whole ISR
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(50):
            producer.produce(topic_name, value=f"v{i}".encode())
        assert producer.flush(30) == 0
        for p in cluster.metadata(topic_name).topics[topic_name].partitions.values():
            assert len(p.isrs) == 3
        logs = "".join(b.log_text() for b in cluster.brokers.values())
        assert "fetching from broker" not in logs  # no follower ever failed to connect
    finally:
        cluster.stop()
