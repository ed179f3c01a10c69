"""Share groups in a ZooKeeper cluster: confluent-kafka ShareConsumers keep consuming a
replicated topic while the leader of its partition, and then the leader of the
``__share_group_state`` partition holding that share-partition's state, are SIGKILLed.

Exact accounting, per record (topic-partition, offset): every acknowledged record's
outcome is taken from the consumers' acknowledgement commit callback, so the test knows
which ACCEPTs (and REJECTs: one record in fifty is always rejected, and the group has a
dead-letter topic) the broker confirmed. Then:

- nothing lost: every produced record is delivered, and in the end the group's
  share-partition start offsets (DescribeShareGroupOffsets) are at the end of both
  partitions with no lag: every record is done as far as the broker knows. (An ACCEPT
  whose answer never came, because its leader died after writing it, is done without
  the client hearing so; it is not delivered again.)
- nothing accepted redelivered: no record is delivered again after its ACCEPT (or REJECT)
  was confirmed (an acknowledgement whose answer was an error, or never came, may be
  delivered again: the client was not told it took).
- dead letters: every rejected record is in the dead-letter topic, at most once per
  REJECT it got (more than once only if its leader died between writing the dead letter
  and persisting the archiving).
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    Producer,
    ShareConsumer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kio.schema.errors import ErrorCode
from support.cluster import Cluster

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module
from dmq.share.records import partition_for

TOPIC, GROUP, DLQ = "orders", "order-workers", "orders.dead"
PARTITIONS = 2
RECORDS = 1500  # per partition
STATE_PARTITIONS = 3
LOCK_MS = 4000
pytestmark = pytest.mark.cluster_config(**{
    "share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS),
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.session.timeout.ms": "10000",
    "group.share.heartbeat.interval.ms": "1000",
    "min.insync.replicas": "2",
})


def rejected(value: bytes) -> bool:
    """The records every member REJECTs (each time it gets them): dead letters."""
    return int(value.decode().split("-")[1]) % 50 == 7


@dataclass
class Ledger:
    """What the consumers saw, in the order they saw it. ``accepted``: records whose
    acknowledgement (ACCEPT, or REJECT for the ``rejected`` ones) was confirmed."""
    produced: dict[tuple[int, int], bytes] = field(default_factory=dict)
    deliveries: dict[tuple[int, int], list[int]] = field(default_factory=lambda: defaultdict(list))
    accepted: dict[tuple[int, int], int] = field(default_factory=dict)  # -> event number of the confirmation
    redelivered_after_accept: list[tuple[int, int]] = field(default_factory=list)
    rejects_sent: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))
    failed_acks: int = 0
    events: int = 0

    def delivered(self, tp: tuple[int, int], value: bytes, count: int) -> None:
        self.events += 1
        assert self.produced.get(tp) == value, (tp, value, self.produced.get(tp))
        if tp in self.accepted:
            self.redelivered_after_accept.append(tp)
        self.deliveries[tp].append(count)
        if rejected(value):
            self.rejects_sent[tp] += 1

    def acknowledged(self, offsets: dict[Any, set[int]], error: Any) -> None:
        self.events += 1
        if error is not None:
            self.failed_acks += sum(len(v) for v in offsets.values())
            return
        for tp, done in offsets.items():
            for offset in done:
                self.accepted.setdefault((tp.partition, offset), self.events)


def produce(cluster: Cluster, ledger: Ledger) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 0})

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        ledger.produced[(msg.partition(), msg.offset())] = msg.value()

    for i in range(RECORDS * PARTITIONS):
        p.produce(TOPIC, value=f"order-{i}".encode(), partition=i % PARTITIONS, on_delivery=delivered)
        if i % 20 == 19:  # batches of 10 per partition: share consumers acquire whole batches
            assert p.flush(30) == 0
    assert p.flush(60) == 0
    assert len(ledger.produced) == RECORDS * PARTITIONS


def share_consumer(cluster: Cluster, ledger: Ledger) -> Any:
    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP,
                       "share.acknowledgement.mode": "explicit", "max.poll.records": 20,
                       "topic.metadata.refresh.interval.ms": 1000, "log_level": 0})
    c.set_acknowledgement_commit_callback(ledger.acknowledged)
    c.subscribe([TOPIC])
    return c


def poll_round(consumers: list[Any], ledger: Ledger) -> int:
    got = 0
    for c in consumers:
        for m in c.poll(0.2):
            if m.error() is not None:
                continue
            ledger.delivered((m.partition(), m.offset()), m.value(), m.delivery_count())
            c.acknowledge(m, AcknowledgeType.REJECT if rejected(m.value()) else AcknowledgeType.ACCEPT)
            got += 1
    return got


def delivered(ledger: Ledger, partition: int) -> int:
    return sum(1 for tp in ledger.deliveries if tp[0] == partition)


def consume_until(consumers: list[Any], ledger: Ledger, done: Callable[[], bool], seconds: float,
                  what: str) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, (
            f"{what}: not done after {seconds}s ({len(ledger.accepted)} accepted, "
            f"{ledger.failed_acks} acknowledgements failed; delivered per partition "
            f"{ {p: delivered(ledger, p) for p in range(PARTITIONS)} })")
        poll_round(consumers, ledger)


def share_offsets(cluster: Cluster) -> dict[int, tuple[int, int]]:
    """{partition: (start offset, lag)} of the group on ``TOPIC``, from its coordinator
    (DescribeShareGroupOffsets v1)."""
    for b in cluster.brokers.values():
        if not b.alive():
            continue
        try:
            with WireClient("127.0.0.1", b.port, timeout=5) as c:
                (found,) = c.request(make(request_class(10, 4), key_type=0, coordinator_keys=(GROUP,))).coordinators
                if found.error_code != ErrorCode.none:
                    continue
            with WireClient(found.host, found.port, timeout=5) as c:
                mod = request_module(90, 1)
                (g,) = c.request(make(request_class(90, 1), groups=(
                    make(mod.DescribeShareGroupOffsetsRequestGroup, group_id=GROUP, topics=None),))).groups
            if g.error_code == ErrorCode.none:
                return {p.partition_index: (p.start_offset, p.lag) for t in g.topics for p in t.partitions
                        if t.topic_name == TOPIC}
        except (OSError, EOFError, ValueError):
            continue
    return {}


def read_all(cluster: Cluster, topic: str) -> list[Any]:
    """Every record of ``topic``, read from the beginning (until 2 s pass without one)."""
    partitions = cluster.metadata(topic).topics[topic].partitions
    c = Consumer({"bootstrap.servers": cluster.reachable_bootstrap(), "group.id": f"read-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: list[Any] = []
    quiet_since = deadline = time.monotonic()
    deadline += 30
    try:
        while time.monotonic() < deadline and time.monotonic() - quiet_since < 2:
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                out.append(m)
                quiet_since = time.monotonic()
    finally:
        c.close()
    return out


def leader(cluster: Cluster, topic: str, index: int) -> int:
    return int(cluster.partition(topic, index).leader)


def topic_uuid(cluster: Cluster, topic: str) -> uuid.UUID:
    admin = cluster.admin()
    tid = admin.describe_topics(TopicCollection([topic]))[topic].result(10).topic_id
    return uuid.UUID(int=((tid.get_most_significant_bits() & (2**64 - 1)) << 64)
                     | (tid.get_least_significant_bits() & (2**64 - 1)))


def in_sync(cluster: Cluster, topic: str, partitions: list[int]) -> bool:
    meta = cluster.metadata(topic).topics.get(topic)
    return meta is not None and meta.error is None and all(
        p in meta.partitions and meta.partitions[p].leader >= 0 and len(meta.partitions[p].isrs) == 3
        for p in partitions)


def test_share_consumers_lose_nothing_and_redeliver_nothing_accepted_across_leader_failovers(
        cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, partitions=PARTITIONS, rf=3)
    admin = cluster.admin()
    dlq = ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[ConfigEntry(
        "share.dead.letter.topic", DLQ, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([dlq])[dlq].result(10)
    ledger = Ledger()
    consumers = [share_consumer(cluster, ledger) for _ in range(3)]
    try:
        # share.auto.offset.reset is latest: the members fetch once before anything is
        # produced, so that the share-partitions start at offset 0.
        deadline = time.monotonic() + 60
        topic_id = topic_uuid(cluster, TOPIC)
        state_index = partition_for(GROUP, topic_id, 0, STATE_PARTITIONS)
        while not in_sync(cluster, "__share_group_state", [state_index]):
            assert time.monotonic() < deadline, "the share group never started"
            assert poll_round(consumers, ledger) == 0
        for _ in range(10):
            assert poll_round(consumers, ledger) == 0
        produce(cluster, ledger)
        total = RECORDS * PARTITIONS

        consume_until(consumers, ledger, lambda: delivered(ledger, 0) >= RECORDS // 4, 90, "before the first kill")
        data_leader = leader(cluster, TOPIC, 0)
        cluster.brokers[data_leader].kill()  # the leader of orders-0, its share-partition's host
        consume_until(consumers, ledger, lambda: delivered(ledger, 0) >= RECORDS // 2, 120,
                      f"after killing broker {data_leader}")
        cluster.brokers[data_leader].start(timeout=60)
        cluster.wait_for(lambda: in_sync(cluster, TOPIC, list(range(PARTITIONS)))
                         and in_sync(cluster, "__share_group_state", list(range(STATE_PARTITIONS))),
                         f"broker {data_leader} back in sync", timeout=60)
        state_leader = leader(cluster, "__share_group_state", state_index)
        cluster.brokers[state_leader].kill()  # orders-0's share state moves to another broker
        consume_until(consumers, ledger, lambda: delivered(ledger, 0) >= 3 * RECORDS // 4, 120,
                      f"after killing broker {state_leader}")
        cluster.brokers[state_leader].start(timeout=60)
        # The end: every record delivered, and the group's start offsets at the end of both
        # partitions with no lag (every record acknowledged as far as the broker knows,
        # including those whose acknowledgement's answer a dead leader never sent).
        done = {p: (RECORDS, 0) for p in range(PARTITIONS)}
        consume_until(consumers, ledger, lambda: len(ledger.deliveries) == total and share_offsets(cluster) == done,
                      120, "to the end")
        for _ in range(10):  # anything delivered again now would be a redelivery of an accepted record
            poll_round(consumers, ledger)
        for c in consumers:
            c.commit_sync(10)
    finally:
        for c in consumers:
            c.close()

    lost = set(ledger.produced) - set(ledger.deliveries)
    assert not lost, f"{len(lost)} records never delivered, e.g. {sorted(lost)[:5]}"
    assert not ledger.redelivered_after_accept, (
        f"{len(ledger.redelivered_after_accept)} accepted records delivered again, "
        f"e.g. {ledger.redelivered_after_accept[:5]}")
    # Dead letters: every rejected record has one, and never more than it was rejected
    # (a second one only for a REJECT whose leader died between its dead letter and its
    # archiving: the record came back and was rejected again).
    letters = read_all(cluster, DLQ)
    written: dict[tuple[int, int], int] = defaultdict(int)
    for m in letters:
        h = {k: v.decode() for k, v in m.headers() if k.startswith("dmq.dlq.")}
        assert (h["dmq.dlq.reason"], h["dmq.dlq.topic"], h["dmq.dlq.group"]) == ("rejected", TOPIC, GROUP)
        tp = (int(h["dmq.dlq.partition"]), int(h["dmq.dlq.offset"]))
        assert ledger.produced[tp] == m.value()
        written[tp] += 1
    assert set(written) == {tp for tp, v in ledger.produced.items() if rejected(v)}
    assert all(n <= ledger.rejects_sent[tp] for tp, n in written.items()), \
        {tp: (n, ledger.rejects_sent[tp]) for tp, n in written.items() if n > ledger.rejects_sent[tp]}
    again = {tp: counts for tp, counts in ledger.deliveries.items() if len(counts) > 1}
    # Redelivery happens only around the two failovers (records held or acknowledged
    # without an answer when a leader died), never wholesale.
    assert len(again) < RECORDS, f"{len(again)} records delivered more than once"
