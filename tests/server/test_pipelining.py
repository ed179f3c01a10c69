"""Pipelined requests on one connection (issue 12): a request that waits (a fetch in its
purgatory, an acks=all produce waiting for followers) does not hold up the next one,
responses still come back in request order, and a flood of requests keeps memory bounded."""

from __future__ import annotations

import socket
import struct
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess

from dmq.client.wire import decode_response, encode_request
from dmq.protocol.codec import make, request_class, request_module
from dmq.record.records import encode_batch


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def produce(topic: str, value: bytes, acks: int = 1) -> Any:
    mod = request_module(0, 9)
    return make(request_class(0, 9), transactional_id=None, acks=acks, timeout=timedelta(seconds=10),
                topic_data=(make(mod.TopicProduceData, name=topic, partition_data=(
                    make(mod.PartitionProduceData, index=0, records=encode_batch([(None, value, [])])),)),))


def fetch(topic: str, max_wait_ms: int) -> Any:
    mod = request_module(1, 12)
    return make(request_class(1, 12), replica_id=-1, max_wait=timedelta(milliseconds=max_wait_ms), min_bytes=1,
                max_bytes=10**6, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                forgotten_topics_data=(), topics=(make(mod.FetchTopic, topic=topic, partitions=(
                    make(mod.FetchPartition, partition=0, fetch_offset=0, partition_max_bytes=10**6,
                         current_leader_epoch=-1, log_start_offset=-1, last_fetched_epoch=-1),)),))


class Pipe:
    """One raw connection: send many requests without waiting, read answers in order."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.corr = 0
        self.sent: list[tuple[int, type]] = []

    def send(self, request: Any) -> None:
        self.corr += 1
        self.sent.append((self.corr, type(request)))
        self.sock.sendall(encode_request(request, self.corr, "pipe"))

    def recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)

    def recv(self, corr: int, cls: type) -> Any:
        size = struct.unpack(">i", self.recv_exact(4))[0]
        data = self.recv_exact(size)
        (got,) = struct.unpack_from(">i", data, 0)
        assert got == corr, f"response {got} came where {corr} was due"
        return decode_response(cls, corr, data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def topic(broker: BrokerProcess, request: pytest.FixtureRequest) -> str:
    name = f"pipe-{request.node.name[5:40]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    return name


def test_a_waiting_fetch_does_not_hold_up_the_next_request_and_answers_stay_in_order(
        broker: BrokerProcess, topic: str) -> None:
    pipe = Pipe(broker.port)
    try:
        start = time.monotonic()
        pipe.send(fetch(topic, max_wait_ms=8000))   # nothing to read yet: it waits
        pipe.send(produce(topic, b"later"))         # the later request lands the data it waits for
        fetched = pipe.recv(1, request_class(1, 12))
        took = time.monotonic() - start
        produced = pipe.recv(2, request_class(0, 9))  # after the fetch's answer, in order
    finally:
        pipe.close()
    assert produced.responses[0].partition_responses[0].error_code == 0
    records = fetched.responses[0].partitions[0].records
    assert records is not None and b"later" in bytes(records)
    assert took < 4, f"the fetch waited {took:.1f} s: the produce behind it did not run"


def test_a_flood_of_pipelined_produces_is_answered_in_order_with_bounded_memory(
        broker: BrokerProcess, topic: str) -> None:
    n = 10_000
    pipe = Pipe(broker.port)
    before = rss_kb(broker.pid())
    requests = [produce(topic, b"v%05d" % i + bytes(2000), acks=-1) for i in range(n)]  # 20 MB
    sender = threading.Thread(target=lambda: [pipe.send(r) for r in requests], daemon=True)
    try:
        sender.start()
        time.sleep(2)  # nobody reads the answers yet
        stalled = rss_kb(broker.pid())
        offsets = []
        for corr in range(1, n + 1):
            resp = pipe.recv(corr, request_class(0, 9))
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == 0, part
            offsets.append(part.base_offset)
        sender.join(30)
        after = rss_kb(broker.pid())
    finally:
        pipe.close()
    assert offsets == list(range(n))  # appended in request order, answered in request order
    assert stalled - before < 30_000, (before, stalled)
    assert after < 150_000, after


def test_a_client_that_reads_no_answers_is_not_buffered_for(broker: BrokerProcess, topic: str) -> None:
    """200 pipelined fetches of 1 MB each, nobody reading: the broker stops taking requests
    once its write buffer is full instead of holding 200 MB of answers."""
    pipe = Pipe(broker.port)
    try:
        for i in range(20):
            pipe.send(produce(topic, bytes(500_000) + b"%d" % i))
        for corr in range(1, 21):
            pipe.recv(corr, request_class(0, 9))
        before = rss_kb(broker.pid())
        sender = threading.Thread(target=lambda: [pipe.send(fetch(topic, 0)) for _ in range(200)], daemon=True)
        sender.start()
        time.sleep(3)
        stalled = rss_kb(broker.pid())
        for corr in range(21, 221):
            resp = pipe.recv(corr, request_class(1, 12))
            assert resp.responses[0].partitions[0].error_code == 0
        sender.join(30)
    finally:
        pipe.close()
    assert stalled - before < 60_000, (before, stalled)  # 200 MB of answers if it buffered them


def test_a_client_gone_mid_request_does_not_stop_the_request(tmp_path: Path) -> None:
    """librdkafka closes its bootstrap connection while its first FindCoordinator is creating
    __consumer_offsets. The request must run to its end: cancelled between writing the topic
    to the metadata store and taking up its partitions, it left every later OffsetCommit
    answered NOT_COORDINATOR."""
    from confluent_kafka import Consumer, TopicPartition

    b = BrokerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("gone", 1, 1)])["gone"].result(15)
        find = make(request_class(10, 4), key_type=0, coordinator_keys=("gone-group",))
        s = socket.create_connection(("127.0.0.1", b.port), timeout=10)
        s.sendall(encode_request(find, 1, "gone"))
        s.close()  # gone before the answer
        time.sleep(0.5)
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "gone-group", "log_level": 0})
        try:
            c.commit(offsets=[TopicPartition("gone", 0, 0)], asynchronous=False)
        finally:
            c.close()
    finally:
        b.close()
