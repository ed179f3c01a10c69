"""A share group's dead-letter topic (dmq's ``share.dead.letter.topic``) with real
confluent-kafka ShareConsumers against a real ``dmq server``: records a member REJECTs,
and records that reach the group's delivery count limit, are written to the topic once
each, with the original key, value and headers and dmq's headers saying why, from where
and after how many deliveries; not again after a SIGKILL and restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from support.broker import BrokerProcess
from test_share_consumer import consumer, create_topic, drain
from test_share_group_configs import alter

LOCK_MS = 2000


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", overrides={"group.share.min.record.lock.duration.ms": "1000"}).start()
    try:
        yield b
    finally:
        b.close()


def dead_letters(bootstrap: str, topic: str, expect: int, seconds: float = 15) -> list[Any]:
    """Every record of ``topic`` (read from the beginning until ``expect`` came and 1.5 s
    more passed quietly)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + seconds
    while topic not in admin.list_topics(timeout=5).topics:
        assert time.monotonic() < deadline, f"{topic} was never created"
        time.sleep(0.2)
    partitions = admin.list_topics(topic, timeout=5).topics[topic].partitions
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dlq-reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: list[Any] = []
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.3)
            if m is None or m.error():
                if len(out) >= expect and time.monotonic() - quiet_since > 1.5:
                    break
                continue
            out.append(m)
            quiet_since = time.monotonic()
    finally:
        c.close()
    return out


def headers_of(m: Any) -> dict[str, str]:
    return {k: v.decode() for k, v in (m.headers() or []) if k.startswith("dmq.dlq.")}


def test_rejected_and_exhausted_records_reach_the_dead_letter_topic_once(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "jobs", partitions=2)
    alter(bootstrap, "workers", share_auto_offset_reset="earliest", share_delivery_count_limit="3",
          share_dead_letter_topic="jobs.dlq")
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(40):
        p.produce("jobs", key=f"k{i}".encode(), value=f"job-{i}".encode(), partition=i % 2,
                  headers=[("trace", f"t{i}".encode())])
        p.flush(10)  # a batch per record: members take and answer records one by one

    def ack(_i: int, value: str, count: int) -> Any:
        n = int(value.split("-")[1])
        if n % 10 == 1:
            return AcknowledgeType.REJECT
        if n % 10 == 2:
            return AcknowledgeType.RELEASE  # every time: archived at the third delivery
        return AcknowledgeType.ACCEPT

    c = consumer(bootstrap, "workers", max_poll=5)
    try:
        c.subscribe(["jobs"])
        got = drain([c], 40 + 4 * 2, seconds=30, ack=ack)[0]
        assert len(got) == 48
        assert c.commit_sync(10) is not None
        assert not c.poll(2.0)
    finally:
        c.close()

    letters = dead_letters(bootstrap, "jobs.dlq", 8)
    assert len(letters) == 8, [m.value() for m in letters]
    by_value = {m.value().decode(): m for m in letters}
    assert sorted(by_value) == sorted(f"job-{n}" for n in range(40) if n % 10 in (1, 2))
    for value, m in by_value.items():
        n = int(value.split("-")[1])
        h = headers_of(m)
        reason, count = ("rejected", 1) if n % 10 == 1 else ("delivery-limit", 3)
        assert (h["dmq.dlq.reason"], h["dmq.dlq.delivery.count"]) == (reason, str(count))
        assert (h["dmq.dlq.group"], h["dmq.dlq.topic"], h["dmq.dlq.partition"]) == ("workers", "jobs", str(n % 2))
        assert h["dmq.dlq.offset"] == str(n // 2)  # record n is the (n//2)th of its partition
        assert int(h["dmq.dlq.timestamp"]) > 0
        assert m.key() == f"k{n}".encode() and ("trace", f"t{n}".encode()) in m.headers()
        assert m.partition() == n % 2  # the dead-letter topic has the source's partitions
    assert len(AdminClient({"bootstrap.servers": bootstrap}).list_topics("jobs.dlq", timeout=5)
               .topics["jobs.dlq"].partitions) == 2

    # The archiving was persisted after the dead letters: a crash and restart neither
    # delivers these records again nor writes their dead letters again.
    broker.kill()
    broker.start()
    again = consumer(bootstrap, "workers")
    try:
        again.subscribe(["jobs"])
        assert drain([again], 1, seconds=6) == {0: []}
    finally:
        again.close()
    assert len(dead_letters(bootstrap, "jobs.dlq", 8)) == 8


HOLDER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                       "share.acknowledgement.mode": "explicit", "log_level": 0})
    c.subscribe([sys.argv[3]])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        msgs = c.poll(0.5)
        if msgs:
            print("holding", len(msgs), msgs[0].delivery_count(), flush=True)
            time.sleep(600)  # holds them, unacknowledged, until killed
""")


def test_a_record_its_last_holder_died_with_reaches_the_dead_letter_topic(broker: BrokerProcess,
                                                                          tmp_path: Path) -> None:
    """Delivered twice (the group's limit): released once by a member, then taken by one
    that is SIGKILLed. Its closed connection releases the record, at the limit: archived,
    and its dead letter written (reason delivery-limit, two deliveries)."""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "tasks")
    alter(bootstrap, "g-held", share_auto_offset_reset="earliest", share_delivery_count_limit="2",
          share_record_lock_duration_ms=str(LOCK_MS), share_dead_letter_topic="tasks-dead")
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce("tasks", key=b"only", value=b"task-0")
    assert p.flush(10) == 0
    first = consumer(bootstrap, "g-held")
    try:
        first.subscribe(["tasks"])
        got = drain([first], 1, seconds=15, ack=lambda *_: AcknowledgeType.RELEASE)[0]
        assert got == [("task-0", 1)]
        first.commit_sync(10)
    finally:
        first.close()
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    holder = subprocess.Popen([sys.executable, str(script), bootstrap, "g-held", "tasks"],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().split() == ["holding", "1", "2"]
        os.killpg(holder.pid, signal.SIGKILL)
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(10)
    (letter,) = dead_letters(bootstrap, "tasks-dead", 1, seconds=LOCK_MS / 1000 + 15)
    assert (letter.key(), letter.value()) == (b"only", b"task-0")
    assert headers_of(letter) | {"dmq.dlq.timestamp": "-"} == {
        "dmq.dlq.reason": "delivery-limit", "dmq.dlq.group": "g-held", "dmq.dlq.topic": "tasks",
        "dmq.dlq.partition": "0", "dmq.dlq.offset": "0", "dmq.dlq.delivery.count": "2", "dmq.dlq.timestamp": "-"}
