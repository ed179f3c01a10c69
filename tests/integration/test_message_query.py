"""Message query (QueryRecords, dmq's extension 10001) against a real broker, with
records from real producers — confluent-kafka with every codec and transactions,
and kcat — checked against a brute-force scan by a confluent-kafka consumer: by
key, by time range, by offset; after the index has caught up, before it has, and
after restarts, clean and SIGKILL; bad input answered with Kafka's errors."""

from __future__ import annotations

import heapq
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from support.broker import BrokerProcess
from support.query import consume_everything

from dmq.client.query import QueryError, QueryResult, query_records
from dmq.client.wire import WireClient
from dmq.handlers import query_records as handler
from dmq.handlers import supported_apis
from dmq.protocol.extensions import (
    QUERY_RECORDS_KEY,
    QueryPartition,
    QueryRecordsRequest,
    QueryTopic,
)

PARTITIONS = 3
KEYS = [b"order-%d" % i for i in range(40)] + [b"", "ключ".encode(), b"\x00\xff"]
T0 = 1_790_000_000_000  # record timestamps, in order, one ms apart


def create(broker: BrokerProcess, topic: str, partitions: int = PARTITIONS, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(15)


def fill(broker: BrokerProcess, topic: str) -> None:
    """Keyed records from confluent-kafka (each codec, headers, null values and keys), a
    committed and an aborted transaction, and kcat."""
    n = 0
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20,
                      "batch.num.messages": 200, "batch.size": 5000,  # a batch fits in a 6000-byte segment
                      "log_level": 0})
        for _ in range(600):
            key = KEYS[n % len(KEYS)] if n % 97 else None
            value = b'{"n": %d, "codec": "%s"}' % (n, codec.encode()) if n % 53 else None
            p.produce(topic, key=key, value=value, headers=[("n", b"%d" % n)], timestamp=T0 + n)
            n += 1
        assert p.flush(30) == 0
    t = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"txn-{topic}", "log_level": 0,
                  "compression.type": "lz4", "batch.size": 5000})
    t.init_transactions(30)
    for commit in (True, False, True):
        t.begin_transaction()
        for _ in range(100):
            t.produce(topic, key=KEYS[n % 7], value=b"txn-%d-%s" % (n, b"c" if commit else b"a"), timestamp=T0 + n)
            n += 1
        if commit:
            t.commit_transaction(30)
        else:
            assert t.flush(30) == 0  # on the broker, then aborted
            t.abort_transaction(30)
    if shutil.which("kcat"):
        lines = b"".join(b"%s:kcat %d\n" % (KEYS[i % 5], i) for i in range(200))
        subprocess.run(["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-K:", "-z", "zstd"], input=lines,
                       check=True, timeout=60)


def by_key(records: list, key: bytes) -> list[tuple[int, int, bytes | None]]:  # type: ignore[type-arg]
    return [(r[0], r[1], r[4]) for r in records if r[3] == key]


def newest_first(found: QueryResult) -> list[tuple[int, int, bytes | None]]:
    return [(r.partition, r.offset, r.value) for r in found.records]


def expected_newest_first(scan: list, key: bytes) -> list[tuple[int, int, bytes | None]]:  # type: ignore[type-arg]
    """Each partition's records with the key, newest offset first, partitions interleaved
    by timestamp (lower partitions first at equal timestamps)."""
    by_partition: dict[int, list] = {}  # type: ignore[type-arg]
    for r in scan:
        if r[3] == key:
            by_partition.setdefault(r[0], []).append(r)
    lists = [sorted(rows, key=lambda r: r[1], reverse=True) for _, rows in sorted(by_partition.items())]
    merged = heapq.merge(*lists, key=lambda r: (r[2], -r[0]), reverse=True)
    return [(r[0], r[1], r[4]) for r in merged]


def wait_indexed(bootstrap: str, topic: str, timeout: float = 90.0) -> None:
    """Until a key query reads no log byte without an index (the indexer has caught up)."""
    deadline = time.monotonic() + timeout
    while query_records(bootstrap, topic, key=b"order-1", max_records=1).unindexed_bytes:
        assert time.monotonic() < deadline, "the key indexer did not catch up"
        time.sleep(0.3)


@pytest.fixture
def filled(fresh_broker: BrokerProcess) -> Iterator[BrokerProcess]:
    fresh_broker.overrides["log.segment.bytes"] = "6000"  # several segments per partition
    fresh_broker.start()
    create(fresh_broker, "orders")
    fill(fresh_broker, "orders")
    yield fresh_broker


def test_key_queries_match_a_consumer_scan(filled: BrokerProcess) -> None:
    committed = consume_everything(filled.bootstrap, "orders", PARTITIONS, "read_committed")
    everything = consume_everything(filled.bootstrap, "orders", PARTITIONS, "read_uncommitted")
    assert len(everything) > len(committed) > 3000
    for key in KEYS:  # right away, whatever the indexer has done so far
        found = query_records(filled.bootstrap, "orders", key=key, max_records=10_000)
        assert newest_first(found) == expected_newest_first(committed, key), key
        assert not found.more
    wait_indexed(filled.bootstrap, "orders")
    sealed = [s for d in filled.data_dir.glob("orders-*") for s in sorted(d.glob("*.log"))[:-1]]
    assert len(sealed) >= PARTITIONS
    deadline = time.monotonic() + 60
    while not all(s.with_suffix(".keyindex").exists() for s in sealed):
        assert time.monotonic() < deadline, "sealed segments get key index files"
        time.sleep(0.3)
    for key in KEYS:
        found = query_records(filled.bootstrap, "orders", key=key, max_records=10_000)
        assert newest_first(found) == expected_newest_first(committed, key), key
        assert found.unindexed_bytes == 0
        uncommitted = query_records(filled.bootstrap, "orders", key=key, max_records=10_000, read_committed=False)
        assert newest_first(uncommitted) == expected_newest_first(everything, key), key
        aborted = {(r.partition, r.offset) for r in uncommitted.records if r.aborted}
        assert {(r.partition, r.offset) for r in uncommitted.records if r.value and r.value.endswith(b"-a")} \
            == aborted
    # One partition; the newest few, with paging across requests.
    home = next(r[0] for r in committed if r[3] == KEYS[3])
    one = query_records(filled.bootstrap, "orders", key=KEYS[3], partition=home, max_records=5)
    assert newest_first(one) == [r for r in expected_newest_first(committed, KEYS[3]) if r[0] == home][:5]
    assert one.more and len(one.records) == 5
    record = next(r for r in query_records(filled.bootstrap, "orders", key=KEYS[3], max_records=1000).records
                  if r.value and r.value.startswith(b"{"))
    assert record.headers[0][0] == "n" and record.timestamp >= T0


def test_time_and_offset_queries_match_a_consumer_scan(filled: BrokerProcess) -> None:
    committed = consume_everything(filled.bootstrap, "orders", PARTITIONS, "read_committed")
    start, end = T0 + 700, T0 + 2300
    found = query_records(filled.bootstrap, "orders", start_timestamp=start, end_timestamp=end, max_records=10_000)
    want = list(heapq.merge(*([r for r in committed if r[0] == p and start <= r[2] < end] for p in range(PARTITIONS)),
                            key=lambda r: (r[2], r[0])))
    assert [(r.partition, r.offset) for r in found.records] == [(r[0], r[1]) for r in want]
    found = query_records(filled.bootstrap, "orders", key=KEYS[2], start_timestamp=start, end_timestamp=end,
                          max_records=10_000)
    assert newest_first(found) == [r for r in expected_newest_first(committed, KEYS[2]) if r in
                                   {(x[0], x[1], x[4]) for x in want}]
    at = query_records(filled.bootstrap, "orders", partition=2, start_offset=100, max_records=7)
    assert [(r.partition, r.offset, r.value) for r in at.records] == \
        [(r[0], r[1], r[4]) for r in committed if r[0] == 2 and r[1] >= 100][:7]
    assert at.more
    assert query_records(filled.bootstrap, "orders", start_timestamp=T0 + 10**12, max_records=5).records == []


def test_restarts_rebuild_or_reuse_the_index(filled: BrokerProcess) -> None:
    committed = consume_everything(filled.bootstrap, "orders", PARTITIONS, "read_committed")
    wait_indexed(filled.bootstrap, "orders")
    filled.stop()
    files = sorted(str(p) for p in filled.data_dir.glob("orders-*/*.keyindex"))
    assert files
    os.unlink(files[0])  # lost: rebuilt
    with open(files[-1], "r+b") as f:  # corrupt: found by its CRC, rebuilt
        f.seek(80)
        f.write(b"\xff\xff")
    filled.start()
    for key in KEYS[:10]:
        assert newest_first(query_records(filled.bootstrap, "orders", key=key, max_records=10_000)) == \
            expected_newest_first(committed, key)
    wait_indexed(filled.bootstrap, "orders")
    deadline = time.monotonic() + 60
    while sorted(str(p) for p in filled.data_dir.glob("orders-*/*.keyindex")) != files:
        assert time.monotonic() < deadline, "the lost key index file was not written again"
        time.sleep(0.3)
    filled.kill()  # SIGKILL: unclean, the active segments are recovered
    filled.start()
    for key in KEYS[:10]:
        assert newest_first(query_records(filled.bootstrap, "orders", key=key, max_records=10_000)) == \
            expected_newest_first(committed, key)


def ask(broker: BrokerProcess, **fields: object) -> object:
    defaults: dict[str, object] = {"max_records": 10, "max_bytes": 1 << 20, "topics": ()}
    with WireClient("127.0.0.1", broker.port) as c:
        return c.request(QueryRecordsRequest(**{**defaults, **fields}))  # type: ignore[arg-type]


def topics(name: str, *partitions: QueryPartition) -> tuple[QueryTopic, ...]:
    return (QueryTopic(name=name, partitions=partitions),)


def test_errors_and_bounds(broker: BrokerProcess, topic_name: str) -> None:
    assert QUERY_RECORDS_KEY not in supported_apis()  # dmq's own: not in ApiVersions
    create(broker, topic_name, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for i in range(300):
        p.produce(topic_name, key=b"k", value=b"x" * 100, timestamp=T0 + i)
    p.flush(30)
    for bad in ({"max_records": 0}, {"max_bytes": -1}, {"isolation_level": 3}, {"start_timestamp": -5},
                {"start_timestamp": 10, "end_timestamp": 5},
                {"topics": topics(topic_name, QueryPartition(partition_index=0, start_offset=9, end_offset=3))}):
        resp = ask(broker, key=b"k", **bad)
        assert resp.error_code == ErrorCode.invalid_request and resp.error_message and not resp.topics, bad  # type: ignore[attr-defined]
    resp = ask(broker, key=b"k", topics=topics("no-such-topic", QueryPartition(partition_index=0)) +
               topics(topic_name, QueryPartition(partition_index=5)))
    assert [t.partitions[0].error_code for t in resp.topics] == [ErrorCode.unknown_topic_or_partition] * 2  # type: ignore[attr-defined]
    resp = ask(broker, topics=topics(topic_name, QueryPartition(partition_index=0, start_offset=301)))
    part = resp.topics[0].partitions[0]  # type: ignore[attr-defined]
    assert part.error_code == ErrorCode.offset_out_of_range and "[0, 300)" in part.error_message
    # Bounded: the broker's own cap on records, at least one record past max_bytes.
    resp = ask(broker, key=b"k", max_records=10**6, topics=topics(topic_name, QueryPartition(partition_index=0)))
    part = resp.topics[0].partitions[0]  # type: ignore[attr-defined]
    assert len(part.records) == 300 and part.resume_offset == -1
    assert handler.MAX_RECORDS < 10**6
    resp = ask(broker, key=b"k", max_bytes=1, topics=topics(topic_name, QueryPartition(partition_index=0)))
    part = resp.topics[0].partitions[0]  # type: ignore[attr-defined]
    assert [r.offset for r in part.records] == [299] and part.resume_offset == 299
    # The broker stays up and answers.
    assert len(query_records(broker.bootstrap, topic_name, key=b"k", max_records=1000).records) == 300
    with pytest.raises(QueryError, match="topic nope does not exist"):
        query_records(broker.bootstrap, "nope", key=b"k")
    with pytest.raises(QueryError, match=r"has no partition 4 \(it has 1\)"):
        query_records(broker.bootstrap, topic_name, key=b"k", partition=4)


def test_a_request_reads_a_bounded_number_of_bytes(fresh_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """With the key index off, a key query over more log than one request may read is
    answered in pieces (resume_offset), and the client puts them together."""
    fresh_broker.overrides["log.key.index.enable"] = "false"
    fresh_broker.start()
    create(fresh_broker, "big", 1)
    p = Producer({"bootstrap.servers": fresh_broker.bootstrap, "linger.ms": 50, "log_level": 0})
    for i in range(60_000):
        p.produce("big", key=b"needle" if i % 10_000 == 0 else b"hay", value=os.urandom(1200))
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    with WireClient("127.0.0.1", fresh_broker.port, timeout=60) as c:
        resp = c.request(QueryRecordsRequest(key=b"needle", max_records=100, max_bytes=1 << 20,
                                             topics=topics("big", QueryPartition(partition_index=0))))
    part = resp.topics[0].partitions[0]
    assert part.resume_offset > 0 and part.unindexed_bytes >= handler.READ_BUDGET
    found = query_records(fresh_broker.bootstrap, "big", key=b"needle", max_records=100, timeout=60)
    assert [r.offset for r in found.records] == [50_000, 40_000, 30_000, 20_000, 10_000, 0]
    assert found.requests > 1


def test_the_wire_round_trip_of_every_field(broker: BrokerProcess, topic_name: str) -> None:
    create(broker, topic_name, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    p.produce(topic_name, key=b"\x00k", value=None, headers=[("a", b"1"), ("b", None), ("", b"")], timestamp=T0)
    p.flush(10)
    r = query_records(broker.bootstrap, topic_name, key=b"\x00k").records
    assert [(x.offset, x.timestamp, x.key, x.value, x.headers, x.aborted) for x in r] == [
        (0, T0, b"\x00k", None, (("a", b"1"), ("b", None), ("", b"")), False)]
    assert timedelta(0) == ask(broker, topics=()).throttle_time  # type: ignore[attr-defined]


def test_a_delayed_record_is_found_once_delivered(broker: BrokerProcess, topic_name: str) -> None:
    """While it waits a delayed record is in a control batch that consumers and queries
    skip; once delivered it is found at the offset of its delivery."""
    create(broker, topic_name, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    p.produce(topic_name, key=b"late", value=b"v", headers=[("dmq-delay-ms", b"1500")])
    p.produce(topic_name, key=b"late", value=b"now")
    assert p.flush(10) == 0
    assert [r.value for r in query_records(broker.bootstrap, topic_name, key=b"late").records] == [b"now"]
    deadline = time.monotonic() + 30
    while len(found := query_records(broker.bootstrap, topic_name, key=b"late").records) < 2:
        assert time.monotonic() < deadline, "the delayed record was not delivered"
        time.sleep(0.2)
    assert [r.value for r in found] == [b"v", b"now"] and found[0].offset > found[1].offset


def test_a_delivered_delayed_record_is_found_by_key_not_by_its_time(broker: BrokerProcess) -> None:
    """docs/message-query.md: it keeps its CreateTime and gets an offset after the records
    produced while it waited, so a time range holding its timestamp ends before it."""
    topic = "delayed-query"
    create(broker, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    t = int(time.time() * 1000)
    p.produce(topic, key=b"late", value=b"x", timestamp=t, headers=[("dmq-deliver-at", str(t + 1500).encode())])
    p.flush(10)
    for i in range(3):
        p.produce(topic, key=b"other-%d" % i, value=b"y", timestamp=t + 100 + i)
        p.flush(10)
    deadline = time.monotonic() + 20
    while not query_records(broker.bootstrap, topic, key=b"late").records and time.monotonic() < deadline:
        time.sleep(0.2)
    (found,) = query_records(broker.bootstrap, topic, key=b"late").records
    assert found.timestamp == t and found.offset > 3  # its CreateTime, an offset after the others
    window = query_records(broker.bootstrap, topic, start_timestamp=t, end_timestamp=t + 50).records
    assert [r.key for r in window] == []  # its timestamp is in the range, it is not returned
