"""A topic's ``compression.type`` decides how its batches are stored, as in Kafka: the
leader recompresses a batch sent with another codec (``producer``, the default, keeps
what the producer sent). dmq accepted the setting and ignored it: a gzip topic held
uncompressed batches, an ``uncompressed`` topic kept zstd ones that consumers without
zstd cannot read."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess

from dmq.record.batch import iter_headers

CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def stored_codecs(broker: BrokerProcess, topic: str) -> list[int]:
    segments = sorted((broker.data_dir / f"{topic}-0").glob("*.log"))
    return [h.compression for seg in segments for _, h in iter_headers(seg.read_bytes())]


@pytest.mark.parametrize(("topic_codec", "producer_codec"), [
    ("gzip", "none"), ("uncompressed", "zstd"), ("lz4", "snappy"), ("producer", "lz4")])
def test_batches_are_stored_with_the_topics_codec(broker: BrokerProcess, topic_codec: str,
                                                  producer_codec: str) -> None:
    topic = f"codec-{topic_codec}-{producer_codec}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": topic_codec})])[topic].result(15)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": producer_codec,
                         "enable.idempotence": True, "linger.ms": 20})
    sent = [(f"k{i}".encode(), f"value {i} ".encode() * 20) for i in range(300)]
    errors: list[object] = []
    for key, value in sent:
        producer.produce(topic, value, key, partition=0,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and errors == []
    wanted = CODECS[producer_codec if topic_codec == "producer" else topic_codec]
    codecs = stored_codecs(broker, topic)
    assert codecs and set(codecs) == {wanted}
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[tuple[bytes, bytes, int]] = []
    for _ in range(100):
        if len(got) == len(sent):
            break
        for m in consumer.consume(500, 1.0):
            assert m.error() is None
            got.append((m.key(), m.value(), m.offset()))
    consumer.close()
    assert [(k, v) for k, v, _ in got] == sent
    assert [o for _, _, o in got] == list(range(len(sent)))


def test_a_recompressed_batch_over_max_message_bytes_is_refused(tmp_path: Path) -> None:
    """Kafka checks the size of the batch it stores: a batch that only fits compressed is
    MESSAGE_TOO_LARGE on an uncompressed topic, and nothing is appended."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("codec-big", 1, 1, config={
            "compression.type": "uncompressed", "max.message.bytes": "20000"})])["codec-big"].result(15)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "gzip",
                             "linger.ms": 50, "batch.size": 1000000, "message.max.bytes": 1000000})
        errors: list[str] = []
        for _ in range(100):
            producer.produce("codec-big", b"x" * 1000, partition=0,
                             on_delivery=lambda err, _msg: errors.append(err.name()) if err else None)
        producer.flush(30)
        assert errors and set(errors) == {"MSG_SIZE_TOO_LARGE"}
        assert stored_codecs(broker, "codec-big") == []
    finally:
        broker.close()
