"""Fetch sessions (KIP-227) on a real broker, over the wire: a full fetch opens a session,
an incremental one lists nothing and is answered with only the partitions that changed,
its long poll is woken by any partition of the session, and the session errors are
Kafka's. kafka-python's consumer (tests/integration/test_kafka_python.py) fetches
through sessions too."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from support.broker import BrokerProcess

from dmq.client.wire import WireClient, decode_response
from dmq.protocol.codec import make, request_class, request_module
from dmq.record.records import encode_batch

PARTITIONS = 3


def fetch(topic: str, offsets: dict[int, int], session_id: int, epoch: int, max_wait_ms: int = 0,
          forgotten: tuple[int, ...] = ()) -> Any:
    mod = request_module(1, 12)
    return make(request_class(1, 12), replica_id=-1, max_wait=timedelta(milliseconds=max_wait_ms),
                min_bytes=1, max_bytes=10**6, isolation_level=0, session_id=session_id,
                session_epoch=epoch, rack_id="",
                forgotten_topics_data=(make(mod.ForgottenTopic, topic=topic, partitions=forgotten),)
                if forgotten else (),
                topics=(make(mod.FetchTopic, topic=topic, partitions=tuple(
                    make(mod.FetchPartition, partition=p, fetch_offset=o, partition_max_bytes=10**6,
                         current_leader_epoch=-1, log_start_offset=-1, last_fetched_epoch=-1)
                    for p, o in offsets.items())),) if offsets else ())


def produce(topic: str, partition: int, value: bytes) -> Any:
    mod = request_module(0, 9)
    return make(request_class(0, 9), transactional_id=None, acks=1, timeout=timedelta(seconds=10),
                topic_data=(make(mod.TopicProduceData, name=topic, partition_data=(
                    make(mod.PartitionProduceData, index=partition,
                         records=encode_batch([(None, value, [])])),)),))


def answered(response: Any) -> dict[int, Any]:
    return {p.partition_index: p for t in response.responses for p in t.partitions}


@pytest.fixture
def topic(broker: BrokerProcess, request: pytest.FixtureRequest) -> str:
    name = f"sessions-{request.node.name[5:40]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(15)
    return name


def test_an_incremental_fetch_answers_only_what_changed_and_wakes_on_any_partition(
        broker: BrokerProcess, topic: str) -> None:
    with WireClient("127.0.0.1", broker.port, timeout=30) as c:
        full = c.request(fetch(topic, {p: 0 for p in range(PARTITIONS)}, 0, 0))
        assert full.error_code == ErrorCode.none and full.session_id > 0
        assert sorted(answered(full)) == list(range(PARTITIONS))
        session = full.session_id
        # Nothing changed: epoch 1 lists no partition, waits its whole max_wait, answers none.
        start = time.monotonic()
        idle = c.request(fetch(topic, {}, session, 1, max_wait_ms=300))
        assert time.monotonic() - start >= 0.25
        assert idle.error_code == ErrorCode.none and idle.session_id == session
        assert answered(idle) == {}
        # A long poll of the session is woken by a record on any of its partitions.
        with WireClient("127.0.0.1", broker.port) as writer:
            start = time.monotonic()
            corr, frame = c.encode(fetch(topic, {}, session, 2, max_wait_ms=10_000))
            c.send_raw(frame)
            time.sleep(0.3)
            assert writer.request(produce(topic, 1, b"one")).responses[0] \
                .partition_responses[0].error_code == ErrorCode.none
        woken = decode_response(request_class(1, 12), corr, c.recv_frame())
        assert time.monotonic() - start < 5
        got = answered(woken)
        assert list(got) == [1]
        assert b"one" in bytes(got[1].records) and got[1].high_watermark == 1
        # The fetcher moves on past it: listed with its new offset, nothing else answered.
        after = c.request(fetch(topic, {1: 1}, session, 3, max_wait_ms=100))
        assert after.error_code == ErrorCode.none and answered(after) == {}


def test_session_errors_and_closing(broker: BrokerProcess, topic: str) -> None:
    with WireClient("127.0.0.1", broker.port, timeout=30) as c:
        session = c.request(fetch(topic, {0: 0, 1: 0}, 0, 0)).session_id
        assert session > 0
        wrong = c.request(fetch(topic, {}, session, 5))
        assert wrong.error_code == ErrorCode.invalid_fetch_session_epoch and answered(wrong) == {}
        missing = c.request(fetch(topic, {}, session ^ 0x5A5A5A, 1))
        assert missing.error_code == ErrorCode.fetch_session_id_not_found
        assert missing.session_id == 0
        # Forgetting a partition: it is no longer read; the session goes on at epoch 2.
        c.request(produce(topic, 0, b"zero"))
        fewer = c.request(fetch(topic, {}, session, 1, forgotten=(0,)))
        assert fewer.error_code == ErrorCode.none and answered(fewer) == {}
        # Epoch -1 closes the session and is answered as a sessionless fetch.
        final = c.request(fetch(topic, {0: 0}, session, -1))
        assert final.session_id == 0 and b"zero" in bytes(answered(final)[0].records)
        assert c.request(fetch(topic, {}, session, 2)).error_code == ErrorCode.fetch_session_id_not_found
        # librdkafka's way (id 0, epoch -1): no session at all.
        assert c.request(fetch(topic, {0: 0}, 0, -1)).session_id == 0
