"""Group APIs answer bad input with Kafka's error codes."""

from __future__ import annotations

from datetime import timedelta

from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.sync_group.v5.request import SyncGroupRequest
from support.broker import BrokerProcess

from dmq.client.wire import WireClient


def commit(c: WireClient, group: str, topic: str, partition: int, metadata: str = "",
           generation: int = -1, member: str = "") -> ErrorCode:
    req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=generation, member_id=member,  # type: ignore[arg-type]
                              group_instance_id=None, topics=(OffsetCommitRequestTopic(name=topic, partitions=(  # type: ignore[arg-type]
                                  OffsetCommitRequestPartition(partition_index=partition, committed_offset=5,  # type: ignore[arg-type]
                                                               committed_metadata=metadata),)),))
    return c.request(req).topics[0].partitions[0].error_code


def join(c: WireClient, group: str, member: str = "", session_ms: int = 10000, instance: str | None = None):  # noqa: ANN201
    return c.request(JoinGroupRequest(group_id=group, session_timeout=timedelta(milliseconds=session_ms),  # type: ignore[arg-type]
                                      rebalance_timeout=timedelta(seconds=10), member_id=member,
                                      group_instance_id=instance, protocol_type="consumer",
                                      protocols=(JoinGroupRequestProtocol(name="range", metadata=b"x"),)))


def test_commit_errors(broker: BrokerProcess) -> None:
    with WireClient("127.0.0.1", broker.port) as c:
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
        c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="ge-topic"),),  # type: ignore[arg-type]
                                  allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        assert commit(c, "ge-1", "ge-topic", 0) == ErrorCode.none
        assert commit(c, "ge-1", "no-such-topic", 0) == ErrorCode.unknown_topic_or_partition
        assert commit(c, "ge-1", "ge-topic", 7) == ErrorCode.unknown_topic_or_partition
        assert commit(c, "ge-1", "ge-topic", 0, metadata="m" * 5000) == ErrorCode.offset_metadata_too_large
        # A group with members: generation and member must match.
        joined = join(c, "ge-2", instance="i1")
        assert joined.error_code == ErrorCode.none
        assert commit(c, "ge-2", "ge-topic", 0, generation=joined.generation_id + 5,
                      member=joined.member_id) == ErrorCode.illegal_generation
        assert commit(c, "ge-2", "ge-topic", 0, generation=joined.generation_id,
                      member="nobody") == ErrorCode.unknown_member_id
        assert commit(c, "ge-2", "ge-topic", 0) == ErrorCode.unknown_member_id  # group has members
        sync = c.request(SyncGroupRequest(group_id="ge-2", generation_id=joined.generation_id,  # type: ignore[arg-type]
                                          member_id=joined.member_id, group_instance_id="i1",
                                          protocol_type="consumer", protocol_name="range", assignments=()))
        assert sync.error_code == ErrorCode.none
        assert commit(c, "ge-2", "ge-topic", 0, generation=joined.generation_id,
                      member=joined.member_id) == ErrorCode.none


def test_a_generation_commit_to_an_unknown_group(broker: BrokerProcess) -> None:
    """Kafka's validateOffsetCommit: OffsetCommit v9+ answers GROUP_ID_NOT_FOUND, earlier
    versions ILLEGAL_GENERATION (generation -1 makes a simple group, any version)."""
    from kio.schema.offset_commit.v8 import request as v8

    with WireClient("127.0.0.1", broker.port) as c:
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
        c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="ge-topic"),),  # type: ignore[arg-type]
                                  allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        assert commit(c, "ge-unknown", "ge-topic", 0, generation=3, member="m") == ErrorCode.group_id_not_found
        old = c.request(v8.OffsetCommitRequest(
            group_id="ge-unknown", generation_id_or_member_epoch=3, member_id="m",  # type: ignore[arg-type]
            group_instance_id=None, topics=(v8.OffsetCommitRequestTopic(name="ge-topic", partitions=(  # type: ignore[arg-type]
                v8.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,  # type: ignore[arg-type]
                                                committed_leader_epoch=-1, committed_metadata=""),)),)))
        assert old.topics[0].partitions[0].error_code == ErrorCode.illegal_generation
        assert commit(c, "ge-unknown", "ge-topic", 0, member="m") == ErrorCode.none


def test_membership_errors(broker: BrokerProcess) -> None:
    with WireClient("127.0.0.1", broker.port) as c:
        first = join(c, "ge-3")
        assert first.error_code == ErrorCode.member_id_required and first.member_id
        assert join(c, "ge-3", session_ms=10).error_code == ErrorCode.invalid_session_timeout
        assert join(c, "ge-3", member="made-up").error_code == ErrorCode.unknown_member_id
        joined = join(c, "ge-3", member=first.member_id)
        assert joined.error_code == ErrorCode.none
        hb = c.request(HeartbeatRequest(group_id="ge-3", generation_id=joined.generation_id + 1,  # type: ignore[arg-type]
                                        member_id=joined.member_id, group_instance_id=None))
        assert hb.error_code == ErrorCode.illegal_generation
        hb = c.request(HeartbeatRequest(group_id="ge-3", generation_id=joined.generation_id,  # type: ignore[arg-type]
                                        member_id="ghost", group_instance_id=None))
        assert hb.error_code == ErrorCode.unknown_member_id
        # Another incarnation of a static member fences the first.
        a = join(c, "ge-4", instance="inst")
        b = join(c, "ge-4", instance="inst")
        assert a.error_code == b.error_code == ErrorCode.none and a.member_id != b.member_id
        hb = c.request(HeartbeatRequest(group_id="ge-4", generation_id=b.generation_id,  # type: ignore[arg-type]
                                        member_id=a.member_id, group_instance_id="inst"))
        assert hb.error_code == ErrorCode.fenced_instance_id
        # A member of another protocol type cannot join.
        other = c.request(JoinGroupRequest(group_id="ge-4", session_timeout=timedelta(seconds=10),  # type: ignore[arg-type]
                                           rebalance_timeout=timedelta(seconds=10), member_id="",
                                           group_instance_id="other", protocol_type="connect",
                                           protocols=(JoinGroupRequestProtocol(name="x", metadata=b""),)))
        assert other.error_code == ErrorCode.inconsistent_group_protocol


def test_offset_fetch_for_several_groups_and_list_filter(broker: BrokerProcess) -> None:
    from kio.schema.list_groups.v4.request import ListGroupsRequest
    from kio.schema.offset_fetch.v8.request import (
        OffsetFetchRequest,
        OffsetFetchRequestGroup,
        OffsetFetchRequestTopics,
    )

    with WireClient("127.0.0.1", broker.port) as c:
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
        c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="multi"),),  # type: ignore[arg-type]
                                  allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        assert commit(c, "multi-a", "multi", 0) == ErrorCode.none
        resp = c.request(OffsetFetchRequest(require_stable=False, groups=(  # type: ignore[arg-type]
            OffsetFetchRequestGroup(group_id="multi-a", topics=None),  # type: ignore[arg-type]
            OffsetFetchRequestGroup(group_id="multi-b", topics=(  # type: ignore[arg-type]
                OffsetFetchRequestTopics(name="multi", partition_indexes=(0,)),)))))  # type: ignore[arg-type]
        a, b = resp.groups
        assert (a.group_id, a.topics[0].partitions[0].committed_offset) == ("multi-a", 5)
        assert (b.group_id, b.topics[0].partitions[0].committed_offset) == ("multi-b", -1)
        joined = join(c, "multi-live", instance="x")
        assert joined.error_code == ErrorCode.none
        empty = {g.group_id for g in c.request(ListGroupsRequest(states_filter=("Empty",))).groups}  # type: ignore[arg-type]
        live = {g.group_id for g in c.request(ListGroupsRequest(states_filter=("CompletingRebalance",))).groups}  # type: ignore[arg-type]
        assert "multi-a" in empty and "multi-live" not in empty
        assert "multi-live" in live and "multi-a" not in live


def test_offset_delete_of_partitions_the_cluster_does_not_have(broker: BrokerProcess) -> None:
    """Kafka's handleOffsetDeleteRequest: UNKNOWN_TOPIC_OR_PARTITION for a topic or a
    partition that does not exist (before: NONE); the others are deleted."""
    from kio.schema.offset_delete.v0.request import (
        OffsetDeleteRequest,
        OffsetDeleteRequestPartition,
        OffsetDeleteRequestTopic,
    )

    with WireClient("127.0.0.1", broker.port) as c:
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
        c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="ge-del"),),  # type: ignore[arg-type]
                                  allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        assert commit(c, "ge-del-group", "ge-del", 0) == ErrorCode.none
        response = c.request(OffsetDeleteRequest(group_id="ge-del-group", topics=(  # type: ignore[arg-type]
            OffsetDeleteRequestTopic(name="ge-del", partitions=(  # type: ignore[arg-type]
                OffsetDeleteRequestPartition(partition_index=0), OffsetDeleteRequestPartition(partition_index=99))),  # type: ignore[arg-type]
            OffsetDeleteRequestTopic(name="ge-no-such-topic", partitions=(  # type: ignore[arg-type]
                OffsetDeleteRequestPartition(partition_index=0),)))))  # type: ignore[arg-type]
        assert response.error_code == ErrorCode.none
        assert [(t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions] == [
            ("ge-del", 0, ErrorCode.none), ("ge-del", 99, ErrorCode.unknown_topic_or_partition),
            ("ge-no-such-topic", 0, ErrorCode.unknown_topic_or_partition)]


def test_the_empty_group_id(broker: BrokerProcess) -> None:
    """Kafka keeps the empty group id for old clients: FindCoordinator, OffsetCommit,
    OffsetFetch, DescribeGroups and DeleteGroups treat it as any group (before: all but
    DescribeGroups answered INVALID_GROUP_ID); the group membership APIs, OffsetDelete and
    TxnOffsetCommit refuse it."""
    from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
    from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
    from kio.schema.offset_delete.v0.request import (
        OffsetDeleteRequest,
        OffsetDeleteRequestPartition,
        OffsetDeleteRequestTopic,
    )
    from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic

    with WireClient("127.0.0.1", broker.port) as c:
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
        c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="ge-topic"),),  # type: ignore[arg-type]
                                  allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        found = c.request(FindCoordinatorRequest(key=""))  # type: ignore[arg-type]
        assert found.error_code == ErrorCode.none and found.port == broker.port
        assert commit(c, "", "ge-topic", 0) == ErrorCode.none
        fetched = c.request(OffsetFetchRequest(group_id="", require_stable=True, topics=(  # type: ignore[arg-type]
            OffsetFetchRequestTopic(name="ge-topic", partition_indexes=(0,)),)))  # type: ignore[arg-type]
        assert fetched.error_code == ErrorCode.none and fetched.topics[0].partitions[0].committed_offset == 5
        (described,) = c.request(DescribeGroupsRequest(groups=("",), include_authorized_operations=False)).groups  # type: ignore[arg-type]
        assert (described.error_code, described.group_state) == (ErrorCode.none, "Empty")
        assert join(c, "").error_code == ErrorCode.invalid_group_id
        deleted = c.request(OffsetDeleteRequest(group_id="", topics=(OffsetDeleteRequestTopic(  # type: ignore[arg-type]
            name="ge-topic", partitions=(OffsetDeleteRequestPartition(partition_index=0),)),)))  # type: ignore[arg-type]
        assert deleted.error_code == ErrorCode.invalid_group_id
        (result,) = c.request(DeleteGroupsRequest(groups_names=("",))).results  # type: ignore[arg-type]
        assert (result.group_id, result.error_code) == ("", ErrorCode.none)
        fetched = c.request(OffsetFetchRequest(group_id="", require_stable=False, topics=(  # type: ignore[arg-type]
            OffsetFetchRequestTopic(name="ge-topic", partition_indexes=(0,)),)))  # type: ignore[arg-type]
        assert fetched.topics[0].partitions[0].committed_offset == -1
