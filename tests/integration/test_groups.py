"""Consumer groups with real clients against a real dmq server."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess

SCRIPT = Path(__file__).parent.parent / "support" / "group_consumer.py"


def create(b: BrokerProcess, topic: str, partitions: int) -> None:
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def produce(b: BrokerProcess, topic: str, values: list[str]) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "acks": "all"})
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), key=b"%d" % i)
    assert p.flush(30) == 0


class Member:
    def __init__(self, b: BrokerProcess, group: str, topic: str, out: Path, *extra: str) -> None:
        self.out = out
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT), b.bootstrap, group, topic, str(out), *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def values(self) -> list[str]:
        if not self.out.exists():
            return []
        return [line.split(" ", 2)[2] for line in self.out.read_text().splitlines() if line.count(" ") >= 2]

    def assigned(self) -> list[int]:
        path = Path(str(self.out) + ".assign")
        current: set[int] = set()
        if path.exists():
            for line in path.read_text().splitlines():
                kind, *parts = line.split()
                if kind == "assign":
                    current |= {int(p) for p in parts}
                else:
                    current -= {int(p) for p in parts}
        return sorted(current)

    def stop(self) -> None:
        Path(str(self.out) + ".stop").touch()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def kafka_default_broker(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """A broker with Kafka's default group.initial.rebalance.delay.ms (3 s).

    kafka-python 3.0 leaders can stall after a rebalance they start themselves
    because their first assignment predates their topic metadata; with the
    default delay every member joins one generation, as against Kafka.
    """
    proc = BrokerProcess(tmp_path_factory.mktemp("default") / "data").start()
    yield proc
    proc.close()


def wait_for(cond, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_three_members_share_then_survive_a_sigkill(broker: BrokerProcess, tmp_path: Path) -> None:
    topic, group = "grp-kill", "g-kill"
    create(broker, topic, 6)
    members = [Member(broker, group, topic, tmp_path / f"m{i}.txt") for i in range(3)]
    try:
        wait_for(lambda: sorted(p for m in members for p in m.assigned()) == list(range(6))
                 and all(len(m.assigned()) == 2 for m in members), 30, "6 partitions over 3 members")
        first = [f"a-{i:05d}" for i in range(3000)]
        produce(broker, topic, first)
        wait_for(lambda: len({v for m in members for v in m.values()}) >= 3000, 30, "first batch consumed")
        seen = Counter(v for m in members for v in m.values())
        assert set(seen) == set(first)
        assert max(seen.values()) == 1, "a record went to two members of one group"
        assert all(m.values() for m in members), "every member consumed a share"
        members[0].kill()
        second = [f"b-{i:05d}" for i in range(3000)]
        produce(broker, topic, second)
        survivors = members[1:]
        wait_for(lambda: sorted(p for m in survivors for p in m.assigned()) == list(range(6)), 30,
                 "survivors take over the killed member's partitions")
        wait_for(lambda: set(second) <= {v for m in survivors for v in m.values()}, 30, "second batch consumed")
        everything = Counter(v for m in members for v in m.values())
        assert set(first + second) <= set(everything), "records lost"
        killed = set(members[0].values())
        dups = [v for v, n in everything.items() if n > 1]
        assert all(v in killed for v in dups), "duplicates only from the killed member's uncommitted work"
    finally:
        for m in members[1:]:
            m.stop()


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_two_groups_each_get_everything(broker: BrokerProcess, tmp_path: Path, strategy: str) -> None:
    topic = f"grp-pubsub-{strategy}"
    create(broker, topic, 3)
    values = [f"v{i}" for i in range(500)]
    produce(broker, topic, values)
    extra = ("--strategy", strategy)
    a = Member(broker, f"g-one-{strategy}", topic, tmp_path / "one.txt", *extra)
    b1 = Member(broker, f"g-two-{strategy}", topic, tmp_path / "two-1.txt", *extra)
    b2 = Member(broker, f"g-two-{strategy}", topic, tmp_path / "two-2.txt", *extra)
    try:
        wait_for(lambda: len(a.values()) >= 500, 30, "group one consumed all")
        wait_for(lambda: len(set(b1.values()) | set(b2.values())) >= 500, 30, "group two consumed all")
        assert sorted(a.values()) == sorted(values)
        assert sorted(b1.values() + b2.values()) == sorted(values)
        wait_for(lambda: sorted(b1.assigned() + b2.assigned()) == [0, 1, 2]
                 and bool(b1.assigned()) and bool(b2.assigned()), 30, "group two splits the partitions")
    finally:
        for m in (a, b1, b2):
            m.stop()


def test_cooperative_sticky_incremental_rebalance(broker: BrokerProcess, tmp_path: Path) -> None:
    topic, group = "grp-coop", "g-coop"
    create(broker, topic, 4)
    first = Member(broker, group, topic, tmp_path / "c1.txt", "--strategy", "cooperative-sticky")
    try:
        wait_for(lambda: first.assigned() == [0, 1, 2, 3], 30, "first member owns all partitions")
        second = Member(broker, group, topic, tmp_path / "c2.txt", "--strategy", "cooperative-sticky")
        wait_for(lambda: len(first.assigned()) == 2 and len(second.assigned()) == 2, 30, "partitions shared")
        log = Path(str(first.out) + ".assign").read_text().splitlines()
        # Incremental: the first member only ever gave up the two partitions that moved.
        revoked = [line for line in log if line.startswith("revoke")]
        assert revoked and all(len(line.split()) - 1 <= 2 for line in revoked), log
        values = [f"c{i}" for i in range(400)]
        produce(broker, topic, values)
        wait_for(lambda: len(set(first.values()) | set(second.values())) >= 400, 30, "records consumed")
        assert sorted(first.values() + second.values()) == sorted(values)
        second.stop()
    finally:
        first.stop()


def test_static_member_restarts_without_rebalance(broker: BrokerProcess, tmp_path: Path) -> None:
    topic, group = "grp-static", "g-static"
    create(broker, topic, 2)
    args = ("--instance-id", "instance-1", "--session-ms", "30000")
    m = Member(broker, group, topic, tmp_path / "s.txt", *args)
    wait_for(lambda: m.assigned() == [0, 1], 30, "static member assigned")
    m.stop()  # librdkafka does not send LeaveGroup for a static member
    rebalances = broker.log_text().count(f"preparing to rebalance group {group} ")
    again = Member(broker, group, topic, tmp_path / "s2.txt", *args)
    try:
        wait_for(lambda: again.assigned() == [0, 1], 30, "restarted static member assigned")
        produce(broker, topic, ["after-restart"])
        wait_for(lambda: again.values() == ["after-restart"], 30, "restarted member consumes")
        assert broker.log_text().count(f"preparing to rebalance group {group} ") == rebalances
    finally:
        again.stop()


def test_added_partitions_trigger_a_rebalance(broker: BrokerProcess, tmp_path: Path) -> None:
    from confluent_kafka.admin import NewPartitions

    topic, group = "grp-grow", "g-grow"
    create(broker, topic, 2)
    m = Member(broker, group, topic, tmp_path / "grow.txt")
    try:
        wait_for(lambda: m.assigned() == [0, 1], 30, "initial assignment")
        generations_before = broker.log_text().count(f"group {group} generation")
        a = AdminClient({"bootstrap.servers": broker.bootstrap})
        a.create_partitions([NewPartitions(topic, 4)])[topic].result(10)
        wait_for(lambda: m.assigned() == [0, 1, 2, 3], 30, "new partitions assigned")
        assert broker.log_text().count(f"group {group} generation") > generations_before
        p = Producer({"bootstrap.servers": broker.bootstrap})
        p.produce(topic, b"to-new-partition", partition=3)
        p.flush(10)
        wait_for(lambda: "to-new-partition" in m.values(), 30, "record of a new partition consumed")
    finally:
        m.stop()


def test_committed_offsets_and_resume(broker: BrokerProcess) -> None:
    topic, group = "grp-resume", "g-resume"
    create(broker, topic, 1)
    produce(broker, topic, [f"r{i}" for i in range(100)])
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got: list = []
    deadline = time.monotonic() + 20
    while len(got) < 60 and time.monotonic() < deadline:
        got += [m for m in c.consume(60 - len(got), 0.5) if not m.error()]
    c.commit(offsets=[TopicPartition(topic, 0, got[59].offset() + 1)], asynchronous=False)
    c.close()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    assert c.committed([TopicPartition(topic, 0)], 10)[0].offset == 60
    c.subscribe([topic])
    rest: list = []
    deadline = time.monotonic() + 20
    while len(rest) < 40 and time.monotonic() < deadline:
        rest += [m for m in c.consume(100, 0.5) if not m.error()]
    c.close()
    assert [m.value() for m in rest] == [b"r%d" % i for i in range(60, 100)]


def test_deleting_a_topic_drops_its_committed_offsets(broker: BrokerProcess) -> None:
    """As Kafka (``onPartitionsDeleted``): a deleted topic's committed offsets leave the
    group, so a topic created again under the same name is read from where
    auto.offset.reset says, not from the old topic's offset (which would skip records)."""
    topic, group = "grp-deleted", "g-deleted"
    create(broker, topic, 1)
    produce(broker, topic, [f"old{i}" for i in range(10)])
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
    assert c.committed([TopicPartition(topic, 0)], 10)[0].offset == 7
    c.close()
    a = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    a.delete_topics([topic])[topic].result(10)
    wait_for(lambda: topic not in a.list_topics(timeout=10).topics, 10, "the topic deleted")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    wait_for(lambda: c.committed([TopicPartition(topic, 0)], 10)[0].offset < 0, 10,
             "the deleted topic's offset gone from the group")
    c.close()
    create(broker, topic, 1)
    produce(broker, topic, [f"new{i}" for i in range(10)])
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got: list = []
    deadline = time.monotonic() + 20
    while len(got) < 10 and time.monotonic() < deadline:
        got += [m for m in c.consume(10, 0.5) if not m.error()]
    c.close()
    assert [m.value() for m in got] == [b"new%d" % i for i in range(10)]


@pytest.mark.parametrize("assignor", ["range", "sticky"])
def test_kafka_python_group(kafka_default_broker: BrokerProcess, assignor: str) -> None:
    broker = kafka_default_broker
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    strategy = {"range": RangePartitionAssignor, "sticky": StickyPartitionAssignor}[assignor]
    topic, group = f"grp-kp-{assignor}", f"g-kp-{assignor}"
    create(broker, topic, 4)
    produce(broker, topic, [f"k{i}" for i in range(400)])
    results: dict[int, list[bytes]] = {0: [], 1: []}
    assigned: dict[int, set[int]] = {0: set(), 1: set()}
    stop = threading.Event()

    def run(idx: int) -> None:
        c = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          session_timeout_ms=6000, heartbeat_interval_ms=500,
                          partition_assignment_strategy=[strategy])
        while not stop.is_set():
            assigned[idx] = {tp.partition for tp in c.assignment()}
            for records in c.poll(timeout_ms=300).values():
                results[idx].extend(r.value for r in records)
            c.commit()
        c.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(results[0]) + len(results[1]) >= 400, 40, "kafka-python group consumed")
        wait_for(lambda: sorted(assigned[0] | assigned[1]) == [0, 1, 2, 3] and len(assigned[0]) == 2
                 and len(assigned[1]) == 2, 40, "the two members split the four partitions")
        time.sleep(1)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert sorted(results[0] + results[1]) == sorted(b"k%d" % i for i in range(400))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    committed = c.committed([TopicPartition(topic, p) for p in range(4)], 10)
    c.close()
    assert sum(tp.offset for tp in committed) == 400


def test_aiokafka_group(kafka_default_broker: BrokerProcess) -> None:
    broker = kafka_default_broker
    from aiokafka import AIOKafkaConsumer

    topic, group = "grp-aio", "g-aio"
    create(broker, topic, 2)
    produce(broker, topic, [f"a{i}" for i in range(200)])

    async def main() -> tuple[list[bytes], list[set[int]]]:
        members = [AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=6000, heartbeat_interval_ms=500)
                   for _ in range(2)]
        for c in members:
            await c.start()
        out: list[bytes] = []
        owned: list[set[int]] = [set(), set()]
        try:
            def settled() -> bool:
                # Both members own partitions, and none twice. The two are sampled one
                # after the other, so a pass that straddles a rebalance can look
                # overlapping (one member's assignment from before it, the other's after):
                # keep polling until one pass sees the group settled.
                return all(owned) and owned[0] | owned[1] == {0, 1} and not owned[0] & owned[1]

            async def collect() -> None:
                while len(out) < 200 or not settled():
                    for i, c in enumerate(members):
                        owned[i] = {tp.partition for tp in c.assignment()}
                        for records in (await c.getmany(timeout_ms=200)).values():
                            out.extend(r.value for r in records)
                        await c.commit()
            await asyncio.wait_for(collect(), 40)
        finally:
            for c in members:
                await c.stop()
        return out, owned

    got, owned = asyncio.run(main())
    assert sorted(got) == sorted(b"a%d" % i for i in range(200))
    assert owned[0] and owned[1] and owned[0] | owned[1] == {0, 1} and not owned[0] & owned[1]
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    committed = c.committed([TopicPartition(topic, p) for p in range(2)], 10)
    c.close()
    assert sum(tp.offset for tp in committed) == 200


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_broker_restart_keeps_offsets_and_groups(fresh_broker: BrokerProcess, how: str) -> None:
    fresh_broker.start()
    create(fresh_broker, "restart-t", 2)
    c = Consumer({"bootstrap.servers": fresh_broker.bootstrap, "group.id": "g-restart"})
    c.commit(offsets=[TopicPartition("restart-t", 0, 11), TopicPartition("restart-t", 1, 22)], asynchronous=False)
    c.close()
    if how == "sigterm":
        fresh_broker.stop()
    else:
        fresh_broker.kill()
    fresh_broker.start()
    c = Consumer({"bootstrap.servers": fresh_broker.bootstrap, "group.id": "g-restart"})
    got = c.committed([TopicPartition("restart-t", 0), TopicPartition("restart-t", 1)], 10)
    c.close()
    assert [tp.offset for tp in got] == [11, 22]
    a = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    listed = a.list_consumer_groups().result(10)
    assert "g-restart" in {g.group_id for g in listed.valid}
