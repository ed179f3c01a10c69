"""Delayed delivery in a ZooKeeper cluster (RF=3): records waiting for their time survive a
leader SIGKILL and are delivered once by the new leader, also while deliveries are under
way; the old leader, back, agrees."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from support.cluster import Cluster

from dmq.config import BrokerConfig, LogConfig
from dmq.record.records import decode_batch
from dmq.storage.log import Log


def now_ms() -> int:
    return int(time.time() * 1000)


def read_all(bootstrap: str, topic: str, expected: int, timeout: float) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "log_level": 0})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                out.append(m.value())
        end = time.monotonic() + 2  # nothing more: a duplicate would show up here
        while time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and not m.error():
                out.append(m.value())
    finally:
        c.close()
    return out


def test_pending_records_are_delivered_once_across_leader_failovers(cluster: Cluster) -> None:
    topic = "later"
    cluster.create_topic(topic, partitions=1, rf=3, config={"min.insync.replicas": "2"})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 10, "log_level": 0})
    start = now_ms()
    n = 600
    # Due from 4 s to 10 s after now: the first failover comes before any is due, the
    # second in the middle of the deliveries.
    for i in range(n):
        p.produce(topic, value=b"d%04d" % i,
                  headers=[("dmq-deliver-at", str(start + 4000 + i * 10).encode())])
    assert p.flush(30) == 0
    first = cluster.partition(topic).leader
    cluster.brokers[first].kill()
    cluster.wait_for(lambda: cluster.partition(topic).leader not in (-1, first), "a new leader")
    time.sleep(max(0.0, (start + 6500 - now_ms()) / 1000))  # deliveries under way
    second = cluster.partition(topic).leader
    cluster.brokers[second].kill()
    cluster.brokers[first].start(timeout=60)
    cluster.wait_for(lambda: cluster.partition(topic).leader not in (-1, second), "a third leader")
    cluster.brokers[second].start(timeout=60)
    got = read_all(cluster.reachable_bootstrap(), topic, n, 60)
    assert sorted(got) == [b"d%04d" % i for i in range(n)], (len(got), len(set(got)))
    cluster.wait_for(lambda: len(cluster.partition(topic).isrs) == 3, "every replica in sync", 60)
    # Every replica holds the same records, each once, and nothing pending any more.
    for b in cluster.brokers.values():
        b.stop()
    for b in cluster.brokers.values():
        lg = Log(str(b.data_dir / f"{topic}-0"), topic, 0, LogConfig(BrokerConfig()), clean_shutdown=True)
        try:
            values = [r.value for segment, pos, h in lg.batches_from(lg.log_start_offset)
                      if not h.is_control for r in decode_batch(segment.read_batch(pos, h))[1]]
            assert values == got, b.data_dir
            assert lg.delayed.pending == 0 and not lg.delayed.awaiting
        finally:
            lg.close()
