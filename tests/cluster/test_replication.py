"""Replication and failover on a real 3-broker cluster with Debian's ZooKeeper.

Every test drives the brokers with confluent-kafka and kills (SIGKILL) or
pauses (SIGSTOP) broker processes; the checks are on what clients can read.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from support.cluster import Cluster

from dmq.storage.log import read_partition_topic_id


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``topic`` as {partition: [(offset, value)]}, read from the beginning."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    count = 0
    deadline = time.monotonic() + timeout
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is None:
            if count >= expected and time.monotonic() - idle_since > 2:
                break
            continue
        if msg.error():
            continue
        idle_since = time.monotonic()
        out[msg.partition()].append((msg.offset(), msg.value()))
        count += 1
    c.close()
    return out


class BackgroundProducer:
    """acks=all idempotent producer writing "<partition>:<seq>" until stopped; records what was acked."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int = 400) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 120000,
                                  "topic.metadata.refresh.interval.ms": 1000, "log_level": 0})
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.acked: dict[int, list[int]] = defaultdict(list)
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        p, seq = msg.value().decode().split(":")
        self.acked[int(p)].append(int(seq))

    def _run(self) -> None:
        seq = 0
        while not self.stop.is_set() and seq < 200_000:
            p = seq % self.partitions
            try:
                self.producer.produce(self.topic, f"{p}:{seq}".encode(), partition=p,
                                      on_delivery=self._delivered)
                seq += 1
            except BufferError:
                pass
            self.producer.poll(0)
            time.sleep(1 / self.rate)
        self.sent = seq

    def start(self) -> BackgroundProducer:
        self.thread.start()
        return self

    def finish(self, timeout: float = 90) -> None:
        self.stop.set()
        self.thread.join(10)
        remaining = self.producer.flush(timeout)
        assert remaining == 0, f"{remaining} records still unacknowledged after {timeout}s"

    def close(self) -> None:
        """Stop without waiting for acknowledgements (the brokers may be gone): the records
        still queued are purged and their delivery callbacks served, which drops the
        librdkafka handle's references to this object. Left alone, a producer whose brokers
        were killed lived on in the test worker for the rest of the suite (its callbacks
        keep it alive), reconnecting and logging 'Connection refused' every second."""
        self.stop.set()
        self.thread.join(10)
        self.producer.purge()
        self.producer.poll(0)
        self.producer.flush(0)

    @property
    def total_acked(self) -> int:
        return sum(len(v) for v in self.acked.values())


def wait_acked_growth(prod: BackgroundProducer, more: int, timeout: float = 60) -> None:
    target = prod.total_acked + more
    deadline = time.monotonic() + timeout
    while prod.total_acked < target:
        assert time.monotonic() < deadline, f"producing stalled at {prod.total_acked} acked"
        time.sleep(0.1)


def check_exactly_once_in_order(cluster: Cluster, topic: str, partitions: int, prod: BackgroundProducer) -> None:
    got = consume_all(cluster.bootstrap, topic, partitions, prod.total_acked)
    for p in range(partitions):
        seqs = [int(v.decode().split(":")[1]) for _, v in got[p]]
        offsets = [o for o, _ in got[p]]
        assert offsets == sorted(offsets)
        assert len(seqs) == len(set(seqs)), f"partition {p} has duplicates"
        assert seqs == sorted(seqs), f"partition {p} is out of order"
        missing = set(prod.acked[p]) - set(seqs)
        assert not missing, f"partition {p} lost {len(missing)} acknowledged records, e.g. {sorted(missing)[:5]}"


def test_metadata_shows_replicas_isr_and_replicated_reads(cluster: Cluster) -> None:
    cluster.create_topic("basic", partitions=3, rf=3)
    md = cluster.metadata("basic")
    leaders = set()
    for p in md.topics["basic"].partitions.values():
        assert sorted(p.replicas) == [1, 2, 3]
        assert sorted(p.isrs) == [1, 2, 3]
        leaders.add(p.leader)
    assert leaders == {1, 2, 3}  # leadership is spread evenly
    assert md.controller_id in (1, 2, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(300):
        producer.produce("basic", str(i).encode(), partition=i % 3)
    assert producer.flush(30) == 0
    got = consume_all(cluster.bootstrap, "basic", 3, 300)
    assert sorted(int(v) for vals in got.values() for _, v in vals) == list(range(300))


def test_acks_all_survives_leader_kill_then_second_kill_then_return(cluster: Cluster) -> None:
    topic = "orders"
    cluster.create_topic(topic, partitions=3, rf=3, config={"min.insync.replicas": "2"})
    prod = BackgroundProducer(cluster.bootstrap, topic, 3).start()
    wait_acked_growth(prod, 500)
    first = cluster.partition(topic, 0).leader
    cluster.brokers[first].kill()
    cluster.wait_for(lambda: cluster.partition(topic, 0).leader not in (-1, first), "a new leader of partition 0")
    wait_acked_growth(prod, 500)
    second = next(b for b in cluster.brokers if b != first)
    cluster.brokers[second].kill()
    # One replica left with min.insync.replicas=2: acks=all produce must wait (NOT_ENOUGH_REPLICAS).
    time.sleep(3)
    stalled_at = prod.total_acked
    time.sleep(2)
    assert prod.total_acked - stalled_at < 50, "acks=all kept succeeding with one in-sync replica"
    cluster.brokers[first].start(timeout=60)
    cluster.brokers[second].start(timeout=60)
    wait_acked_growth(prod, 500, timeout=90)
    cluster.wait_for(lambda: all(len(p.isrs) == 3 for p in cluster.metadata(topic).topics[topic].partitions.values()),
                     "every replica back in the ISR", timeout=60)
    prod.finish()
    assert prod.total_acked >= 1500
    check_exactly_once_in_order(cluster, topic, 3, prod)


def test_controller_kill_elects_new_controller_that_handles_failures(cluster: Cluster) -> None:
    cluster.create_topic("ctl", partitions=3, rf=3)
    old = cluster.controller_id()
    cluster.brokers[old].kill()
    new = cluster.wait_for(lambda: (c := cluster.controller_id()) not in (-1, old) and c, "a new controller")
    # The new controller handles a broker failure: every partition led by the victim moves.
    victim = next(b for b in cluster.brokers if b not in (old, new))
    cluster.brokers[victim].kill()

    def all_led_by_survivor() -> bool:
        parts = cluster.metadata("ctl").topics["ctl"].partitions.values()
        return all(p.leader == new and p.isrs == [new] for p in parts)

    cluster.wait_for(all_led_by_survivor, "every partition led by the last live broker", timeout=40)
    producer = Producer({"bootstrap.servers": cluster.brokers[new].bootstrap, "acks": "all"})
    producer.produce("ctl", b"after", partition=0)
    assert producer.flush(20) == 0


def test_isr_shrinks_and_expands_and_min_isr_refuses(cluster: Cluster) -> None:
    topic = "isr"
    cluster.create_topic(topic, partitions=1, rf=3, config={"min.insync.replicas": "2"})
    leader = cluster.partition(topic).leader
    followers = [b for b in cluster.brokers if b != leader]
    cluster.pause(followers[0])
    try:
        cluster.wait_for(lambda: sorted(cluster.partition(topic).isrs) == sorted([leader, followers[1]]),
                         "the paused follower leaves the ISR", timeout=30)
        producer = Producer({"bootstrap.servers": cluster.reachable_bootstrap(), "acks": "all",
                             "message.timeout.ms": 20000})
        for i in range(50):
            producer.produce(topic, f"a{i}".encode(), partition=0)
        assert producer.flush(20) == 0  # ISR of 2 satisfies min.insync.replicas=2
    finally:
        cluster.resume(followers[0])
    cluster.wait_for(lambda: len(cluster.partition(topic).isrs) == 3, "the follower rejoins the ISR", timeout=30)
    # Two followers gone: the ISR shrinks to the leader and acks=all is refused.
    cluster.brokers[followers[0]].kill()
    cluster.brokers[followers[1]].kill()
    cluster.wait_for(lambda: cluster.partition(topic).isrs == [leader], "the ISR shrinks to the leader", timeout=30)
    errors: list[KafkaError] = []
    strict = Producer({"bootstrap.servers": cluster.brokers[leader].bootstrap, "acks": "all",
                       "message.timeout.ms": 3000, "retries": 0})
    strict.produce(topic, b"refused", partition=0, on_delivery=lambda err, msg: errors.append(err))
    strict.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, errors


def test_paused_leader_is_fenced_then_truncates_and_follows(cluster: Cluster) -> None:
    topic = "fence"
    cluster.create_topic(topic, partitions=1, rf=3)
    old_leader = cluster.partition(topic).leader
    others = [b for b in cluster.brokers if b != old_leader]
    good = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        good.produce(topic, f"good-{i}".encode(), partition=0)
    assert good.flush(20) == 0
    # Followers pause; the leader takes acks=1 records only it has, then pauses too.
    for b in others:
        cluster.pause(b)
    # A fetch the followers sent before the pause is still waiting at the leader for up to
    # replica.fetch.wait.max.ms; answered after the pause, it would sit in the stopped
    # follower's socket buffer and hand it the "divergent" records on resume. Let it expire.
    time.sleep(1.5)
    lonely = Producer({"bootstrap.servers": cluster.brokers[old_leader].bootstrap, "acks": 1})
    for i in range(10):
        lonely.produce(topic, f"divergent-{i}".encode(), partition=0)
    assert lonely.flush(10) == 0
    cluster.pause(old_leader)
    for b in others:
        cluster.resume(b)
    try:
        # The paused leader's ZooKeeper session expires; a follower from the ISR takes over.
        new_leader = cluster.wait_for(
            lambda: (p := cluster.partition(topic)).leader in others and p.leader, "a new leader", timeout=40)
        # A fresh client: the first one would wait request.timeout.ms on its request to the
        # paused broker before looking for the new leader (as with Kafka).
        after = Producer({"bootstrap.servers": ",".join(cluster.brokers[b].bootstrap for b in others),
                          "acks": "all"})
        for i in range(20, 40):
            after.produce(topic, f"good-{i}".encode(), partition=0)
        assert after.flush(30) == 0
    finally:
        cluster.resume(old_leader)
    # The old leader comes back as a follower, truncates its divergent tail and catches up.
    # (Asked of the others: until its expired session is noticed, it still has its old view.)
    cluster.wait_for(lambda: "truncating from" in cluster.brokers[old_leader].log_path.read_text(),
                     "the old leader truncating", timeout=40)
    cluster.wait_for(lambda: sorted(cluster.partition(topic, via=others).isrs) == [1, 2, 3],
                     "the old leader back in the ISR", timeout=40)
    assert cluster.partition(topic, via=others).leader == new_leader
    # Make the old leader lead again (the others die): it serves exactly the good records.
    for b in others:
        cluster.brokers[b].kill()
    cluster.wait_for(lambda: cluster.partition(topic).leader == old_leader, "the old leader leading again", timeout=40)
    got = consume_all(cluster.brokers[old_leader].bootstrap, topic, 1, 40)
    values = [v.decode() for _, v in got[0]]
    assert values == [f"good-{i}" for i in range(40)]
    assert [o for o, _ in got[0]] == list(range(40))


def test_consumer_group_survives_coordinator_failover(cluster: Cluster) -> None:
    topic, group = "gtopic", "failover-group"
    cluster.create_topic(topic, partitions=3, rf=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(600):
        producer.produce(topic, str(i).encode(), partition=i % 3)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    consumer.subscribe([topic])
    seen: list[int] = []

    def consume(n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        target = len(seen) + n
        while len(seen) < target and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            seen.append(int(msg.value()))
            try:
                consumer.commit(msg, asynchronous=False)
            except KafkaException:
                pass  # retried by the next commit
    consume(300, 60)
    assert len(seen) == 300
    committed_before = {tp.partition: tp.offset for tp in consumer.committed(
        [TopicPartition(topic, p) for p in range(3)], timeout=10)}
    admin = cluster.admin()
    desc = admin.describe_consumer_groups([group])[group].result(10)
    coordinator = desc.coordinator.id
    cluster.brokers[coordinator].kill()
    consume(300, 90)
    consumer.close()
    assert sorted(set(seen)) == list(range(600)), f"missing {sorted(set(range(600)) - set(seen))[:10]}"
    # Committed offsets survived: a fresh look at the group shows at least what was committed.
    survivors = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != coordinator)
    check = Consumer({"bootstrap.servers": survivors, "group.id": group})
    after = {tp.partition: tp.offset for tp in check.committed(
        [TopicPartition(topic, p) for p in range(3)], timeout=20)}
    check.close()
    assert all(after[p] >= committed_before[p] for p in range(3)), (committed_before, after)
    assert sum(after.values()) == 600
    # Redelivery after the failover is bounded: fewer duplicates than the 300 records
    # consumed (and committed one by one) before it.
    assert len(seen) - len(set(seen)) < 300


def test_zookeeper_restart_loses_no_cluster_state(cluster: Cluster) -> None:
    cluster.create_topic("zkr", partitions=3, rf=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("zkr", str(i).encode(), partition=i % 3)
    assert producer.flush(20) == 0
    before = cluster.metadata("zkr").topics["zkr"].partitions
    layout = {p: (m.leader, sorted(m.replicas), sorted(m.isrs)) for p, m in before.items()}
    cluster.zookeeper.stop()
    # Leaders keep serving while ZooKeeper is away.
    for i in range(100, 150):
        producer.produce("zkr", str(i).encode(), partition=i % 3)
    assert producer.flush(20) == 0
    cluster.zookeeper.start()
    time.sleep(2)
    cluster.wait_for(lambda: len(cluster.metadata().brokers) == 3 and cluster.controller_id() > 0,
                     "brokers registered and a controller after the restart", timeout=40)
    after = cluster.metadata("zkr").topics["zkr"].partitions
    assert {p: (sorted(m.replicas)) for p, m in after.items()} == {p: v[1] for p, v in layout.items()}
    cluster.wait_for(lambda: all(len(m.isrs) == 3 and m.leader >= 0
                                 for m in cluster.metadata("zkr").topics["zkr"].partitions.values()),
                     "all partitions led and in sync", timeout=40)
    for i in range(150, 200):
        producer.produce("zkr", str(i).encode(), partition=i % 3)
    assert producer.flush(30) == 0
    got = consume_all(cluster.bootstrap, "zkr", 3, 200)
    assert sorted(int(v) for vals in got.values() for _, v in vals) == list(range(200))


@pytest.mark.cluster_config(**{"zookeeper.session.timeout.ms": "15000"})
def test_a_replica_paused_while_its_topic_is_deleted_and_created_again_keeps_no_old_record(
        cluster: Cluster) -> None:
    """A follower paused (SIGSTOP) while its topic is deleted and created under the same
    name sees only the new topic id when it runs again. It used to keep the earlier
    topic's log as the new topic's replica: both started in leader epoch 0, so its
    truncation kept the old records below the new leader's log end (a replica that
    disagrees with its leader, and would serve the old records if elected). Now its
    reconcile replaces the log, and until then the leader refuses its fetches: the new
    topic's epochs start above the deleted one's."""
    victim = next(b for b in cluster.brokers if b != cluster.controller_id())
    others = [b for b in cluster.brokers if b != victim]
    cluster.create_topic("recycled", 1, 3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "log_level": 0})
    for i in range(5):
        p.produce("recycled", b"old-%d" % i)
    assert p.flush(30) == 0
    cluster.wait_for(lambda: len(cluster.partition("recycled").isrs) == 3, "the old topic in sync")
    old_id = read_partition_topic_id(str(cluster.brokers[victim].data_dir / "recycled-0"))
    assert old_id
    cluster.pause(victim)
    try:
        admin = cluster.admin(via=others)
        admin.delete_topics(["recycled"])["recycled"].result(30)
        cluster.wait_for(lambda: "recycled" not in cluster.metadata(via=others).topics, "the topic deleted")
        deadline = time.monotonic() + 10
        while True:  # the paused broker is still registered: the new topic has a replica there
            try:
                admin.create_topics([NewTopic("recycled", 1, 3)])["recycled"].result(30)
                break
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert victim in cluster.partition("recycled", via=others).replicas
        p = Producer({"bootstrap.servers": cluster.reachable_bootstrap(others), "acks": "1", "log_level": 0})
        for i in range(3):
            p.produce("recycled", b"new-%d" % i)
        assert p.flush(30) == 0
    finally:
        cluster.resume(victim)
    directory = cluster.brokers[victim].data_dir / "recycled-0"

    def held() -> bytes:
        return b"".join(f.read_bytes() for f in sorted(directory.glob("*.log")))

    # The follower's log is replaced by one of the new topic, which fetches the new records.
    cluster.wait_for(lambda: read_partition_topic_id(str(directory)) not in (None, old_id)
                     and held().count(b"new-") == 3, "the new topic's log on the follower", timeout=60)
    assert b"old-" not in held(), "the follower kept records of the deleted topic"
