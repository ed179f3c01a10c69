"""aiokafka against a real dmq server."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from support.broker import BrokerProcess


async def _round_trip(bootstrap: str, topic: str, compression: str | None, idempotent: bool) -> list:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=compression,
                                enable_idempotence=idempotent, acks="all")
    await producer.start()
    try:
        for i in range(200):
            await producer.send(topic, value=b"v%d" % i, key=b"k%d" % (i % 10),
                                headers=[("i", b"%d" % i)])
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, fetch_max_wait_ms=100)
    await consumer.start()
    out = []
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or {0}]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        async def collect() -> None:
            while len(out) < 200:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    out.extend(records)
        await asyncio.wait_for(collect(), 30)
    finally:
        await consumer.stop()
    return out


@pytest.mark.parametrize("compression,idempotent", [(None, False), ("gzip", True), ("lz4", False), ("zstd", True), ("snappy", False)])
def test_produce_consume(broker: BrokerProcess, topic_name: str, compression: str | None,
                         idempotent: bool) -> None:
    got = asyncio.run(_round_trip(broker.bootstrap, topic_name, compression, idempotent))
    assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(200))
    assert all(r.key == b"k%d" % (int(r.value[1:]) % 10) for r in got)
    assert all(dict(r.headers)["i"] == r.value[1:] for r in got)
