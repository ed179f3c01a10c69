"""A partition is listed in Metadata with this broker as its leader only once this broker
leads it. A topic is in the metadata store before its logs exist (they are made on a
worker thread); until then its partitions answer LEADER_NOT_AVAILABLE with leader -1, as
a Kafka broker's metadata cache shows a leader only after the LeaderAndIsr that made it
one. Without that, a client that saw the topic a moment after another client created it
was sent to a leader that answered NOT_LEADER_OR_FOLLOWER, and librdkafka's
``get_watermark_offsets`` raised it to the caller (CI, tests/spark/test_pipeline.py)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from support.broker import BrokerProcess

from dmq.client.wire import WireClient

PARTITIONS = 1000  # the window this opens lasts seconds: every log is made and fsynced


def metadata(c: WireClient, topic: str) -> Any:
    return c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),),  # type: ignore[arg-type]
                                     allow_auto_topic_creation=False, include_topic_authorized_operations=False))


def end_offset_error(c: WireClient, topic: str, partition: int, leader_epoch: int) -> ErrorCode:
    answer = c.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(  # type: ignore[arg-type]
        ListOffsetsTopic(name=topic, partitions=(  # type: ignore[arg-type]
            ListOffsetsPartition(partition_index=partition, current_leader_epoch=leader_epoch,  # type: ignore[arg-type]
                                 timestamp=-1),)),)))
    return answer.topics[0].partitions[0].error_code  # type: ignore[no-any-return]


def test_partitions_of_a_topic_being_created_have_a_leader_only_once_it_serves_them(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        created: list[ErrorCode] = []

        def create() -> None:
            with WireClient("127.0.0.1", broker.port, timeout=120) as other:
                answer = other.request(CreateTopicsRequest(timeout=timedelta(seconds=120), validate_only=False,  # type: ignore[arg-type]
                                                           topics=(CreatableTopic(  # type: ignore[arg-type]
                                                               name="readiness", num_partitions=PARTITIONS,
                                                               replication_factor=1, assignments=(), configs=()),)))
                created.append(answer.topics[0].error_code)

        creating = threading.Thread(target=create)
        not_yet: set[int] = set()
        served = 0
        with WireClient("127.0.0.1", broker.port, timeout=60) as c:
            (me,) = (b.node_id for b in metadata(c, "readiness").brokers)
            creating.start()
            deadline = time.monotonic() + 120
            while not created and time.monotonic() < deadline:
                topic = metadata(c, "readiness").topics[0]
                if topic.error_code == ErrorCode.none and topic.partitions:
                    last = max(topic.partitions, key=lambda p: p.partition_index)
                    if last.error_code == ErrorCode.leader_not_available:
                        assert last.leader_id == -1, last
                        not_yet.add(last.partition_index)
                    else:
                        # Listed with a leader: that leader serves it.
                        assert (last.error_code, last.leader_id) == (ErrorCode.none, me), last
                        assert end_offset_error(c, "readiness", last.partition_index,
                                                last.leader_epoch) == ErrorCode.none
                        served += 1
                time.sleep(0.005)
            creating.join(120)
            assert created == [ErrorCode.none]
            # Once CreateTopics has answered, every partition has its leader, which serves it.
            topic = metadata(c, "readiness").topics[0]
            assert len(topic.partitions) == PARTITIONS
            assert {(p.error_code, p.leader_id) for p in topic.partitions} == {(ErrorCode.none, me)}
            assert {end_offset_error(c, "readiness", p, 0) for p in (0, PARTITIONS - 1)} == {ErrorCode.none}
        # The window was seen (the check above is not vacuous on this machine).
        assert not_yet, f"the topic was never listed while its logs were being made ({served} polls served)"
    finally:
        broker.close()
