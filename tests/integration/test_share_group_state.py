"""The share coordinator over the wire: InitializeShareGroupState (83), ReadShareGroupState
(84), WriteShareGroupState (85), DeleteShareGroupState (86),
ReadShareGroupStateSummary (87) and FindCoordinator v6's share key type against a real
``dmq server``, and the state surviving a SIGKILL and a restart on the same data directory."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_share_group_state.v0 import request as delete_req
from kio.schema.errors import ErrorCode
from kio.schema.initialize_share_group_state.v0 import request as init_req
from kio.schema.read_share_group_state.v0 import request as read_req
from kio.schema.read_share_group_state_summary.v1 import request as summary_req
from kio.schema.write_share_group_state.v1 import request as write_req
from support.broker import BrokerProcess

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class
from dmq.share.records import coordinator_key

GROUP = "sg"
NUM_STATE_PARTITIONS = 5


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", {"share.coordinator.state.topic.num.partitions":
                                          str(NUM_STATE_PARTITIONS)})
    b.start()
    try:
        yield b
    finally:
        b.close()


def create_topic(c: WireClient, name: str, partitions: int) -> uuid.UUID:
    resp = c.request(make(CreateTopicsRequest, timeout=timedelta(seconds=10), validate_only=False, topics=(
        make(CreatableTopic, name=name, num_partitions=partitions, replication_factor=1, assignments=(),
             configs=()),)))
    (topic,) = resp.topics
    assert topic.error_code == ErrorCode.none, topic
    assert topic.topic_id is not None
    return topic.topic_id  # type: ignore[no-any-return]


def one(resp: Any) -> Any:
    (topic,) = resp.results
    (partition,) = topic.partitions
    return partition


def initialize(c: WireClient, topic_id: uuid.UUID, partition: int, state_epoch: int, start: int) -> ErrorCode:
    return ErrorCode(one(c.request(make(init_req.InitializeShareGroupStateRequest, group_id=GROUP, topics=(
        make(init_req.InitializeStateData, topic_id=topic_id, partitions=(
            make(init_req.PartitionData, partition=partition, state_epoch=state_epoch,
                 start_offset=start),)),)))).error_code)


def write(c: WireClient, topic_id: uuid.UUID, partition: int, state_epoch: int, leader_epoch: int,
          start: int, batches: list[tuple[int, int, int, int]], dcc: int = -1) -> ErrorCode:
    return ErrorCode(one(c.request(make(write_req.WriteShareGroupStateRequest, group_id=GROUP, topics=(
        make(write_req.WriteStateData, topic_id=topic_id, partitions=(
            make(write_req.PartitionData, partition=partition, state_epoch=state_epoch,
                 leader_epoch=leader_epoch, start_offset=start, delivery_complete_count=dcc,
                 state_batches=tuple(make(write_req.StateBatch, first_offset=f, last_offset=la,
                                          delivery_state=s, delivery_count=n) for f, la, s, n in batches)),)),)))
                         ).error_code)


def read(c: WireClient, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> Any:
    return one(c.request(make(read_req.ReadShareGroupStateRequest, group_id=GROUP, topics=(
        make(read_req.ReadStateData, topic_id=topic_id, partitions=(
            make(read_req.PartitionData, partition=partition, leader_epoch=leader_epoch),)),))))


def summary(c: WireClient, topic_id: uuid.UUID, partition: int) -> Any:
    return one(c.request(make(summary_req.ReadShareGroupStateSummaryRequest, group_id=GROUP, topics=(
        make(summary_req.ReadStateSummaryData, topic_id=topic_id, partitions=(
            make(summary_req.PartitionData, partition=partition, leader_epoch=-1),)),))))


def delete(c: WireClient, topic_id: uuid.UUID, partition: int) -> ErrorCode:
    return ErrorCode(one(c.request(make(delete_req.DeleteShareGroupStateRequest, group_id=GROUP, topics=(
        make(delete_req.DeleteStateData, topic_id=topic_id, partitions=(
            make(delete_req.PartitionData, partition=partition),)),)))).error_code)


def batches(p: Any) -> list[tuple[int, int, int, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches]


def test_state_over_the_wire_with_fencing_and_a_crash_restart(broker: BrokerProcess) -> None:
    with WireClient("127.0.0.1", broker.port) as c:
        topic_id = create_topic(c, "shared", 2)
        assert initialize(c, topic_id, 0, 1, 0) == ErrorCode.none
        assert initialize(c, topic_id, 1, 1, 100) == ErrorCode.none
        assert write(c, topic_id, 0, 1, 3, 0, [(0, 4, 2, 1), (5, 9, 0, 2)], dcc=5) == ErrorCode.none
        p = read(c, topic_id, 0, 3)
        assert (ErrorCode(p.error_code), p.state_epoch, p.start_offset) == (ErrorCode.none, 1, 0)
        assert batches(p) == [(0, 4, 2, 1), (5, 9, 0, 2)]
        # fencing: an older leader epoch, an older state epoch; a state never initialized
        assert write(c, topic_id, 0, 1, 2, 0, [(5, 5, 2, 3)]) == ErrorCode.fenced_leader_epoch
        assert ErrorCode(read(c, topic_id, 0, 2).error_code) == ErrorCode.fenced_leader_epoch
        assert write(c, topic_id, 0, 0, 3, 0, [(5, 5, 2, 3)]) == ErrorCode.fenced_state_epoch
        assert write(c, topic_id, 7, 1, 3, 0, []) == ErrorCode.invalid_request
        assert write(c, uuid.uuid4(), 0, 1, 3, 0, []) == ErrorCode.invalid_request
        assert ErrorCode(read(c, topic_id, 1, 4).error_code) == ErrorCode.none  # records leader epoch 4
        s = summary(c, topic_id, 0)
        assert (s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count) == (1, 3, 0, 5)
        assert initialize(c, topic_id, 1, 2, 50) == ErrorCode.none
        assert delete(c, topic_id, 1) == ErrorCode.none

    broker.kill()  # SIGKILL: whatever was answered must be in the log
    broker.start()
    with WireClient("127.0.0.1", broker.port) as c:
        p = read(c, topic_id, 0, 3)
        assert (ErrorCode(p.error_code), p.state_epoch, p.start_offset) == (ErrorCode.none, 1, 0)
        assert batches(p) == [(0, 4, 2, 1), (5, 9, 0, 2)]
        assert summary(c, topic_id, 0).delivery_complete_count == 5
        assert write(c, topic_id, 0, 1, 2, 0, []) == ErrorCode.fenced_leader_epoch  # still fenced
        gone = read(c, topic_id, 1, -1)  # deleted stays deleted
        assert (gone.state_epoch, gone.start_offset, batches(gone)) == (0, -1, [])
        assert write(c, topic_id, 1, 2, 4, 50, []) == ErrorCode.invalid_request
    assert "Traceback" not in broker.log_text()


def test_find_coordinator_v6_finds_a_share_partitions_state_coordinator(broker: BrokerProcess) -> None:
    with WireClient("127.0.0.1", broker.port) as c:
        topic_id = create_topic(c, "found", 1)
        key = coordinator_key("my:group", topic_id, 0)  # a group id may hold colons
        resp = c.request(make(request_class(10, 6), key_type=2, coordinator_keys=(key, "nonsense", "g:x:0")))
        found, bad, bad_id = resp.coordinators
        assert (ErrorCode(found.error_code), found.port) == (ErrorCode.none, broker.port)
        assert ErrorCode(bad.error_code) == ErrorCode.invalid_request
        assert ErrorCode(bad_id.error_code) == ErrorCode.invalid_request
        old = c.request(make(request_class(10, 5), key_type=2, coordinator_keys=(key,)))
        assert ErrorCode(old.coordinators[0].error_code) == ErrorCode.invalid_request  # SHARE needs v6


def test_metadata_for_an_internal_topic_creates_it_as_the_coordinator_would(broker: BrokerProcess) -> None:
    """A client asking for ``__share_group_state`` (or another internal topic) before its
    coordinator used it gets the internal topic, created with its coordinator's partition
    count and configs, not an ordinary topic with the broker's defaults (Kafka's
    AutoTopicCreationManager): an ordinary one-partition topic would hold every state
    in one partition, and one created with a replication factor below its
    min.insync.replicas could never be written."""
    from kio.schema.describe_configs.v4 import request as dc_req
    from kio.schema.metadata.v12 import request as md_req

    with WireClient("127.0.0.1", broker.port) as c:
        resp = c.request(make(md_req.MetadataRequest, topics=(
            make(md_req.MetadataRequestTopic, name="__share_group_state", topic_id=None),),
            allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        (topic,) = resp.topics
        assert topic.error_code == ErrorCode.none and topic.is_internal
        assert len(topic.partitions) == NUM_STATE_PARTITIONS
        configs = c.request(make(dc_req.DescribeConfigsRequest, include_synonyms=False,
                                 include_documentation=False, resources=(make(
                                     dc_req.DescribeConfigsResource, resource_type=2,
                                     resource_name="__share_group_state",
                                     configuration_keys=("cleanup.policy",)),))).results[0].configs
        assert [(e.name, e.value) for e in configs] == [("cleanup.policy", "compact")]
