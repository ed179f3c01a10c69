"""kafka-python against a real dmq server."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import TopicAlreadyExistsError
from support.broker import BrokerProcess


def consume(broker: BrokerProcess, topic: str, expected: int, partitions: int = 1) -> list:
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                      enable_auto_commit=False, fetch_max_wait_ms=100)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    out: list = []
    deadline = time.monotonic() + 30
    while len(out) < expected and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=500).values():
            out.extend(records)
    c.close()
    return out


@pytest.mark.parametrize("compression", [None, "gzip", "lz4", "snappy", "zstd"])
def test_produce_consume(broker: BrokerProcess, topic_name: str, compression: str | None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic_name, 2, 1)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=compression, acks="all",
                      linger_ms=5)
    futures = [
        p.send(topic_name, value=None if i % 9 == 0 else b"v%d" % i, key=b"k%d" % i,
               headers=[("n", b"%d" % i)], partition=i % 2)
        for i in range(300)
    ]
    p.flush(30)
    metas = [f.get(10) for f in futures]
    p.close()
    assert {m.partition for m in metas} == {0, 1}
    got = consume(broker, topic_name, 300, partitions=2)
    assert len(got) == 300
    assert {(r.key, r.value, tuple(r.headers)) for r in got} == {
        (b"k%d" % i, None if i % 9 == 0 else b"v%d" % i, (("n", b"%d" % i),)) for i in range(300)
    }


def test_idempotent_producer(broker: BrokerProcess, topic_name: str) -> None:
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all")
    for i in range(100):
        p.send(topic_name, b"%d" % i)
    p.flush(30)
    p.close()
    got = consume(broker, topic_name, 100)
    assert [r.value for r in got] == [b"%d" % i for i in range(100)]
    assert [r.offset for r in got] == list(range(100))


def test_admin(broker: BrokerProcess, topic_name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic_name, 1, 1, topic_configs={"segment.bytes": "100000"})])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic_name, 1, 1)])
    assert topic_name in admin.list_topics()
    admin.create_partitions({topic_name: NewPartitions(3)})
    (desc,) = admin.describe_topics([topic_name])
    assert len(desc["partitions"]) == 3
    res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name)])
    entry = res["topic"][topic_name]["segment.bytes"]
    assert entry["value"] == "100000" and entry["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    cluster = admin.describe_cluster()
    assert cluster["controller_id"] == 0
    admin.delete_topics([topic_name])
    assert topic_name not in admin.list_topics()
    admin.close()


def test_offsets_for_times(broker: BrokerProcess, topic_name: str) -> None:
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
    for i in range(20):
        p.send(topic_name, b"x", timestamp_ms=1_000_000 + i * 1000)
    p.flush(10)
    p.close()
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    tp = TopicPartition(topic_name, 0)
    res = c.offsets_for_times({tp: 1_000_000 + 4500})
    assert res[tp].offset == 5 and res[tp].timestamp == 1_005_000
    assert c.beginning_offsets([tp])[tp] == 0
    assert c.end_offsets([tp])[tp] == 20
    c.close()
