"""Log compaction on a running broker, with real clients."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess
from test_durability import consume_values


def read_all(b: BrokerProcess, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "read", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        msgs = c.consume(1000, 0.5)
        if any(m.error() and m.error().code() == -191 for m in msgs):
            out += [(m.offset(), m.key(), m.value()) for m in msgs if not m.error()]
            break
        out += [(m.offset(), m.key(), m.value()) for m in msgs if not m.error()]
    c.close()
    return out


def test_compacted_topic_keeps_latest_and_drops_old_tombstones(fresh_broker: BrokerProcess) -> None:
    fresh_broker.overrides["log.cleaner.backoff.ms"] = "300"
    fresh_broker.start()
    a = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    a.create_topics([NewTopic("compacted", 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "4000", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "1500"})])["compacted"].result(10)
    p = Producer({"bootstrap.servers": fresh_broker.bootstrap, "linger.ms": 0, "acks": "all"})
    latest: dict[bytes, bytes | None] = {}
    for rnd in range(20):
        for k in range(10):
            key, value = b"user-%d" % k, b"state-%d-%d" % (k, rnd) + b"." * 50
            p.produce("compacted", value, key=key)
            latest[key] = value
        p.flush(10)
    p.produce("compacted", None, key=b"user-3")  # delete user-3
    latest[b"user-3"] = None
    p.flush(10)
    for i in range(60):  # push the above out of the active segment
        p.produce("compacted", b"x" * 100, key=b"filler")
        if i % 10 == 9:
            p.flush(10)  # batches that fit in a 4000-byte segment (a larger one is refused)
    deadline = time.monotonic() + 20
    records = read_all(fresh_broker, "compacted")
    while time.monotonic() < deadline and (len(records) > 30 or any(k == b"user-3" for _, k, _ in records)):
        time.sleep(0.5)
        records = read_all(fresh_broker, "compacted")
    assert "cleaned compacted-0" in fresh_broker.log_text()
    keyed = {}
    for _offset, key, value in records:
        if key != b"filler":
            assert key not in keyed, f"{key!r} appears twice after cleaning"
            keyed[key] = value
    # Latest value of every key; the tombstone is gone once older than delete.retention.ms.
    assert keyed == {k: v for k, v in latest.items() if v is not None}
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(offsets)
    # Producing and fetching went on; keyless records are refused on a compacted topic.
    errors: list = []
    p.produce("compacted", b"no key", on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == 87  # INVALID_RECORD


def test_consumer_offsets_are_compacted_and_survive_restart(fresh_broker: BrokerProcess) -> None:
    fresh_broker.overrides.update({"log.cleaner.backoff.ms": "300", "offsets.topic.num.partitions": "1",
                                   "offsets.topic.segment.bytes": "3000"})
    fresh_broker.start()
    a = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    a.create_topics([NewTopic("src", 2, 1)])["src"].result(10)
    c = Consumer({"bootstrap.servers": fresh_broker.bootstrap, "group.id": "many-commits"})
    for i in range(300):
        c.commit(offsets=[TopicPartition("src", 0, i), TopicPartition("src", 1, 2 * i)], asynchronous=False)
    c.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "cleaned __consumer_offsets-0" not in fresh_broker.log_text():
        time.sleep(0.3)
    assert "cleaned __consumer_offsets-0" in fresh_broker.log_text()
    fresh_broker.kill()
    fresh_broker.start()
    c = Consumer({"bootstrap.servers": fresh_broker.bootstrap, "group.id": "many-commits"})
    got = c.committed([TopicPartition("src", 0), TopicPartition("src", 1)], 10)
    c.close()
    assert [tp.offset for tp in got] == [299, 598]
    assert consume_values(fresh_broker.bootstrap, "src", 2) == {0: [], 1: []}
