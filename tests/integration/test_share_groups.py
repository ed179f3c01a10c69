"""Share groups (KIP-932), group side, over the wire: ShareGroupHeartbeat v1 and
ShareGroupDescribe v1 against a real ``dmq server``, and the classic group APIs
on a share group's id. (tests/integration/test_share_consumer.py drives them with
confluent-kafka's ShareConsumer.)"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from support.broker import BrokerProcess

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_module


def create_topic(c: WireClient, name: str, partitions: int) -> uuid.UUID:
    resp = c.request(CreateTopicsRequest(timeout=timedelta(seconds=10), validate_only=False, topics=(  # type: ignore[arg-type]
        CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, assignments=(),  # type: ignore[arg-type]
                       configs=()),)))
    (topic,) = resp.topics
    assert topic.error_code == ErrorCode.none, topic
    assert topic.topic_id is not None
    return topic.topic_id  # type: ignore[no-any-return]


def heartbeat(c: WireClient, group: str, member: str, epoch: int, topics: list[str] | None = None) -> Any:
    return c.request(ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,  # type: ignore[arg-type]
                                                rack_id=None,
                                                subscribed_topic_names=tuple(topics) if topics is not None else None))


def partitions(resp: Any, topic_id: uuid.UUID) -> list[int]:
    assert resp.assignment is not None
    return sorted(p for tp in resp.assignment.topic_partitions if tp.topic_id == topic_id for p in tp.partitions)


def settle(c: WireClient, group: str, epochs: dict[str, int], topics: list[str]) -> dict[str, Any]:
    """Heartbeat every member (full requests, so each answer carries its assignment)
    until all of them are at one epoch."""
    for _ in range(5):
        answers = {m: heartbeat(c, group, m, e, topics) for m, e in epochs.items()}
        assert all(r.error_code == ErrorCode.none for r in answers.values()), answers
        epochs.update({m: r.member_epoch for m, r in answers.items()})
        if len(set(epochs.values())) == 1:
            return answers
    raise AssertionError(f"members did not settle on one epoch: {epochs}")


def test_share_group_apis_are_advertised_and_check_their_input(broker: BrokerProcess) -> None:
    with WireClient("127.0.0.1", broker.port) as c:
        apis = {k.api_key: (k.min_version, k.max_version)
                for k in c.request(ApiVersionsRequest(client_software_name="t",  # type: ignore[arg-type]
                                                      client_software_version="1")).api_keys}
        # librdkafka's ShareConsumer sends exactly v1 of these (v0 was Kafka 4.0's preview).
        assert {k: apis.get(k) for k in (76, 77, 78, 79)} == {k: (1, 1) for k in (76, 77, 78, 79)}
        bad = heartbeat(c, "sg-bad", "m", 0, None)
        assert (bad.error_code, bad.member_id) == (ErrorCode.invalid_request, None)
        missing = heartbeat(c, "sg-missing", "m", 3)
        assert missing.error_code == ErrorCode.group_id_not_found


def test_three_members_share_one_partition_and_two_split_four(broker: BrokerProcess) -> None:
    with WireClient("127.0.0.1", broker.port) as c:
        one = create_topic(c, "share-one", 1)
        four = create_topic(c, "share-four", 4)
        # Three members on a one-partition topic: every member gets partition 0.
        epochs = {}
        for member in ("a" * 22, "b" * 22, "c" * 22):
            joined = heartbeat(c, "sg-one", member, 0, ["share-one"])
            assert joined.error_code == ErrorCode.none and joined.member_id == member
            assert joined.heartbeat_interval == timedelta(milliseconds=5000)
            assert partitions(joined, one) == [0]
            epochs[member] = joined.member_epoch
        answers = settle(c, "sg-one", epochs, ["share-one"])
        assert {m: partitions(r, one) for m, r in answers.items()} == {m: [0] for m in epochs}

        # Two members on a four-partition topic: two partitions each.
        x = heartbeat(c, "sg-four", "x", 0, ["share-four"])
        assert partitions(x, four) == [0, 1, 2, 3]
        y = heartbeat(c, "sg-four", "y", 0, ["share-four"])
        answers = settle(c, "sg-four", {"x": x.member_epoch, "y": y.member_epoch}, ["share-four"])
        got = {m: partitions(r, four) for m, r in answers.items()}
        assert sorted(len(p) for p in got.values()) == [2, 2] and sorted(got["x"] + got["y"]) == [0, 1, 2, 3]
        epoch = answers["x"].member_epoch
        # A steady heartbeat (no topics) with nothing changed: no assignment in the answer.
        steady = heartbeat(c, "sg-four", "x", epoch)
        assert steady.error_code == ErrorCode.none and steady.assignment is None

        (described,) = c.request(ShareGroupDescribeRequest(group_ids=("sg-four",),  # type: ignore[arg-type]
                                                           include_authorized_operations=False)).groups
        assert (described.error_code, described.group_state, described.assignor_name) == \
            (ErrorCode.none, "Stable", "simple")
        assert described.group_epoch == described.assignment_epoch == epoch
        members = {m.member_id: m for m in described.members}
        assert set(members) == {"x", "y"}
        assert members["x"].subscribed_topic_names == ("share-four",)
        assert [(tp.topic_id, tp.topic_name, sorted(tp.partitions))
                for tp in members["x"].assignment.topic_partitions] == [(four, "share-four", got["x"])]

        # y leaves: x gets everything at a higher epoch.
        left = heartbeat(c, "sg-four", "y", -1)
        assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
        alone = heartbeat(c, "sg-four", "x", epoch)
        assert alone.member_epoch > epoch and partitions(alone, four) == [0, 1, 2, 3]


def test_classic_apis_on_a_share_group_id(broker: BrokerProcess) -> None:
    with WireClient("127.0.0.1", broker.port) as c:
        create_topic(c, "share-classic", 1)
        assert heartbeat(c, "sg-classic", "m", 0, ["share-classic"]).error_code == ErrorCode.none
        joined = c.request(JoinGroupRequest(group_id="sg-classic", session_timeout=timedelta(seconds=10),  # type: ignore[arg-type]
                                            rebalance_timeout=timedelta(seconds=10), member_id="",
                                            group_instance_id="i", protocol_type="consumer",
                                            protocols=(JoinGroupRequestProtocol(name="range", metadata=b"x"),)))
        assert joined.error_code == ErrorCode.inconsistent_group_protocol
        committed = c.request(OffsetCommitRequest(
            group_id="sg-classic", generation_id_or_member_epoch=-1, member_id="",  # type: ignore[arg-type]
            group_instance_id=None, topics=(OffsetCommitRequestTopic(name="share-classic", partitions=(  # type: ignore[arg-type]
                OffsetCommitRequestPartition(partition_index=0, committed_offset=5, committed_metadata=""),)),)))  # type: ignore[arg-type]
        assert committed.topics[0].partitions[0].error_code == ErrorCode.group_id_not_found
        (dead,) = c.request(DescribeGroupsRequest(groups=("sg-classic",),  # type: ignore[arg-type]
                                                  include_authorized_operations=False)).groups
        assert (dead.error_code, dead.group_state) == (ErrorCode.none, "Dead")
        listed = c.request(ListGroupsRequest(states_filter=(), types_filter=("share",))).groups  # type: ignore[arg-type]
        assert ("sg-classic", "share", "Stable", "share") in \
            {(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed}
        assert all(g.group_type == "share" for g in listed)


def share_fetch(c: WireClient, group: str, member: str, topic_id: uuid.UUID) -> Any:
    """A full ShareFetch v1 of partition 0 that does not wait; the partition's answer.
    (The session stays open: the connection closing releases what it acquired.)"""
    req = request_module(78, 1)
    resp = c.request(make(req.ShareFetchRequest, group_id=group, member_id=member, share_session_epoch=0,
                          max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 20, max_records=500,
                          batch_size=500, forgotten_topics_data=(), topics=(
                              make(req.FetchTopic, topic_id=topic_id, partitions=(
                                  make(req.FetchPartition, partition_index=0, acknowledgement_batches=()),)),)))
    assert resp.error_code == ErrorCode.none, resp
    (topic,) = resp.responses
    (partition,) = topic.partitions
    return partition


def stored_start(c: WireClient, group: str, topic_id: uuid.UUID) -> int:
    """The start offset of the group's state of partition 0 (-1: there is none)."""
    req = request_module(87, 1)
    resp = c.request(make(req.ReadShareGroupStateSummaryRequest, group_id=group, topics=(
        make(req.ReadStateSummaryData, topic_id=topic_id, partitions=(
            make(req.PartitionData, partition=0, leader_epoch=-1),)),)))
    (partition,) = resp.results[0].partitions
    assert partition.error_code == ErrorCode.none, partition
    return partition.start_offset  # type: ignore[no-any-return]


def test_share_fetches_create_state_only_for_members_of_share_groups(broker: BrokerProcess) -> None:
    """A ShareFetch for any group id made the partition's leader create that group's
    durable state in __share_group_state, so anyone with READ on a group pattern could
    fill it with states of made-up groups that no admin API deletes. Now only a member
    of the share group, fetching a partition assigned in it, gets a state created."""
    with WireClient("127.0.0.1", broker.port) as c:
        topic = create_topic(c, "share-gated", 1)
        assert heartbeat(c, "sg-gated", "m", 0, ["share-gated"]).error_code == ErrorCode.none
        assert share_fetch(c, "sg-made-up", "m", topic).error_code == ErrorCode.group_id_not_found
        assert stored_start(c, "sg-made-up", topic) == -1
        assert share_fetch(c, "sg-gated", "stranger", topic).error_code == ErrorCode.unknown_member_id
        assert stored_start(c, "sg-gated", topic) == -1
        assert share_fetch(c, "sg-gated", "m", topic).error_code == ErrorCode.none
        assert stored_start(c, "sg-gated", topic) == 0
