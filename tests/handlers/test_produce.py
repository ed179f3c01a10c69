"""Produce against a real broker."""

from __future__ import annotations

import time
from datetime import timedelta

from kio.schema.errors import ErrorCode
from support.admin import create_topic
from support.broker import BrokerProcess

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module
from dmq.record.records import encode_batch


def produce(c: WireClient, topic: str, timestamps: list[int]) -> object:
    """Produce v9 of one batch, a record at each of ``timestamps``: partition 0's answer."""
    mod = request_module(0, 9)
    batch = encode_batch([(None, b"v", [])] * len(timestamps), timestamps=timestamps)
    answer = c.request(make(request_class(0, 9), transactional_id=None, acks=-1, timeout=timedelta(seconds=10),
                            topic_data=(make(mod.TopicProduceData, name=topic, partition_data=(
                                make(mod.PartitionProduceData, index=0, records=batch),)),)))
    return answer.responses[0].partition_responses[0]


def test_a_record_outside_the_topics_timestamp_bounds_is_invalid_timestamp(broker: BrokerProcess) -> None:
    """message.timestamp.before.max.ms / after.max.ms were refused as unknown topic configs;
    now set, a record beyond them is refused as Kafka's LogValidator does: INVALID_TIMESTAMP,
    Kafka's message, and each such record in record_errors."""
    with WireClient("127.0.0.1", broker.port) as c:
        assert create_topic(c, "bounded", 1, 1, configs={"message.timestamp.before.max.ms": "3600000",
                                                          "message.timestamp.after.max.ms": "60000"})[0] \
            == ErrorCode.none
        now = int(time.time() * 1000)
        assert produce(c, "bounded", [now - 60_000, now]).error_code == ErrorCode.none
        refused = produce(c, "bounded", [now, now - 7_200_000, now + 3_600_000])
        assert refused.error_code == ErrorCode.invalid_timestamp
        assert refused.error_message == "One or more records have been rejected due to invalid timestamp"
        assert [e.batch_index for e in refused.record_errors] == [1, 2]
        assert refused.record_errors[0].batch_index_error_message.startswith(
            f"Timestamp {now - 7_200_000} of message with offset 1 is out of range. The timestamp should be within [")
        assert produce(c, "bounded", [now]).base_offset == 2  # the refused batch wrote nothing


def produce_records(c: WireClient, topic: str, records: bytes, version: int = 9) -> object:
    """Produce ``records`` to partition 0 with Produce ``version``: partition 0's answer."""
    mod = request_module(0, version)
    answer = c.request(make(request_class(0, version), transactional_id=None, acks=-1,
                            timeout=timedelta(seconds=10),
                            topic_data=(make(mod.TopicProduceData, name=topic, partition_data=(
                                make(mod.PartitionProduceData, index=0, records=records),)),)))
    return answer.responses[0].partition_responses[0]


def test_records_refused_per_request_as_kafkas_validate_records(broker: BrokerProcess) -> None:
    """Kafka's ProduceRequest.validateRecords: a batch whose magic is not 2 is INVALID_RECORD
    (dmq answered UNSUPPORTED_FOR_MESSAGE_FORMAT), and ZSTD below Produce v7
    UNSUPPORTED_COMPRESSION_TYPE (dmq took it); nothing refused is appended."""
    with WireClient("127.0.0.1", broker.port) as c:
        assert create_topic(c, "checked", 1, 1)[0] == ErrorCode.none
        old_magic = bytearray(encode_batch([(None, b"v", [])]))
        old_magic[16] = 1
        refused = produce_records(c, "checked", bytes(old_magic))
        assert refused.error_code == ErrorCode.invalid_record
        assert refused.error_message == \
            "Produce requests with version 9 are only allowed to contain record batches with magic version 2"
        zstd = encode_batch([(None, b"v", [])], codec=4)
        for version in (3, 6):
            refused = produce_records(c, "checked", zstd, version)
            assert refused.error_code == ErrorCode.unsupported_compression_type, version
        assert produce_records(c, "checked", zstd, 7).base_offset == 0
        assert produce_records(c, "checked", encode_batch([(None, b"v", [])])).base_offset == 1


def test_invalid_acks_leaves_unknown_partitions_and_invalid_records_their_own_errors(broker: BrokerProcess) -> None:
    """With acks not 0, 1 or -1, a partition the cluster lacks is UNKNOWN_TOPIC_OR_PARTITION
    and one whose records validateRecords refuses keeps that error (Kafka's KafkaApis checks
    both before ReplicaManager refuses the acks); the others are INVALID_REQUIRED_ACKS."""
    mod = request_module(0, 9)
    one = encode_batch([(None, b"v", [])])
    with WireClient("127.0.0.1", broker.port) as c:
        assert create_topic(c, "acks-checked", 2, 1)[0] == ErrorCode.none
        answer = c.request(make(request_class(0, 9), transactional_id=None, acks=2, timeout=timedelta(seconds=10),
                                topic_data=(make(mod.TopicProduceData, name="acks-checked", partition_data=(
                                    make(mod.PartitionProduceData, index=0, records=one),
                                    make(mod.PartitionProduceData, index=1, records=one + one),
                                    make(mod.PartitionProduceData, index=5, records=one))),)))
        assert {p.index: p.error_code for p in answer.responses[0].partition_responses} == {
            0: ErrorCode.invalid_required_acks, 1: ErrorCode.invalid_record, 5: ErrorCode.unknown_topic_or_partition}
