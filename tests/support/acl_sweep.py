"""Requests of every API as a principal without rights, and what each must be refused with.

``probes(...)`` builds, for each API key, requests that name the sweep's resources (its
topic, group, share group, transactional id) and the Kafka errors their answers may carry:
every error code nested in an answer must be one of the probe's refusals, and the answer's
top-level codes a refusal or NONE. A probe with ``listing=True`` asks for a list the
principal may not see any of: its answer must list nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, fields, is_dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.protocol import extensions as ext
from dmq.protocol.codec import make, request_class, request_module
from dmq.record.records import encode_batch

T5 = timedelta(seconds=5)
TOPIC_AUTH = ErrorCode.topic_authorization_failed
GROUP_AUTH = ErrorCode.group_authorization_failed
CLUSTER_AUTH = ErrorCode.cluster_authorization_failed
TXN_AUTH = ErrorCode.transactional_id_authorization_failed
TRANSACTIONAL = 0x10  # a record batch's attributes bit


@dataclass(frozen=True)
class Probe:
    label: str
    api_key: int
    version: int
    request: Any
    refusals: frozenset[ErrorCode]
    listing: str | None = None  # the answer's field that must be empty


@dataclass(frozen=True)
class Names:
    topic: str
    topic_id: uuid.UUID
    group: str
    share_group: str
    transactional_id: str


def error_codes(entity: Any, depth: int = 0) -> Iterator[tuple[int, ErrorCode]]:
    """Every (depth, ErrorCode) in a kio entity, depth 0 for the answer's own fields."""
    for f in fields(entity):
        value = getattr(entity, f.name)
        if isinstance(value, ErrorCode):
            yield depth, value
        elif f.name == "acknowledge_error_code" and isinstance(value, int):
            yield depth, ErrorCode(value)
        elif isinstance(value, tuple):
            for item in value:
                if is_dataclass(item):
                    yield from error_codes(item, depth + 1)
        elif is_dataclass(value) and not isinstance(value, type):
            yield from error_codes(value, depth + 1)


def probes(versions: dict[int, tuple[int, int]], n: Names) -> list[Probe]:
    """Probes for each API key in ``versions`` at its highest version (a few at two)."""
    out: list[Probe] = []

    def add(label: str, key: int, version: int, refusals: set[ErrorCode], listing: str | None = None,
            **values: Any) -> None:
        out.append(Probe(label, key, version, make(request_class(key, version), **values),
                         frozenset(refusals), listing))

    def m(key: int, version: int, cls: str, **values: Any) -> Any:
        return make(getattr(request_module(key, version), cls), **values)

    t, g, s, x = n.topic, n.group, n.share_group, n.transactional_id
    for key, (low, high) in sorted(versions.items()):
        v = high
        if key == 0:
            add("produce", key, v, {TOPIC_AUTH}, transactional_id=None, acks=-1, timeout=T5, topic_data=(
                m(key, v, "TopicProduceData", name=t, partition_data=(
                    m(key, v, "PartitionProduceData", index=0, records=encode_batch([(b"k", b"v", [])])),)),))
            transactional = encode_batch([(b"k", b"v", [])], producer_id=1, producer_epoch=0, base_sequence=0,
                                         attributes_extra=TRANSACTIONAL)
            add("transactional produce", key, v, {TXN_AUTH}, transactional_id=x, acks=-1, timeout=T5, topic_data=(
                m(key, v, "TopicProduceData", name=t, partition_data=(
                    m(key, v, "PartitionProduceData", index=0, records=transactional),)),))
        elif key == 1:
            for label, replica in (("fetch", -1), ("fetch as a follower", 1)):
                add(label, key, v, {TOPIC_AUTH}, replica_id=replica, max_wait=timedelta(milliseconds=10),
                    min_bytes=1, max_bytes=10**6, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                    forgotten_topics_data=(), topics=(m(key, v, "FetchTopic", topic=t, topic_id=n.topic_id,
                                                        partitions=(m(key, v, "FetchPartition", partition=0,
                                                                      fetch_offset=0, partition_max_bytes=10**6,
                                                                      current_leader_epoch=-1, log_start_offset=-1,
                                                                      last_fetched_epoch=-1),)),))
        elif key == 2:
            add("list offsets", key, v, {TOPIC_AUTH}, replica_id=-1, isolation_level=0, topics=(
                m(key, v, "ListOffsetsTopic", name=t, partitions=(m(
                    key, v, "ListOffsetsPartition", partition_index=0, timestamp=-1, current_leader_epoch=-1,
                    max_num_offsets=1),)),))
        elif key == 3:
            for label, topics in (("metadata of the topic and a new one", (t, t + "-new")),):
                add(label, key, v, {TOPIC_AUTH}, allow_auto_topic_creation=True,
                    include_cluster_authorized_operations=False, include_topic_authorized_operations=False,
                    topics=tuple(m(key, v, "MetadataRequestTopic", name=name, topic_id=None) for name in topics))
            add("metadata of every topic", key, v, set(), listing="topics", topics=None,
                allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False)
        elif key == 8:
            add("offset commit", key, v, {GROUP_AUTH}, group_id=g, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, retention_time=timedelta(milliseconds=-1), topics=(m(
                    key, v, "OffsetCommitRequestTopic", name=t, partitions=(m(
                        key, v, "OffsetCommitRequestPartition", partition_index=0, committed_offset=0,
                        committed_leader_epoch=-1, committed_metadata="", commit_timestamp=-1),)),))
        elif key == 9:
            add("offset fetch", key, v, {GROUP_AUTH}, require_stable=False, groups=(
                m(key, v, "OffsetFetchRequestGroup", group_id=g, member_id=None, member_epoch=-1, topics=None),))
        elif key == 10:
            add("find a group's coordinator", key, v, {GROUP_AUTH}, key_type=0, coordinator_keys=(g,))
            add("find a transaction coordinator", key, v, {TXN_AUTH}, key_type=1, coordinator_keys=(x,))
            if v >= 6:
                add("find a share coordinator", key, v, {CLUSTER_AUTH}, key_type=2,
                    coordinator_keys=(f"{s}:{n.topic_id}:0",))
        elif key == 11:
            add("join group", key, v, {GROUP_AUTH}, group_id=g, session_timeout=timedelta(seconds=10),
                rebalance_timeout=timedelta(seconds=10), member_id="", group_instance_id=None,
                protocol_type="consumer", reason=None, protocols=(
                    m(key, v, "JoinGroupRequestProtocol", name="range", metadata=b"\x00\x00"),))
        elif key == 12:
            add("heartbeat", key, v, {GROUP_AUTH}, group_id=g, generation_id=1, member_id="m",
                group_instance_id=None)
        elif key == 13:
            add("leave group", key, v, {GROUP_AUTH}, group_id=g, members=(
                m(key, v, "MemberIdentity", member_id="m", group_instance_id=None, reason=None),))
        elif key == 14:
            add("sync group", key, v, {GROUP_AUTH}, group_id=g, generation_id=1, member_id="m",
                group_instance_id=None, protocol_type="consumer", protocol_name="range", assignments=())
        elif key == 15:
            add("describe groups", key, v, {GROUP_AUTH}, groups=(g, s), include_authorized_operations=False)
        elif key == 16:
            add("list groups", key, v, set(), listing="groups", states_filter=(), types_filter=())
        elif key == 19:
            add("create topics", key, v, {TOPIC_AUTH}, timeout=T5, validate_only=False, topics=(
                m(key, v, "CreatableTopic", name=t + "-new", num_partitions=1, replication_factor=1,
                  assignments=(), configs=()),))
        elif key == 20:
            add("delete topics by name", key, v, {TOPIC_AUTH}, timeout=T5, topics=(
                m(key, v, "DeleteTopicState", name=t, topic_id=None),))
            add("delete topics by id", key, v, {TOPIC_AUTH}, timeout=T5, topics=(
                m(key, v, "DeleteTopicState", name=None, topic_id=n.topic_id),))
        elif key == 21:
            add("delete records", key, v, {TOPIC_AUTH}, timeout=T5, topics=(m(
                key, v, "DeleteRecordsTopic", name=t, partitions=(
                    m(key, v, "DeleteRecordsPartition", partition_index=0, offset=1),)),))
        elif key == 22:
            add("init a transactional producer id", key, v, {TXN_AUTH}, transactional_id=x,
                transaction_timeout=timedelta(seconds=60), producer_id=-1, producer_epoch=-1)
            add("init an idempotent producer id", key, v, {CLUSTER_AUTH}, transactional_id=None,
                transaction_timeout=timedelta(seconds=60), producer_id=-1, producer_epoch=-1)
        elif key == 23:
            add("offset for leader epoch", key, v, {TOPIC_AUTH}, replica_id=-1, topics=(m(
                key, v, "OffsetForLeaderTopic", topic=t, partitions=(m(
                    key, v, "OffsetForLeaderPartition", partition=0, current_leader_epoch=-1, leader_epoch=0),)),))
        elif key == 24:
            if low <= 3:
                add("add partitions to a transaction (client)", key, 3, {TXN_AUTH},
                    v3_and_below_transactional_id=x, v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
                    v3_and_below_topics=(m(key, 3, "AddPartitionsToTxnTopic", name=t, partitions=(0,)),))
            if v >= 4:
                add("add partitions to transactions (broker)", key, v, {CLUSTER_AUTH}, transactions=(m(
                    key, v, "AddPartitionsToTxnTransaction", transactional_id=x, producer_id=1, producer_epoch=0,
                    verify_only=False, topics=(m(key, v, "AddPartitionsToTxnTopic", name=t, partitions=(0,)),)),))
        elif key == 25:
            add("add offsets to a transaction", key, v, {TXN_AUTH}, transactional_id=x, producer_id=1,
                producer_epoch=0, group_id=g)
        elif key == 26:
            add("end a transaction", key, v, {TXN_AUTH}, transactional_id=x, producer_id=1, producer_epoch=0,
                committed=False)
        elif key == 27:
            add("write transaction markers", key, v, {CLUSTER_AUTH}, markers=(m(
                key, v, "WritableTxnMarker", producer_id=1, producer_epoch=0, transaction_result=False,
                coordinator_epoch=0, topics=(m(key, v, "WritableTxnMarkerTopic", name=t,
                                               partition_indexes=(0,)),)),))
        elif key == 28:
            add("transactional offset commit", key, v, {TXN_AUTH}, transactional_id=x, group_id=g, producer_id=1,
                producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None, topics=(m(
                    key, v, "TxnOffsetCommitRequestTopic", name=t, partitions=(m(
                        key, v, "TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=0,
                        committed_leader_epoch=-1, committed_metadata=None),)),))
        elif key == 29:
            add("describe ACLs", key, v, {CLUSTER_AUTH}, resource_type_filter=1, resource_name_filter=None,
                pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1, permission_type=1)
        elif key == 30:
            add("create ACLs", key, v, {CLUSTER_AUTH}, creations=(m(
                key, v, "AclCreation", resource_type=2, resource_name=t, resource_pattern_type=3,
                principal="User:ANONYMOUS", host="*", operation=2, permission_type=3),))
        elif key == 31:
            add("delete ACLs", key, v, {CLUSTER_AUTH}, filters=(m(
                key, v, "DeleteAclsFilter", resource_type_filter=1, resource_name_filter=None,
                pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
                permission_type=1),))
        elif key == 32:
            add("describe configs", key, v, {TOPIC_AUTH, CLUSTER_AUTH, GROUP_AUTH}, include_synonyms=False,
                include_documentation=False, resources=tuple(
                    m(key, v, "DescribeConfigsResource", resource_type=rt, resource_name=name,
                      configuration_keys=None) for rt, name in ((2, t), (4, "0"), (32, s))))
        elif key == 33:
            add("alter configs", key, v, {TOPIC_AUTH, CLUSTER_AUTH}, validate_only=False, resources=tuple(
                m(key, v, "AlterConfigsResource", resource_type=rt, resource_name=name, configs=(
                    m(key, v, "AlterableConfig", name=cname, value=value),))
                for rt, name, cname, value in ((2, t, "retention.ms", "1"),
                                               (4, "", "log.cleaner.backoff.ms", "1000"))))
        elif key == 37:
            add("create partitions", key, v, {TOPIC_AUTH}, timeout=T5, validate_only=False, topics=(
                m(key, v, "CreatePartitionsTopic", name=t, count=5, assignments=None),))
        elif key == 42:
            add("delete groups", key, v, {GROUP_AUTH}, groups_names=(g, s))
        elif key == 43:
            add("elect leaders", key, v, {CLUSTER_AUTH}, election_type=0, timeout=T5, topic_partitions=(
                m(key, v, "TopicPartitions", topic=t, partitions=(0,)),))
        elif key == 44:
            add("incremental alter configs", key, v, {TOPIC_AUTH, CLUSTER_AUTH, GROUP_AUTH},
                validate_only=False, resources=tuple(
                    m(key, v, "AlterConfigsResource", resource_type=rt, resource_name=name, configs=(
                        m(key, v, "AlterableConfig", name=cname, config_operation=0, value=value),))
                    for rt, name, cname, value in ((2, t, "retention.ms", "1"),
                                                   (4, "", "log.cleaner.backoff.ms", "1000"),
                                                   (32, s, "share.auto.offset.reset", "earliest"))))
        elif key == 45:
            add("alter partition reassignments", key, v, {CLUSTER_AUTH}, timeout=T5, topics=(m(
                key, v, "ReassignableTopic", name=t, partitions=(
                    m(key, v, "ReassignablePartition", partition_index=0, replicas=(0,)),)),))
        elif key == 46:
            add("list partition reassignments", key, v, {CLUSTER_AUTH}, timeout=T5, topics=None)
        elif key == 47:
            add("offset delete", key, v, {GROUP_AUTH}, group_id=g, topics=(m(
                key, v, "OffsetDeleteRequestTopic", name=t, partitions=(
                    m(key, v, "OffsetDeleteRequestPartition", partition_index=0),)),))
        elif key == 61:
            add("describe producers", key, v, {TOPIC_AUTH}, topics=(
                m(key, v, "TopicRequest", name=t, partition_indexes=(0,)),))
        elif key == 65:
            add("describe transactions", key, v, {TXN_AUTH}, transactional_ids=(x,))
        elif key == 66:
            add("list transactions", key, v, set(), listing="transaction_states", state_filters=(),
                producer_id_filters=(), duration_filter=-1, transactional_id_pattern=None)
        elif key == 76:
            add("share group heartbeat", key, v, {GROUP_AUTH}, group_id=s, member_id=str(uuid.uuid4()),
                member_epoch=0, rack_id=None, subscribed_topic_names=(t,))
        elif key == 77:
            add("share group describe", key, v, {GROUP_AUTH}, group_ids=(s,), include_authorized_operations=False)
        elif key == 78:
            add("share fetch", key, v, {GROUP_AUTH}, group_id=s, member_id=str(uuid.uuid4()), share_session_epoch=0,
                max_wait=timedelta(milliseconds=10), min_bytes=1, max_bytes=10**6, max_records=10, batch_size=10,
                forgotten_topics_data=(), topics=(m(key, v, "FetchTopic", topic_id=n.topic_id, partitions=(
                    m(key, v, "FetchPartition", partition_index=0, acknowledgement_batches=()),)),))
        elif key == 79:
            add("share acknowledge", key, v, {GROUP_AUTH}, group_id=s, member_id=str(uuid.uuid4()),
                share_session_epoch=1, topics=(m(key, v, "AcknowledgeTopic", topic_id=n.topic_id, partitions=(
                    m(key, v, "AcknowledgePartition", partition_index=0, acknowledgement_batches=(
                        m(key, v, "AcknowledgementBatch", first_offset=0, last_offset=0,
                          acknowledge_types=(1,)),)),)),))
        elif key in (83, 84, 85, 86, 87):
            data = {83: "InitializeStateData", 84: "ReadStateData", 85: "WriteStateData", 86: "DeleteStateData",
                    87: "ReadStateSummaryData"}[key]
            add(f"share group state ({key})", key, v, {CLUSTER_AUTH}, group_id=s, topics=(m(
                key, v, data, topic_id=n.topic_id, partitions=(m(
                    key, v, "PartitionData", partition=0, state_epoch=1, leader_epoch=0, start_offset=0,
                    delivery_complete_count=0, state_batches=()),)),))
        elif key == 35:  # Kafka: Describe on the cluster; before v3 only an empty answer says no
            topics = (m(key, v, "DescribableLogDirTopic", topic=t, partitions=(0,)),)
            if v >= 3:
                add("describe log dirs", key, v, {CLUSTER_AUTH}, topics=topics)
            else:
                add("describe log dirs", key, v, set(), listing="results", topics=topics)
        elif key == 50:  # Kafka: Describe on the cluster (the SASL part's API)
            add("describe user SCRAM credentials", key, v, {CLUSTER_AUTH}, users=None)
        elif key == 51:  # Kafka: Alter on the cluster
            add("alter user SCRAM credentials", key, v, {CLUSTER_AUTH}, deletions=(
                m(key, v, "ScramCredentialDeletion", name="sweep-user", mechanism=1),), upsertions=())
        elif key == 90:
            add("describe share group offsets", key, v, {GROUP_AUTH}, groups=(
                m(key, v, "DescribeShareGroupOffsetsRequestGroup", group_id=s, topics=None),))
        elif key == 91:
            add("alter share group offsets", key, v, {GROUP_AUTH}, group_id=s, topics=(m(
                key, v, "AlterShareGroupOffsetsRequestTopic", topic_name=t, partitions=(
                    m(key, v, "AlterShareGroupOffsetsRequestPartition", partition_index=0, start_offset=0),)),))
        elif key == 92:
            add("delete share group offsets", key, v, {GROUP_AUTH}, group_id=s, topics=(
                m(key, v, "DeleteShareGroupOffsetsRequestTopic", topic_name=t),))
    return out


# APIs Kafka answers whoever asks (no ACL check): ApiVersions, DescribeCluster, and the
# authentication itself (SaslHandshake, SaslAuthenticate).
UNCHECKED = frozenset({18, 60, 17, 36})


def extension_probes(n: Names) -> list[Probe]:
    """dmq's own APIs (not advertised: only dmq's client and CLI send them), each refused
    as its nearest Kafka API refuses."""
    t, s = n.topic, n.share_group
    return [
        Probe("check transactions (half messages)", ext.CHECK_TRANSACTIONS_KEY, 0,
              ext.CheckTransactionsRequest(producer_group="sweep", describe_only=False, answers=()),
              frozenset({TXN_AUTH})),
        Probe("query records", ext.QUERY_RECORDS_KEY, 0, ext.QueryRecordsRequest(
            key=b"k", max_records=10, max_bytes=10**6, topics=(ext.QueryTopic(name=t, partitions=(
                ext.QueryPartition(partition_index=0),)),)), frozenset({TOPIC_AUTH})),
        Probe("describe delayed records", ext.DESCRIBE_DELAYED_KEY, 0, ext.DescribeDelayedRecordsRequest(
            topics=(ext.DelayedTopicRequest(name=t, partitions=(0,)),)), frozenset({TOPIC_AUTH})),
        Probe("describe share partitions", ext.DESCRIBE_SHARE_PARTITIONS_KEY, 0, ext.DescribeSharePartitionsRequest(
            group_id=s, topics=(ext.SharePartitionsTopic(topic_id=n.topic_id, partitions=(0,)),)),
              frozenset({GROUP_AUTH})),
        Probe("describe broker runtime", ext.DESCRIBE_BROKER_RUNTIME_KEY, 0, ext.DescribeBrokerRuntimeRequest(),
              frozenset({CLUSTER_AUTH})),
    ]
