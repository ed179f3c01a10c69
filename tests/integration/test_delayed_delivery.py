"""Delayed delivery (dmq-delay-ms / dmq-deliver-at headers) with real clients against a
real dmq server: on time and never early, from confluent-kafka, kafka-python and kcat
producers; read by every client; through a SIGKILL; with transactions; bad headers refused."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess
from support.cli import run_dmq

from dmq.record.batch import iter_headers


def now_ms() -> int:
    return int(time.time() * 1000)


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the result is in
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


class Watcher:
    """A consumer of partition 0 from offset 0, timing each record as poll() returns it.
    Started before the records are produced, so its own start-up is not counted."""

    def __init__(self, bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"w-{time.monotonic_ns()}",
                                  "enable.auto.commit": False, "isolation.level": isolation,
                                  "fetch.wait.max.ms": 50, "log_level": 0})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.got: list[tuple[float, bytes, bytes | None, list[Any]]] = []
        self._poll(0.5)  # connected and fetching (before anything is produced, where it matters)

    def _poll(self, timeout: float) -> None:
        m = self.consumer.poll(timeout)
        if m is not None and not m.error():
            self.got.append((time.time() * 1000, m.value(), m.key(), m.headers() or []))

    def collect(self, count: int, timeout: float) -> list[tuple[float, bytes, bytes | None, list[Any]]]:
        """(arrival epoch ms, value, key, headers) of the records up to ``count``."""
        deadline = time.monotonic() + timeout
        try:
            while len(self.got) < count and time.monotonic() < deadline:
                self._poll(0.05)
        finally:
            self.consumer.close()
        return self.got


def watch(bootstrap: str, topic: str, count: int, timeout: float,
          isolation: str = "read_uncommitted") -> list[tuple[float, bytes, bytes | None, list[Any]]]:
    """What a consumer started now reads: the first ``count`` records, timed."""
    return Watcher(bootstrap, topic, isolation).collect(count, timeout)


def test_delayed_records_arrive_on_time_never_early_and_others_untouched(
        broker: BrokerProcess, topic_name: str) -> None:
    create(broker.bootstrap, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                  "compression.type": "zstd", "linger.ms": 5})
    watcher = Watcher(broker.bootstrap, topic_name)
    start = now_ms()
    plan = {b"plain": start, b"soon": start + 1500, b"later": start + 3000}
    p.produce(topic_name, key=b"1", value=b"later",
              headers=[("dmq-deliver-at", str(plan[b"later"]).encode()), ("trace", b"t1")])
    p.produce(topic_name, key=b"2", value=b"plain")
    p.produce(topic_name, key=b"3", value=b"soon", headers=[("dmq-deliver-at", str(plan[b"soon"]).encode())])
    assert p.flush(10) == 0
    got = watcher.collect(3, 15)
    assert [v for _, v, _, _ in got] == [b"plain", b"soon", b"later"]
    for arrived, value, _, _ in got[1:]:  # the delayed ones: on time, never early
        assert arrived >= plan[value], f"{value!r} came {plan[value] - arrived:.0f} ms early"
        assert arrived <= plan[value] + 1000, f"{value!r} came {arrived - plan[value]:.0f} ms late"
    assert got[0][0] < plan[b"soon"]  # the plain one did not wait
    later = got[2]
    assert later[2] == b"1" and later[3] == [("trace", b"t1")]  # the delay header is gone


def test_kafka_python_and_kcat_producers_and_every_consumer(broker: BrokerProcess, topic_name: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    create(broker.bootstrap, topic_name)
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    kp.send(topic_name, b"kafka-python", headers=[("dmq-delay-ms", b"1000")]).get(10)
    kp.send(topic_name, b"kafka-python-now").get(10)
    kp.close()
    if shutil.which("kcat"):
        subprocess.run(["kcat", "-P", "-b", broker.bootstrap, "-t", topic_name, "-H", "dmq-delay-ms=1200"],
                       input=b"kcat\n", check=True, timeout=30)
        expected = {b"kafka-python", b"kafka-python-now", b"kcat"}
    else:
        expected = {b"kafka-python", b"kafka-python-now"}
    first = watch(broker.bootstrap, topic_name, 1, 5)
    assert [v for _, v, _, _ in first] == [b"kafka-python-now"]
    assert {v for _, v, _, _ in watch(broker.bootstrap, topic_name, len(expected), 15)} == expected

    # Other readers skip the control batches that held the records: no error, each once.
    kc = KafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                       consumer_timeout_ms=3000, isolation_level="read_committed")
    assert sorted(m.value for m in kc) == sorted(expected)
    kc.close()
    if shutil.which("kcat"):
        out = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", topic_name, "-e", "-q"],
                             capture_output=True, check=True, timeout=30).stdout
        assert sorted(out.split()) == sorted(expected)

    async def aio() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer
        c = AIOKafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             isolation_level="read_committed")
        await c.start()
        try:
            batches = await c.getmany(timeout_ms=3000)
            return [m.value for msgs in batches.values() for m in msgs]
        finally:
            await c.stop()

    import asyncio
    assert sorted(asyncio.run(aio())) == sorted(expected)


@pytest.mark.parametrize("value, message", [
    (b"tomorrow", "not a whole number"),
    (b"-1", "not a whole number"),
    (str(3 * 86_400_000 + 1).encode(), "above delayed.delivery.max.ms"),
])
def test_bad_delay_headers_are_refused_with_a_clear_error(broker: BrokerProcess, topic_name: str,
                                                          value: bytes, message: str) -> None:
    create(broker.bootstrap, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0, "log_level": 0})
    errors: list[Any] = []
    p.produce(topic_name, value=b"x", headers=[("dmq-delay-ms", value)],
              on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].name() == "INVALID_RECORD"
    assert message in broker.log_text()
    assert watch(broker.bootstrap, topic_name, 1, 1.5) == []  # nothing was written


def test_pending_records_survive_sigkill_and_are_delivered_once(fresh_broker: BrokerProcess,
                                                                 topic_name: str) -> None:
    b = fresh_broker.start()
    create(b.bootstrap, topic_name)
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 20})
    due = now_ms() + 3000
    for i in range(200):
        p.produce(topic_name, value=b"r%03d" % i,
                  headers=[("dmq-deliver-at", str(due + (199 - i) * 5).encode())])
    assert p.flush(10) == 0
    b.kill()  # SIGKILL, no snapshot
    time.sleep(max(0.0, (due + 1200 - now_ms()) / 1000))  # down past the time of every record
    b.start()
    got = watch(b.bootstrap, topic_name, 200, 20)
    values = [v for _, v, _, _ in got]
    assert sorted(values) == [b"r%03d" % i for i in range(200)]  # each once
    # Overdue after the outage: delivered at once, in deliver-time order (latest i first).
    assert values == [b"r%03d" % i for i in reversed(range(200))]
    assert len(watch(b.bootstrap, topic_name, 201, 2)) == 200


def test_transactional_delayed_records_wait_for_the_commit(broker: BrokerProcess, topic_name: str) -> None:
    create(broker.bootstrap, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic_name}",
                  "log_level": 0})
    p.init_transactions(15)
    at = str(now_ms() + 1500).encode()
    p.begin_transaction()
    p.produce(topic_name, value=b"aborted", headers=[("dmq-deliver-at", at)])
    p.abort_transaction(15)
    p.begin_transaction()
    p.produce(topic_name, value=b"committed", headers=[("dmq-deliver-at", at)])
    p.produce(topic_name, value=b"committed-now")
    p.commit_transaction(15)
    got = watch(broker.bootstrap, topic_name, 3, 8, isolation="read_committed")
    assert [v for _, v, _, _ in got] == [b"committed-now", b"committed"]


def test_a_record_for_a_long_delay_waits_and_topics_describe_counts_it(
        broker: BrokerProcess, topic_name: str) -> None:
    create(broker.bootstrap, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(3):
        p.produce(topic_name, value=b"in an hour", headers=[("dmq-delay-ms", b"3600000")])
    p.produce(topic_name, value=b"now")
    assert p.flush(10) == 0
    assert [v for _, v, _, _ in watch(broker.bootstrap, topic_name, 2, 2)] == [b"now"]
    out = run_dmq(broker.bootstrap, "topics", "describe", topic_name).stdout
    cells = [[c.strip() for c in line.strip("│┃ ").split("│" if "│" in line else "┃")]
             for line in out.splitlines() if "│" in line or "┃" in line]
    assert cells[0] == ["partition", "leader", "replicas", "isr", "delayed", "size"], out
    assert cells[1][:5] == ["0", "0", "0", "0", "3"] and cells[1][5].endswith(" B"), out


def test_keyless_records_pending_when_the_topic_turns_compact_are_delivered(
        broker: BrokerProcess, topic_name: str) -> None:
    """Accepted while the topic took keyless records, they are delivered after it turns
    compact (as keyless records already in its log stay until the cleaner drops them),
    and do not hold back the keyed ones due after them."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    create(broker.bootstrap, topic_name)
    watcher = Watcher(broker.bootstrap, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    at = now_ms() + 2000
    p.produce(topic_name, value=b"keyless", headers=[("dmq-deliver-at", str(at).encode())])
    p.produce(topic_name, key=b"k", value=b"keyed", headers=[("dmq-deliver-at", str(at + 200).encode())])
    assert p.flush(10) == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    resource = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    got = watcher.collect(2, 10)
    assert [(v, k) for _, v, k, _ in got] == [(b"keyless", None), (b"keyed", b"k")]


def test_delivered_batches_keep_to_max_message_bytes_and_the_topics_codec(
        broker: BrokerProcess, topic_name: str) -> None:
    """Records of many produce requests due at once were delivered in one uncompressed batch
    of any size (40 records of 20 KB: 800 KB on a topic of max.message.bytes 60000)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={
        "max.message.bytes": "60000", "compression.type": "lz4"})])[topic_name].result(15)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                  "batch.size": 30000, "compression.type": "lz4"})
    at = str(now_ms() + 1500).encode()
    values = [b"%02d" % i + bytes(range(256)) * 40 + b"\0" * 10_000 for i in range(40)]  # half compresses
    for v in values:
        p.produce(topic_name, value=v, headers=[("dmq-deliver-at", at)])
        p.poll(0)
    assert p.flush(10) == 0
    got = watch(broker.bootstrap, topic_name, 40, 20)
    assert [v for _, v, _, _ in got] == values
    segments = sorted((broker.data_dir / f"{topic_name}-0").glob("*.log"))
    delivered = [h for seg in segments for _, h in iter_headers(seg.read_bytes())
                 if not h.is_control and h.producer_id < 0]
    assert sum(h.record_count for h in delivered) == 40
    assert len(delivered) > 1 and max(h.size for h in delivered) <= 60000
    assert {h.compression for h in delivered} == {3}  # lz4


CONSUMER = """
import sys
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "reader", "log_level": 0})
c.assign([TopicPartition(sys.argv[2], 0, 0)])
got = []
while len(got) < int(sys.argv[3]):
    m = c.poll(0.5)
    if m is not None and not m.error():
        got.append(m.value().decode())
c.close()
print(",".join(got))
"""


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_a_compressed_batch_whose_records_are_all_delayed_is_read_by_librdkafka(
        broker: BrokerProcess, topic_name: str, codec: str) -> None:
    """The idempotent producer's batch stays, emptied; it stayed compressed (an empty lz4
    frame...), and librdkafka's consumer aborted the process reading it."""
    create(broker.bootstrap, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 20,
                  "compression.type": codec})
    at = str(now_ms() + 1000).encode()
    for v in (b"d1", b"d2"):
        p.produce(topic_name, value=v, headers=[("dmq-deliver-at", at)])
    assert p.flush(10) == 0
    p.produce(topic_name, value=b"plain")
    assert p.flush(10) == 0
    read = subprocess.run([sys.executable, "-c", CONSUMER, broker.bootstrap, topic_name, "3"],
                          capture_output=True, text=True, timeout=30)
    assert read.returncode == 0, read.stderr[-500:]
    assert sorted(read.stdout.strip().split(",")) == ["d1", "d2", "plain"]
