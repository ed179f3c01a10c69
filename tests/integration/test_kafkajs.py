"""KafkaJS (Node.js's most used Kafka client, pinned in tests/integration/kafkajs) against a
real dmq server: admin, an idempotent producer, consumer groups, transactions and the
errors it names. ``scripts/test.sh`` installs Node.js and runs ``npm ci`` there; the
scenarios are in ``kafkajs/client.js``, each printing what it saw as one JSON line
(tests/support/kafkajs.py runs them). The same client through a leader's failover:
tests/cluster/test_kafkajs_cluster.py."""

from __future__ import annotations

from typing import Any

from support import kafkajs as kjs
from support.broker import BrokerProcess


def kafkajs(scenario: str, broker: BrokerProcess, topic: str) -> Any:
    return kjs.run(scenario, broker.bootstrap, topic)


def test_admin_idempotent_producer_and_consumer_group(broker: BrokerProcess, topic_name: str) -> None:
    out = kafkajs("basics", broker, topic_name)
    assert out["created"] is True
    assert out["partitions"] == [[p, 0, 0] for p in range(3)]
    # Ten sends of two records each (odd ones gzip), by key over three partitions.
    seen = out["seen"]
    assert sorted(m["value"] for m in seen) == sorted([f"v{i}" for i in range(10)] + [f"w{i}" for i in range(10)])
    ends = {p: high for p, low, high in out["ends"]}
    assert all(low == 0 for _, low, _ in out["ends"]) and sum(ends.values()) == 20
    for m in seen:
        i = m["value"][1:]
        assert m["key"] == f"k{i}"
        assert m["headers"] == ({"source": "kafkajs"} if m["value"].startswith("v") else {})
    by_partition: dict[int, list[int]] = {}
    for m in seen:
        by_partition.setdefault(m["partition"], []).append(int(m["offset"]))
    assert all(offsets == list(range(ends[p])) for p, offsets in by_partition.items())
    # Each key's two records sit together, in order, on one partition.
    for i in range(10):
        (p,) = {m["partition"] for m in seen if m["key"] == f"k{i}"}
        values = [m["value"] for m in seen if m["key"] == f"k{i}"]
        assert values == [f"v{i}", f"w{i}"]
    # The group committed its position; it is described as Kafka would.
    assert dict((p, o) for p, o in out["committed"]) == ends
    assert out["group"] == [[f"{topic_name}-group", "Empty", "consumer"]]
    assert out["listedAfterDelete"] is False


def test_transactions_and_read_committed(broker: BrokerProcess, topic_name: str) -> None:
    out = kafkajs("transactions", broker, topic_name)
    assert out["committed"] == ["committed 1", "committed 2"]
    assert out["uncommitted"] == ["committed 1", "aborted", "committed 2"]
    assert out["ctp"] == [[0, 1]]
    assert out["high"] == 6  # three records and three markers


def test_admin_errors_are_kafkas(broker: BrokerProcess, topic_name: str) -> None:
    out = kafkajs("errors", broker, topic_name)
    assert out == {
        "badName": ["INVALID_TOPIC_EXCEPTION"],
        "tooManyReplicas": ["INVALID_REPLICATION_FACTOR"],
        "create": True,
        "again": False,  # KafkaJS's answer to TOPIC_ALREADY_EXISTS
        "fewerPartitions": ["INVALID_PARTITIONS"],
        "morePartitions": "ok",
        "badConfig": ["INVALID_CONFIG"],
        "acls": ["SECURITY_DISABLED"],
        "partitions": 3,
    }
