"""Clients cannot write to internal topics or move their log start: Produce and
DeleteRecords on ``__consumer_offsets`` answer INVALID_TOPIC_EXCEPTION, as Kafka's
ReplicaManager does. Both were accepted: the live coordinator kept serving the commit,
and the next coordinator to load the log (a restart here) replayed a tombstone or a log
start that took the acknowledged commit away."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess

from dmq.group import records as group_records


def committed(admin: AdminClient) -> int:
    deadline = time.monotonic() + 30
    while True:
        try:
            request = ConsumerGroupTopicPartitions("g", [TopicPartition("t", 0)])
            answer = admin.list_consumer_group_offsets([request])["g"].result(10)
            return int(answer.topic_partitions[0].offset)
        except KafkaException as e:  # the coordinator is loading after the restart
            if not e.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_produce_and_delete_records_on_the_offsets_topic_are_refused(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", {"offsets.topic.num.partitions": "1"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(30)
        admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions("g", [TopicPartition("t", 0, 42)])])["g"].result(30)
        assert committed(admin) == 42

        errors: list[KafkaError | None] = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "acks": "all",
                             "message.send.max.retries": 0})
        tombstone_key = group_records.encode_offset_key(group_records.OffsetKey("g", "t", 0))
        producer.produce("__consumer_offsets", key=tombstone_key, value=None, partition=0,
                         on_delivery=lambda error, _message: errors.append(error))
        assert producer.flush(30) == 0
        assert [e.code() if e else None for e in errors] == [KafkaError.TOPIC_EXCEPTION]

        deleted = admin.delete_records([TopicPartition("__consumer_offsets", 0, -1)])
        (future,) = deleted.values()
        try:
            future.result(30)
            raise AssertionError("DeleteRecords on __consumer_offsets was accepted")
        except KafkaException as e:
            assert e.args[0].code() == KafkaError.TOPIC_EXCEPTION, e

        assert broker.stop() == 0
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        assert committed(admin) == 42  # the next load replays the commit, and only it
    finally:
        broker.close()
