"""Crash and restart: nothing acknowledged is lost, idempotence survives, recovery is fast."""

from __future__ import annotations

import glob
import os
import threading
import time
from datetime import timedelta

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from support.broker import BrokerProcess

from dmq.client.wire import WireClient
from dmq.record.records import encode_batch


def consume_values(bootstrap: str, topic: str, partitions: int, timeout: float = 60) -> dict[int, list[bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False,
                  "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(eof) < partitions and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    eof.add(m.partition())
                continue
            out[m.partition()].append(m.value())
    c.close()
    return out


def test_sigkill_under_acks_all_load_loses_nothing_acknowledged(fresh_broker: BrokerProcess) -> None:
    """Producers with acks=all and idempotence run while the broker is SIGKILLed and restarted."""
    fresh_broker.overrides["num.partitions"] = "3"
    fresh_broker.overrides["log.segment.bytes"] = "200000"  # several rolls during the run
    fresh_broker.start()
    topic = "durable"
    acked: list[tuple[int, bytes]] = []
    stop = threading.Event()
    lock = threading.Lock()

    def run_producer() -> None:
        p = Producer({"bootstrap.servers": fresh_broker.bootstrap, "acks": "all",
                      "enable.idempotence": True, "linger.ms": 2, "message.timeout.ms": 60000,
                      "reconnect.backoff.max.ms": 200})

        def cb(err, msg) -> None:  # noqa: ANN001
            if err is None:
                with lock:
                    acked.append((msg.partition(), msg.value()))

        i = 0
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                p.produce(topic, b"rec-%08d" % i, on_delivery=cb)
                i += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
            if i % 200 == 0:
                time.sleep(0.005)
        p.flush(60)

    t = threading.Thread(target=run_producer)
    t.start()
    for _round in range(2):
        time.sleep(1.5)
        fresh_broker.kill()
        time.sleep(0.3)
        fresh_broker.start()
    time.sleep(1.5)
    stop.set()
    t.join(90)
    assert not t.is_alive()
    with lock:
        acked_copy = list(acked)
    assert len(acked_copy) > 1000, "the load did not run"
    stored = consume_values(fresh_broker.bootstrap, topic, 3)
    for p, values in stored.items():
        mine = [v for part, v in acked_copy if part == p]
        present = set(values)
        missing = [v for v in mine if v not in present]
        assert not missing, f"partition {p}: {len(missing)} acknowledged records lost, e.g. {missing[:3]}"
        # Idempotence: no record is stored twice, and the order per partition is the send order.
        assert len(values) == len(present), f"partition {p} has duplicates"
        assert values == sorted(values), f"partition {p} is out of order"


def _produce_raw(client: WireClient, topic: str, batch: bytes) -> tuple[ErrorCode, int]:
    req = ProduceRequest(transactional_id=None, acks=-1, timeout=timedelta(seconds=10),  # type: ignore[arg-type]
                         topic_data=(TopicProduceData(name=topic, partition_data=(  # type: ignore[arg-type]
                             PartitionProduceData(index=0, records=batch),),),))  # type: ignore[arg-type]
    resp = client.request(req)
    part = resp.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def test_idempotent_retry_after_crash_is_deduplicated(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    host, port = "127.0.0.1", fresh_broker.port
    with WireClient(host, port) as c:
        init = c.request(InitProducerIdRequest(transactional_id=None,  # type: ignore[arg-type]
                                               transaction_timeout=timedelta(seconds=60),
                                               producer_id=-1, producer_epoch=-1))
        assert init.error_code == ErrorCode.none
        pid = init.producer_id
        # The topic is auto-created by the first produce's metadata; create it by a batch.
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
        c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="idem"),),  # type: ignore[arg-type]
                                  allow_auto_topic_creation=True,
                                  include_topic_authorized_operations=False))
        batches = [encode_batch([(None, b"a%d" % j, []) for j in range(5)], producer_id=pid,
                                producer_epoch=0, base_sequence=5 * i, timestamp=1) for i in range(3)]
        for i, b in enumerate(batches):
            assert _produce_raw(c, "idem", b) == (ErrorCode.none, 5 * i)
    fresh_broker.kill()
    fresh_broker.start()
    with WireClient(host, port) as c:
        # The last two batches retried after the crash: same offsets, nothing appended.
        assert _produce_raw(c, "idem", batches[2]) == (ErrorCode.none, 10)
        assert _produce_raw(c, "idem", batches[1]) == (ErrorCode.none, 5)
        # A gap in the sequence is refused.
        gap = encode_batch([(None, b"gap", [])], producer_id=pid, producer_epoch=0, base_sequence=99)
        assert _produce_raw(c, "idem", gap)[0] == ErrorCode.out_of_order_sequence_number
        nxt = encode_batch([(None, b"next", [])], producer_id=pid, producer_epoch=0, base_sequence=15)
        assert _produce_raw(c, "idem", nxt) == (ErrorCode.none, 15)
    stored = consume_values(fresh_broker.bootstrap, "idem", 1)[0]
    assert stored == [b"a%d" % j for _ in range(3) for j in range(5)] + [b"next"]


def test_an_epoch_bump_without_a_transactional_id_gets_a_fresh_producer_id(
        fresh_broker: BrokerProcess) -> None:
    # librdkafka bumps an idempotent producer's epoch (KIP-360) after an out-of-order
    # sequence error; as in Kafka, the answer is a new id, and the broker says so in its log
    # (the chaos suite uses that line to tell a client's re-send from a broker duplicate).
    fresh_broker.start()
    with WireClient("127.0.0.1", fresh_broker.port) as c:
        first = c.request(InitProducerIdRequest(transactional_id=None,  # type: ignore[arg-type]
                                                transaction_timeout=timedelta(seconds=60),
                                                producer_id=-1, producer_epoch=-1))
        bumped = c.request(InitProducerIdRequest(transactional_id=None,  # type: ignore[arg-type]
                                                 transaction_timeout=timedelta(seconds=60),
                                                 producer_id=first.producer_id, producer_epoch=0))
    assert bumped.error_code == ErrorCode.none
    assert bumped.producer_id != first.producer_id and bumped.producer_epoch == 0
    assert (f"producer {first.producer_id} (epoch 0) asked to bump its epoch; issued producer id "
            f"{bumped.producer_id}") in fresh_broker.log_text()


def test_torn_tail_is_truncated_and_clean_shutdown_is_detected(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    p = Producer({"bootstrap.servers": fresh_broker.bootstrap, "acks": "all"})
    for i in range(1000):
        p.produce("torn", b"v%d" % i)
    assert p.flush(30) == 0
    fresh_broker.kill()
    (seg,) = glob.glob(str(fresh_broker.data_dir / "torn-0" / "*.log"))
    size = os.path.getsize(seg)
    with open(seg, "ab") as f:  # half a batch written when the machine died
        f.write(b"\x00\x00\x00\x00\x00\x00\x03\xe8\x00\x00\x10\x00" + os.urandom(40))
    fresh_broker.start()
    assert os.path.getsize(seg) == size
    assert "unclean shutdown" in fresh_broker.log_text()
    assert "truncated" in fresh_broker.log_text()
    values = consume_values(fresh_broker.bootstrap, "torn", 1)[0]
    assert values == [b"v%d" % i for i in range(1000)]
    # Producing continues at the right offset after recovery.
    p = Producer({"bootstrap.servers": fresh_broker.bootstrap, "acks": "all"})
    offsets: list[int] = []
    p.produce("torn", b"after", on_delivery=lambda e, m: offsets.append(m.offset()))
    p.flush(10)
    assert offsets == [1000]
    assert fresh_broker.stop() == 0
    fresh_broker.start()
    assert fresh_broker.log_text().count("(clean shutdown)") >= 1


def test_recovery_after_crash_is_fast(fresh_broker: BrokerProcess) -> None:
    """~60 MB in unflushed segments: restart after SIGKILL validates them quickly."""
    fresh_broker.overrides["log.segment.bytes"] = str(16 * 1024 * 1024)
    fresh_broker.start()
    p = Producer({"bootstrap.servers": fresh_broker.bootstrap, "acks": "1", "linger.ms": 20,
                  "batch.size": 1_000_000, "compression.type": "none"})
    payload = os.urandom(1000)
    n = 60_000
    for _i in range(n):
        while True:
            try:
                p.produce("big", payload)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(120) == 0
    fresh_broker.kill()
    started = time.monotonic()
    fresh_broker.start()
    elapsed = time.monotonic() - started
    assert "unclean shutdown" in fresh_broker.log_text()
    c = Consumer({"bootstrap.servers": fresh_broker.bootstrap, "group.id": "x", "enable.auto.commit": False})
    lo, hi = c.get_watermark_offsets(TopicPartition("big", 0), 10)
    c.close()
    assert (lo, hi) == (0, n)
    assert elapsed < 15, f"recovery of ~60 MB took {elapsed:.1f}s"
