"""Half messages in a cluster: the group's transaction coordinator is SIGKILLed between two
checks; the next coordinator continues the count from the replicated check state and the
checker, having found it, commits the crashed producer's message once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kio.schema.errors import ErrorCode
from support.cluster import Cluster
from support.half_messages import crash_producer, describe_checks

from dmq.client.transactions import HalfMessage, TransactionProducer, TransactionResolution
from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class
from dmq.transaction.records import half_transactional_id

pytestmark = pytest.mark.cluster_config(**{
    "transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2", "transaction.check.delay.ms": "1000",
    "transaction.check.interval.ms": "1000", "transaction.check.max": "10"})


def group_coordinator(cluster: Cluster, via: int, exclude: int = -1) -> int:
    key = half_transactional_id("orders", "probe")
    with WireClient("127.0.0.1", cluster.brokers[via].port) as c:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            r = c.request(make(request_class(10, 4), key_type=1, coordinator_keys=(key,))).coordinators[0]
            if r.error_code == ErrorCode.none and int(r.node_id) != exclude:
                return int(r.node_id)
            time.sleep(0.2)
    raise AssertionError("no transaction coordinator for producer group orders")


def test_checks_continue_on_the_next_coordinator(cluster: Cluster, tmp_path: Path) -> None:
    cluster.create_topic("orders", partitions=1, rf=3)
    coordinator = group_coordinator(cluster, via=1)
    survivor = next(b for b in cluster.brokers if b != coordinator)
    table = tmp_path / "table"
    table.mkdir()
    asked: list[int] = []
    answered_unknown = threading.Event()

    def check(message: HalfMessage) -> TransactionResolution:
        asked.append(message.check)
        if message.check == 1:  # not sure yet the first time; then the coordinator dies
            answered_unknown.set()
            return TransactionResolution.UNKNOWN
        assert message.key is not None and (table / message.key.decode()).exists()
        return TransactionResolution.COMMIT

    survivors = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != coordinator)
    with TransactionProducer({"bootstrap.servers": survivors, "producer.group": "orders",
                              "check.poll.interval.ms": 200}, checker=check):
        txn_id = crash_producer(cluster.bootstrap, "42", "commit", table)
        assert answered_unknown.wait(30)
        cluster.wait_for(lambda: describe_checks(cluster.brokers[coordinator].port).get(txn_id, ("", 0, -1))[2]
                         == TransactionResolution.UNKNOWN, "the UNKNOWN answer recorded")
        cluster.brokers[coordinator].kill()
        successor = group_coordinator(cluster, via=survivor, exclude=coordinator)
        cluster.wait_for(lambda: describe_checks(cluster.brokers[successor].port).get(txn_id, ("",))[0]
                         == "CompleteCommit", "the commit by the next coordinator", timeout=60)
    assert asked == [1, 2]  # the count went on: check 2, not a first check again
    assert describe_checks(cluster.brokers[successor].port)[txn_id] == \
        ("CompleteCommit", 2, TransactionResolution.COMMIT)
    consumer = Consumer({"bootstrap.servers": survivors, "group.id": "half-probe", "log_level": 0,
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition("orders", 0, OFFSET_BEGINNING)])
    keys: list[bytes] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not keys:
        msg = consumer.poll(0.3)
        if msg is not None and not msg.error():
            keys.append(msg.key())
    time.sleep(1)
    while (msg := consumer.poll(0.3)) is not None:
        if not msg.error():
            keys.append(msg.key())
    consumer.close()
    assert keys == [b"42"]
