"""RetryingConsumer (issue 13 part 3) against a real broker: failed records come back after
their backoff through the broker's delayed delivery, records failing max.retries times land
in the dead-letter topic with their history, and `dmq retry redrive` sends them back."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess
from support.cli import run_dmq

from dmq.client import Record, RetryingConsumer
from dmq.client.retrying import dead_letter_topic, retry_topic


def setup(bootstrap: str, topic: str, n: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"%d" % i, headers=[("app", b"h%d" % i)])
    assert p.flush(10) == 0


def consume(c: RetryingConsumer, until: float, handle: object, done: object = lambda: False) -> None:
    """Hand records to ``handle`` until ``done()`` (then one more second, for any extra one)
    or ``until`` seconds."""
    deadline = time.monotonic() + until
    while time.monotonic() < deadline:
        r = c.poll(0.1)
        if r is not None:
            handle(r)  # type: ignore[operator]
        if done():  # type: ignore[operator]
            deadline = min(deadline, time.monotonic() + 1)


def read_topic(bootstrap: str, topic: str, timeout: float = 5) -> list[object]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "log_level": 0})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            out.append(m)
    c.close()
    return out


def test_failed_records_come_back_after_their_backoff(broker: BrokerProcess, topic_name: str) -> None:
    setup(broker.bootstrap, topic_name, 20)
    group = f"g-{topic_name[-30:]}"
    c = RetryingConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                          "auto.offset.reset": "earliest", "retry.delays.ms": "800,1600",
                          "max.retries": 3})
    c.subscribe([topic_name])
    seen: dict[bytes, list[tuple[float, int]]] = {}

    def handle(r: Record) -> None:
        seen.setdefault(r.value or b"", []).append((time.monotonic(), r.retries))
        assert r.topic == topic_name and r.key == b"k%s" % r.value  # where it came from
        assert r.headers == [("app", b"h%s" % r.value)]  # its own headers, not dmq's
        if int(r.value or b"0") % 2 and r.retries < 2:
            assert c.retry(r, f"attempt {r.retries + 1} failed") == c.retry_topic
        else:
            c.ack(r)

    def finished() -> bool:
        return len(seen) == 20 and all(len(a) == (3 if int(v) % 2 else 1) for v, a in seen.items())

    try:
        consume(c, 30, handle, finished)
    finally:
        c.close()
    assert sorted(seen) == sorted(b"%d" % i for i in range(20))
    for value, attempts in seen.items():
        if int(value) % 2 == 0:
            assert [n for _, n in attempts] == [0], value  # once, never retried
            continue
        assert [n for _, n in attempts] == [0, 1, 2], value
        (t0, _), (t1, _), (t2, _) = attempts
        assert t1 - t0 >= 0.8 - 0.05 and t2 - t1 >= 1.6 - 0.05, attempts  # not before the backoff
        assert t1 - t0 < 0.8 + 2.5 and t2 - t1 < 1.6 + 2.5, attempts
    # A consumer of the group starting over sees nothing left: every offset was committed.
    again = RetryingConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                              "auto.offset.reset": "earliest"})
    again.subscribe([topic_name])
    leftover: list[Record] = []
    try:
        consume(again, 4, leftover.append)  # (the group's partitions are assigned within it)
    finally:
        again.close()
    assert leftover == []


def test_records_failing_every_time_land_in_the_dead_letter_topic_and_redrive(
        broker: BrokerProcess, topic_name: str) -> None:
    setup(broker.bootstrap, topic_name, 5)
    group = f"d-{topic_name[-30:]}"
    c = RetryingConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                          "auto.offset.reset": "earliest", "retry.delays.ms": "200", "max.retries": 2})
    c.subscribe([topic_name])
    targets: list[str] = []
    try:
        consume(c, 30, lambda r: targets.append(c.retry(r, "boom")),
                lambda: targets.count(dead_letter_topic(group)) == 5)
    finally:
        c.close()
    assert targets.count(retry_topic(group)) == 10 and targets.count(dead_letter_topic(group)) == 5
    dead = read_topic(broker.bootstrap, dead_letter_topic(group))
    assert sorted(m.value() for m in dead) == [b"%d" % i for i in range(5)]  # type: ignore[attr-defined]
    for m in dead:
        headers = m.headers()  # type: ignore[attr-defined]
        h = dict(headers)
        assert h["dmq-origin-topic"] == topic_name.encode()
        assert h["dmq-origin-offset"] == m.value()  # type: ignore[attr-defined]
        assert h["dmq-retry-count"] == b"3"
        history = [v for k, v in headers if k == "dmq-retry-history"]
        assert len(history) == 3 and all(v.endswith(b" boom") for v in history)
        assert "dmq-delay-ms" not in h and h["app"] == b"h" + m.value()  # type: ignore[attr-defined]

    dry = run_dmq(broker.bootstrap, "retry", "redrive", "--group", group, "--dry-run").stdout
    assert "would re-drive 5 records" in dry
    out = run_dmq(broker.bootstrap, "retry", "redrive", "--group", group).stdout
    assert "re-drove 5 records" in out and topic_name in out
    back = read_topic(broker.bootstrap, topic_name)
    assert len(back) == 10  # the 5 originals and the 5 re-driven
    redriven = back[5:]
    assert sorted(m.value() for m in redriven) == [b"%d" % i for i in range(5)]  # type: ignore[attr-defined]
    assert all(m.headers() == [("app", b"h" + m.value())] for m in redriven)  # type: ignore[attr-defined]
    again = run_dmq(broker.bootstrap, "retry", "redrive", "--group", group).stdout
    assert "No dead letters to re-drive" in again


def test_bad_configs_and_a_missing_dead_letter_topic_are_one_clear_line(broker: BrokerProcess) -> None:
    with pytest.raises(ValueError, match="group.id"):
        RetryingConsumer({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(ValueError, match="retry.delays.ms"):
        RetryingConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "x", "retry.delays.ms": "-1"})
    res = run_dmq(broker.bootstrap, "retry", "redrive", "--topic", "no-such-dlq", check=False)
    assert res.returncode == 1
    assert res.stderr.strip().count("\n") == 0 and "no-such-dlq does not exist" in res.stderr
    res = run_dmq(broker.bootstrap, "retry", "redrive", check=False)
    assert res.returncode == 2 and "--group" in res.stderr


@pytest.mark.parametrize("strategy", ["range,roundrobin", "cooperative-sticky"])
def test_copies_sent_while_no_member_read_the_retry_topic_are_not_skipped(
        broker: BrokerProcess, topic_name: str, strategy: str) -> None:
    """librdkafka's auto.offset.reset defaults to latest: a member that takes a retry-topic
    partition the group has no committed offset for starts at its beginning all the same."""
    setup(broker.bootstrap, topic_name, 0)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic_name, key=b"k", value=b"v")
    assert p.flush(10) == 0
    group = f"r-{topic_name[-30:]}"
    config = {"bootstrap.servers": broker.bootstrap, "group.id": group, "retry.delays.ms": "300",
              "partition.assignment.strategy": strategy,
              "log_level": 0}  # auto.offset.reset left to librdkafka (latest)
    first = RetryingConsumer({**config, "auto.offset.reset": "earliest"})  # to read the record
    first.subscribe([topic_name])
    try:
        got: list[Record] = []
        consume(first, 20, got.append, lambda: bool(got))
        assert [r.value for r in got] == [b"v"]
        assert first.retry(got[0], "later") == first.retry_topic
    finally:
        first.close()  # gone before the copy is delivered: nothing read from the retry topic
    deadline = time.monotonic() + 20
    while not read_topic(broker.bootstrap, retry_topic(group), timeout=0.5) and time.monotonic() < deadline:
        pass  # until the broker delivered the copy
    second = RetryingConsumer(config)
    second.subscribe([topic_name])
    again: list[Record] = []
    try:
        consume(second, 20, lambda r: (again.append(r), second.ack(r)), lambda: bool(again))
    finally:
        second.close()
    assert [(r.value, r.retries, r.topic) for r in again] == [(b"v", 1, topic_name)]
    third = RetryingConsumer(config)  # where an offset is committed, it starts there
    third.subscribe([topic_name])
    leftover: list[Record] = []
    try:
        consume(third, 4, leftover.append)
    finally:
        third.close()
    assert leftover == []


def test_acking_a_later_record_does_not_commit_an_earlier_one_still_in_flight(
        broker: BrokerProcess, topic_name: str) -> None:
    setup(broker.bootstrap, topic_name, 3)
    group = f"o-{topic_name[-30:]}"
    config = {"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "log_level": 0}
    first = RetryingConsumer(config)
    first.subscribe([topic_name])
    got: list[Record] = []
    try:
        consume(first, 20, got.append, lambda: len(got) == 3)
        assert [r.value for r in got] == [b"0", b"1", b"2"]
        first.ack(got[0])
        first.ack(got[2])  # done before record 1, which is still being worked on
        first.commit()
    finally:
        first.close()  # a crash before record 1 is done
    again: list[Record] = []
    second = RetryingConsumer(config)
    second.subscribe([topic_name])
    try:
        consume(second, 20, lambda r: (again.append(r), second.ack(r)), lambda: len(again) >= 2)
    finally:
        second.close()
    # Record 1 is consumed again (and 2 with it: at least once); 0 is not.
    assert [r.value for r in again] == [b"1", b"2"]


def test_a_record_near_the_size_limit_is_retried_without_its_history(
        broker: BrokerProcess, topic_name: str) -> None:
    """Each retry added a history header: a record near the retry topic's limit could not be
    sent there at all (retry() raised and the record came back forever)."""
    group = f"s-{topic_name[-30:]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1), NewTopic(retry_topic(group), 1, 1, config={
        "max.message.bytes": "2500"})])[retry_topic(group)].result(15)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic_name, key=b"k", value=b"v" * 2000)
    assert p.flush(10) == 0
    c = RetryingConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "log_level": 0,
                          "auto.offset.reset": "earliest", "retry.delays.ms": "0", "max.retries": 20})
    c.subscribe([topic_name])
    seen: list[Record] = []

    def handle(r: Record) -> None:
        seen.append(r)
        if r.retries < 12:
            assert c.retry(r, "x" * 300 if r.retries == 11 else f"attempt {r.retries + 1}") == c.retry_topic
        else:
            c.ack(r)

    try:
        consume(c, 40, handle, lambda: bool(seen) and seen[-1].retries == 12)
    finally:
        c.close()
    assert [r.retries for r in seen] == list(range(13))
    assert all(len(r.history) <= 8 for r in seen)  # the newest 8 kept
    assert seen[11].history[-1].endswith("attempt 11")
    # With the long reason (cut to 200 characters) it fitted only with fewer entries.
    assert len(seen[12].history) < 8 and seen[12].history[-1].endswith(" " + "x" * 200)
