"""The source's own fetch-and-decode path returns what librdkafka's consumer sees.

Compressed batches of every codec, transactions committed and aborted between
plain records, headers, null keys and values, records larger than the fetch
size and LogAppendTime: the rows of ``read_range`` (and of a Spark read) are
exactly the records a confluent-kafka consumer with the same isolation level
reads, field by field.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from support.broker import BrokerProcess  # noqa: E402
from support.spark import reader  # noqa: E402

from dmq.spark.source import RangePartition, SourceConfig, read_range  # noqa: E402

Row = tuple[str, int, int, int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def _records(tag: str, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        r: dict[str, Any] = {"key": None if i % 5 == 0 else f"{tag}-k{i}".encode(),
                             "value": None if i % 7 == 3 else f"{tag}-v{i}-".encode() * (1 + i % 13),
                             "timestamp": 1_700_000_000_000 + i * 17}
        if i % 4:
            r["headers"] = [("n", f"{i}".encode()), ("null", None), ("é", b"")][: i % 4]
        if i == n - 1:
            r["value"] = b"L" * 20_000  # larger than a small fetch size (3-byte length varint)
        out.append(r)
    return out


@pytest.fixture(scope="module")
def topics(broker: BrokerProcess) -> dict[str, int]:
    """Topic name -> partitions, filled once for every test here."""
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    layout = {"cmp-codecs": 3, "cmp-txn": 2, "cmp-lat": 1}
    futures = a.create_topics([NewTopic("cmp-codecs", 3, 1), NewTopic("cmp-txn", 2, 1),
                               NewTopic("cmp-lat", 1, 1, config={"message.timestamp.type": "LogAppendTime"})])
    for f in futures.values():
        f.result(10)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20})
        for i, r in enumerate(_records(codec, 120)):
            p.produce("cmp-codecs", partition=i % 3, **r)
        assert p.flush(30) == 0
    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    tx = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "cmp-tx",
                   "compression.type": "lz4", "linger.ms": 5})
    tx.init_transactions(30)
    for round_, commit in enumerate([True, False, True, False, True]):
        tx.begin_transaction()
        for i, r in enumerate(_records(f"tx{round_}", 30)):
            tx.produce("cmp-txn", partition=i % 2, **r)
            if i % 10 == 0:
                plain.produce("cmp-txn", partition=i % 2, value=b"plain-%d-%d" % (round_, i))
                plain.flush(10)
        tx.flush(30)
        if commit:
            tx.commit_transaction(30)
        else:
            tx.abort_transaction(30)
    assert plain.flush(30) == 0
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "zstd"})
    for r in _records("lat", 50):
        p.produce("cmp-lat", **r)
    assert p.flush(30) == 0
    return layout


def librdkafka_rows(b: BrokerProcess, topic: str, partitions: int, isolation: str) -> tuple[list[Row], dict]:
    """Every record a confluent-kafka consumer reads, and the end offsets it sees."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "cmp", "isolation.level": isolation,
                  "enable.partition.eof": True, "enable.auto.commit": False})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[Row] = []
    at_end: set[int] = set()
    while len(at_end) < partitions:
        m: Any = c.poll(10)
        assert m is not None, "the consumer stalled"
        if m.error() is not None:
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            at_end.add(m.partition())
            continue
        ts_type, ts = m.timestamp()
        out.append((m.topic(), m.partition(), m.offset(), ts, ts_type - 1, m.key(), m.value(),
                    list(m.headers() or [])))
    c.close()
    return sorted(out, key=lambda r: (r[1], r[2])), ends


def source_rows(batches: list[Any]) -> list[Row]:
    out: list[Row] = []
    for rb in batches:
        d = rb.to_pydict()
        millis = [us // 1000 for us in rb.column("timestamp").cast("int64").to_pylist()]
        for i in range(rb.num_rows):
            out.append((d["topic"][i], d["partition"][i], d["offset"][i], millis[i], d["timestampType"][i],
                        d["key"][i], d["value"][i], [(h["key"], h["value"]) for h in d["headers"][i]]))
    return sorted(out, key=lambda r: (r[1], r[2]))


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
@pytest.mark.parametrize("topic", ["cmp-codecs", "cmp-txn", "cmp-lat"])
def test_read_range_returns_what_librdkafka_reads(broker: BrokerProcess, topics: dict[str, int], topic: str,
                                                  isolation: str) -> None:
    expected, ends = librdkafka_rows(broker, topic, topics[topic], isolation)
    assert expected
    for fetch_bytes in ("8388608", "1000"):  # the default, and less than a batch (whole ones come: KIP-74)
        cfg = SourceConfig({"bootstrap.servers": broker.bootstrap, "subscribe": topic, "includeHeaders": "true",
                            "kafka.isolation.level": isolation, "kafka.max.partition.fetch.bytes": fetch_bytes})
        got = source_rows([rb for p, end in ends.items()
                           for rb in read_range(cfg, RangePartition(topic, p, 0, end))])
        assert got == expected
    if topic == "cmp-txn":
        values = {r[6] for r in expected}
        assert (b"tx1-v0-" in values) == (isolation == "read_uncommitted")  # an aborted transaction
        assert b"tx0-v0-" in values and b"plain-1-10" in values


def test_a_spark_read_returns_what_librdkafka_reads(spark, broker: BrokerProcess,  # noqa: ANN001
                                                    topics: dict[str, int]) -> None:
    for topic, partitions in topics.items():
        expected, _ = librdkafka_rows(broker, topic, partitions, "read_committed")
        for extra in ({}, {"minPartitions": "7"}):  # ranges cut inside batches
            df = reader(spark, broker, topic, includeHeaders="true", **extra)
            got = sorted(((r.topic, r.partition, r.offset, round(r.timestamp.timestamp() * 1000), r.timestampType,
                           r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in df.collect()),
                         key=lambda r: (r[1], r[2]))
            assert got == expected, (topic, extra)
