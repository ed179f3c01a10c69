"""Every advertised API at every advertised version, against a real broker.

ApiVersions must list only what works: each (API, version) pair the broker
advertises is sent here with kio's schema of that version and must get a
decodable answer without error.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from kio.index import load_entity_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from support.broker import BrokerProcess
from support.transactions import init_transactional_id

from dmq.client.wire import WireClient
from dmq.handlers import HANDLERS, supported_apis
from dmq.protocol.codec import make, request_class, request_module
from dmq.record.records import encode_batch

T5 = timedelta(seconds=5)


def build(api_key: int, version: int, topic: str) -> Any:
    mod = load_entity_module(request_class(api_key, version).__module__.split(".")[2], version,
                             EntityType.request)
    R = request_class(api_key, version)

    def m(cls_name: str, /, **kw: Any) -> Any:
        return make(getattr(mod, cls_name), **kw)

    if api_key == 18:
        return make(R, client_software_name="sweep", client_software_version="1")
    if api_key == 3:
        return make(R, topics=(m("MetadataRequestTopic", name=topic, topic_id=None),),
                    allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False)
    if api_key == 0:
        batch = encode_batch([(b"k", b"v", [])])
        return make(R, transactional_id=None, acks=-1, timeout=T5, topic_data=(
            m("TopicProduceData", name=topic, partition_data=(m("PartitionProduceData", index=0, records=batch),)),))
    if api_key == 1:
        return make(R, replica_id=-1, max_wait=timedelta(milliseconds=10), min_bytes=1, max_bytes=10**6,
                    isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
                    topics=(m("FetchTopic", topic=topic, partitions=(
                        m("FetchPartition", partition=0, fetch_offset=0, partition_max_bytes=10**6,
                          current_leader_epoch=-1, log_start_offset=-1, last_fetched_epoch=-1),)),))
    if api_key == 2:
        return make(R, replica_id=-1, isolation_level=0, topics=(m("ListOffsetsTopic", name=topic, partitions=(
            m("ListOffsetsPartition", partition_index=0, timestamp=-2, current_leader_epoch=-1, max_num_offsets=1),)),))
    if api_key == 19:
        return make(R, timeout=T5, validate_only=False, topics=(m("CreatableTopic", name=topic + "-new",
                    num_partitions=1, replication_factor=1, assignments=(), configs=()),))
    if api_key == 20:
        if version >= 6:
            return make(R, timeout=T5, topics=(m("DeleteTopicState", name=topic, topic_id=None),))
        return make(R, timeout=T5, topic_names=(topic,))
    if api_key == 37:
        return make(R, timeout=T5, validate_only=False,
                    topics=(m("CreatePartitionsTopic", name=topic, count=2, assignments=None),))
    if api_key == 32:
        return make(R, include_synonyms=True, include_documentation=True, resources=(
            m("DescribeConfigsResource", resource_type=2, resource_name=topic, configuration_keys=None),))
    if api_key == 33:
        return make(R, validate_only=False, resources=(m("AlterConfigsResource", resource_type=2, resource_name=topic,
                    configs=(m("AlterableConfig", name="retention.ms", value="1000000"),)),))
    if api_key == 44:
        return make(R, validate_only=False, resources=(m("AlterConfigsResource", resource_type=2, resource_name=topic,
                    configs=(m("AlterableConfig", name="retention.ms", config_operation=0, value="2000000"),)),))
    if api_key == 60:
        return make(R, include_cluster_authorized_operations=False, endpoint_type=1)
    if api_key == 50:
        return make(R, users=None)
    if api_key == 51:
        return make(R, deletions=(), upsertions=(m("ScramCredentialUpsertion", name=f"sweep-{version}", mechanism=1,
                                                   iterations=4096, salt=b"salt", salted_password=b"x" * 32),))
    if api_key == 21:
        return make(R, timeout=T5, topics=(m("DeleteRecordsTopic", name=topic, partitions=(
            m("DeleteRecordsPartition", partition_index=0, offset=1),)),))
    if api_key == 23:  # the one record was written in epoch 0, which ends at the log end
        return make(R, replica_id=-1, topics=(m("OffsetForLeaderTopic", topic=topic, partitions=(
            m("OffsetForLeaderPartition", partition=0, current_leader_epoch=0, leader_epoch=0),)),))
    if api_key == 45:  # on one broker: "move" to where it already is
        return make(R, timeout=T5, topics=(m("ReassignableTopic", name=topic, partitions=(
            m("ReassignablePartition", partition_index=0, replicas=(0,)),)),))
    if api_key == 46:
        return make(R, timeout=T5, topics=None)
    if api_key == 43:
        return make(R, election_type=0, timeout=T5, topic_partitions=(m("TopicPartitions", topic=topic, partitions=(0,)),))
    if api_key == 66:
        return make(R, state_filters=("Empty",), producer_id_filters=())
    if api_key == 61:
        return make(R, topics=(m("TopicRequest", name=topic, partition_indexes=(0,)),))
    if api_key == 35:
        return make(R, topics=(m("DescribableLogDirTopic", topic=topic, partitions=(0,)),))
    if api_key == 22:
        return make(R, transactional_id=None, transaction_timeout=timedelta(seconds=60), producer_id=-1,
                    producer_epoch=-1)
    group = f"g-{topic}"
    if api_key == 10:
        if version >= 4:
            return make(R, key_type=0, coordinator_keys=(group,))
        return make(R, key=group, key_type=0)
    if api_key == 8:  # a commit from outside the group protocol (generation -1)
        return make(R, group_id=group, generation_id=-1, generation_id_or_member_epoch=-1, member_id="",
                    group_instance_id=None, retention_time=timedelta(milliseconds=-1), topics=(m("OffsetCommitRequestTopic", name=topic, partitions=(
                        m("OffsetCommitRequestPartition", partition_index=0, committed_offset=1,
                          committed_leader_epoch=-1, committed_metadata="meta", commit_timestamp=-1),)),))
    if api_key == 9:
        if version >= 8:
            return make(R, require_stable=False, groups=(m("OffsetFetchRequestGroup", group_id=group, topics=(
                m("OffsetFetchRequestTopics", name=topic, partition_indexes=(0,)),)),))
        return make(R, group_id=group, require_stable=False,
                    topics=(m("OffsetFetchRequestTopic", name=topic, partition_indexes=(0,)),))
    if api_key == 16:
        return make(R, states_filter=())
    if api_key == 15:
        return make(R, groups=(group,), include_authorized_operations=False)
    if api_key == 42:
        return make(R, groups_names=(group,))
    if api_key == 47:
        return make(R, group_id=group, topics=(m("OffsetDeleteRequestTopic", name=topic, partitions=(
            m("OffsetDeleteRequestPartition", partition_index=0),)),))
    if api_key == 11:
        return make(R, group_id=group, session_timeout=timedelta(seconds=10), rebalance_timeout=timedelta(seconds=10),
                    member_id="", group_instance_id=f"static-{version}", protocol_type="consumer",
                    protocols=(m("JoinGroupRequestProtocol", name="range", metadata=b"\x00\x00\x00\x00\x00\x00"),),
                    reason=None)
    raise AssertionError(f"no builder for API {api_key}")


def errors_of(api_key: int, resp: Any) -> list[ErrorCode]:
    if api_key == 50:
        return [resp.error_code] + [r.error_code for r in resp.results]
    if api_key == 51:
        return [r.error_code for r in resp.results]
    if api_key in (18, 60, 22, 12, 14, 16, 47, 66, 25, 26):
        return [resp.error_code]
    if api_key == 24:
        if hasattr(resp, "results_by_transaction"):  # v4+
            return [resp.error_code] + [p.partition_error_code for r in resp.results_by_transaction
                                        for t in r.topic_results for p in t.results_by_partition]
        return [p.partition_error_code for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition]
    if api_key == 27:
        return [p.error_code for m in resp.markers for t in m.topics for p in t.partitions]
    if api_key == 28:
        return [p.error_code for t in resp.topics for p in t.partitions]
    if api_key == 65:
        return [t.error_code for t in resp.transaction_states]
    if api_key == 10:
        return [c.error_code for c in resp.coordinators] if hasattr(resp, "coordinators") else [resp.error_code]
    if api_key == 11:
        return [resp.error_code]
    if api_key == 13:
        return [resp.error_code] + [m.error_code for m in getattr(resp, "members", ())]
    if api_key == 8:
        return [p.error_code for t in resp.topics for p in t.partitions]
    if api_key == 9:
        if hasattr(resp, "groups"):
            return [g.error_code for g in resp.groups] + [p.error_code for g in resp.groups for t in g.topics for p in t.partitions]
        top = [resp.error_code] if hasattr(resp, "error_code") else []  # v2+
        return top + [p.error_code for t in resp.topics for p in t.partitions]
    if api_key == 15:
        return [g.error_code for g in resp.groups]
    if api_key == 42:
        return [r.error_code for r in resp.results]
    if api_key == 3:
        return [t.error_code for t in resp.topics] + [p.error_code for t in resp.topics for p in t.partitions]
    if api_key == 0:
        return [p.error_code for t in resp.responses for p in t.partition_responses]
    if api_key == 1:
        top = [resp.error_code] if hasattr(resp, "error_code") else []  # v7+
        return top + [p.error_code for t in resp.responses for p in t.partitions]
    if api_key == 61:  # the Produce above was not idempotent: no producer state
        assert [p.active_producers for t in resp.topics for p in t.partitions] == [()]
        return [p.error_code for t in resp.topics for p in t.partitions]
    if api_key == 35:  # the topic's one partition, holding the record produced above
        assert [[(p.partition_index, p.partition_size > 0) for p in t.partitions]
                for r in resp.results for t in r.topics] == [[(0, True)]], resp
        return [getattr(resp, "error_code", ErrorCode.none)] + [r.error_code for r in resp.results]
    if api_key in (2, 21):
        return [p.error_code for t in resp.topics for p in t.partitions]
    if api_key == 45:
        return [resp.error_code] + [p.error_code for t in resp.responses for p in t.partitions]
    if api_key == 46:
        assert resp.topics == ()
        return [resp.error_code]
    if api_key == 43:  # the only replica already leads
        codes = [p.error_code for r in resp.replica_election_results for p in r.partition_result]
        assert codes == [ErrorCode.election_not_needed]
        return [getattr(resp, "error_code", ErrorCode.none)]
    if api_key == 23:
        assert [(p.leader_epoch, p.end_offset) for t in resp.topics for p in t.partitions] == [(0, 1)]
        return [p.error_code for t in resp.topics for p in t.partitions]
    if api_key == 19:
        return [t.error_code for t in resp.topics]
    if api_key == 20:
        return [t.error_code for t in resp.responses]
    if api_key == 37:
        return [t.error_code for t in resp.results]
    if api_key == 32:
        return [r.error_code for r in resp.results]
    if api_key in (33, 44):
        return [r.error_code for r in resp.responses]
    if api_key in (76, 79):
        return [resp.error_code] + [p.error_code for t in getattr(resp, "responses", ()) for p in t.partitions]
    if api_key == 77:
        return [g.error_code for g in resp.groups]
    if api_key == 78:
        return [resp.error_code] + [e for t in resp.responses for p in t.partitions
                                    for e in (p.error_code, p.acknowledge_error_code)]
    if api_key == 90:
        return [e for g in resp.groups for e in [g.error_code] + [p.error_code for t in g.topics
                                                                   for p in t.partitions]]
    if api_key == 91:
        return [resp.error_code] + [p.error_code for t in resp.responses for p in t.partitions]
    if api_key == 92:
        return [resp.error_code] + [t.error_code for t in resp.responses]
    raise AssertionError(api_key)


SHARE_APIS = (76, 77, 78, 79)
SHARE_OFFSET_APIS = (90, 91, 92)


def share_offsets(c: WireClient, api_key: int, version: int, topic: str) -> Any:
    """A share group whose member joined (initializing the topic's partition for the group),
    then, for Alter and Delete, left (they need an empty group); then the API under test."""
    group, member = f"share-{topic}", f"sweep-member-{api_key}-{version}"
    joined = c.request(make(request_class(76, 1), group_id=group, member_id=member, member_epoch=0,
                            rack_id=None, subscribed_topic_names=(topic,)))
    assert joined.error_code == ErrorCode.none, joined
    R = request_class(api_key, version)
    mod = load_entity_module(R.__module__.split(".")[2], version, EntityType.request)
    if api_key == 90:
        resp = c.request(make(R, groups=(
            make(mod.DescribeShareGroupOffsetsRequestGroup, group_id=group, topics=None),
            make(mod.DescribeShareGroupOffsetsRequestGroup, group_id=group, topics=(
                make(mod.DescribeShareGroupOffsetsRequestTopic, topic_name=topic, partitions=(0,)),)))))
        assert [[(t.topic_name, [p.partition_index for p in t.partitions]) for t in g.topics]
                for g in resp.groups] == [[(topic, [0])]] * 2, resp
        return resp
    left = c.request(make(request_class(76, 1), group_id=group, member_id=member, member_epoch=-1,
                          rack_id=None, subscribed_topic_names=None))
    assert left.error_code == ErrorCode.none, left
    if api_key == 91:
        return c.request(make(R, group_id=group, topics=(make(mod.AlterShareGroupOffsetsRequestTopic, topic_name=topic,
                         partitions=(make(mod.AlterShareGroupOffsetsRequestPartition, partition_index=0,
                                          start_offset=0),)),)))
    return c.request(make(R, group_id=group, topics=(
        make(mod.DeleteShareGroupOffsetsRequestTopic, topic_name=topic),)))


def share_session(c: WireClient, api_key: int, version: int, topic: str) -> Any:
    """A share group member (ShareGroupHeartbeat join), then the API under test: its
    heartbeat, a describe of its group, a full ShareFetch of the topic's partition, or a
    ShareAcknowledge in the session that fetch opened."""
    topic_id = c.request(build(3, 12, topic)).topics[0].topic_id
    group, member = f"share-{topic}", f"sweep-member-{api_key}-{version}"

    def join(v: int) -> Any:
        return c.request(make(request_class(76, v), group_id=group, member_id=member, member_epoch=0,
                              rack_id=None, subscribed_topic_names=(topic,)))

    if api_key == 76:
        resp = join(version)
        assert resp.member_epoch >= 1 and resp.assignment is not None
        return resp
    assert join(1).error_code == ErrorCode.none
    if api_key == 77:
        resp = c.request(make(request_class(77, version), group_ids=(group,), include_authorized_operations=False))
        assert [m.member_id for m in resp.groups[0].members] == [member]
        return resp
    fetch_mod = request_module(78, 1)
    fetch = make(request_class(78, version if api_key == 78 else 1), group_id=group, member_id=member,
                 share_session_epoch=0, max_wait=timedelta(milliseconds=10), min_bytes=1, max_bytes=10**6,
                 max_records=500, batch_size=500, forgotten_topics_data=(),
                 topics=(make(fetch_mod.FetchTopic, topic_id=topic_id, partitions=(
                     make(fetch_mod.FetchPartition, partition_index=0, acknowledgement_batches=()),)),))
    resp = c.request(fetch)
    if api_key == 78:
        return resp
    assert resp.error_code == ErrorCode.none
    ack_mod = request_module(79, version)
    return c.request(make(request_class(79, version), group_id=group, member_id=member, share_session_epoch=1,
                          topics=(make(ack_mod.AcknowledgeTopic, topic_id=topic_id, partitions=(
                              make(ack_mod.AcknowledgePartition, partition_index=0,
                                   acknowledgement_batches=()),)),)))


def group_session(c: WireClient, api_key: int, version: int, topic: str) -> Any:
    """Join a one-member group (static, so one JoinGroup suffices), then send the API under test."""
    joined = c.request(build(11, 9, topic))
    assert joined.error_code == ErrorCode.none
    mod_version = version
    R = request_class(api_key, mod_version)
    mod = load_entity_module(R.__module__.split(".")[2], mod_version, EntityType.request)
    group, member, generation = f"g-{topic}", joined.member_id, joined.generation_id
    if api_key == 14:
        assignment = make(mod.SyncGroupRequestAssignment, member_id=member, assignment=b"\x00\x01")
        resp = c.request(make(R, group_id=group, generation_id=generation, member_id=member,
                              group_instance_id="static-9", protocol_type="consumer", protocol_name="range",
                              assignments=(assignment,)))
        assert bytes(resp.assignment) == b"\x00\x01"
        return resp
    sync = request_class(14, 5)
    smod = load_entity_module("sync_group", 5, EntityType.request)
    c.request(make(sync, group_id=group, generation_id=generation, member_id=member, group_instance_id="static-9",
                   protocol_type="consumer", protocol_name="range",
                   assignments=(make(smod.SyncGroupRequestAssignment, member_id=member, assignment=b""),)))
    if api_key == 12:
        return c.request(make(R, group_id=group, generation_id=generation, member_id=member,
                              group_instance_id="static-9" if version >= 3 else None))
    if version >= 3:
        return c.request(make(R, group_id=group, members=(
            make(mod.MemberIdentity, member_id=member, group_instance_id="static-9", reason=None),)))
    return c.request(make(R, group_id=group, member_id=member))


TXN_APIS = (24, 25, 26, 27, 28, 65)


def fields(cls: Any, **values: Any) -> Any:
    """make() with the fields this version of ``cls`` has."""
    return make(cls, **{k: v for k, v in values.items() if k in cls.__dataclass_fields__})


def txn_session(c: WireClient, api_key: int, version: int, topic: str) -> Any:
    """A transactional id with an open transaction on ``topic``-0, then the API under test."""
    txn_id, group = f"sweep-txn-{api_key}-{version}", f"g-{topic}"
    pid, epoch = init_transactional_id(c, txn_id)
    R = request_class(api_key, version)
    mod = load_entity_module(R.__module__.split(".")[2], version, EntityType.request)
    add = request_class(24, 3)
    amod = load_entity_module("add_partitions_to_txn", 3, EntityType.request)

    def add_partition() -> None:
        r = c.request(make(add, v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
                           v3_and_below_producer_epoch=epoch,
                           v3_and_below_topics=(make(amod.AddPartitionsToTxnTopic, name=topic, partitions=(0,)),)))
        assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.none

    if api_key == 24 and version >= 4:  # the batched form: add, then verify what was added
        def txn(verify: bool) -> Any:
            return make(mod.AddPartitionsToTxnTransaction, transactional_id=txn_id, producer_id=pid,
                        producer_epoch=epoch, verify_only=verify,
                        topics=(make(mod.AddPartitionsToTxnTopic, name=topic, partitions=(0,)),))
        added = c.request(make(R, transactions=(txn(False),)))
        assert errors_of(24, added) == [ErrorCode.none, ErrorCode.none], added
        return c.request(make(R, transactions=(txn(True),)))
    if api_key == 24:
        return c.request(make(R, v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
                              v3_and_below_producer_epoch=epoch,
                              v3_and_below_topics=(make(mod.AddPartitionsToTxnTopic, name=topic, partitions=(0,)),)))
    if api_key == 25:
        return c.request(make(R, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, group_id=group))
    if api_key == 26:
        add_partition()
        return c.request(make(R, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=True))
    if api_key == 27:
        add_partition()
        return c.request(make(R, markers=(make(
            mod.WritableTxnMarker, producer_id=pid, producer_epoch=epoch, transaction_result=False,
            coordinator_epoch=0, topics=(make(mod.WritableTxnMarkerTopic, name=topic, partition_indexes=(0,)),)),)))
    if api_key == 28:
        c.request(make(request_class(25, 3), transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                       group_id=group))
        part = fields(mod.TxnOffsetCommitRequestPartition, partition_index=0, committed_offset=1,
                      committed_leader_epoch=-1, committed_metadata=None)
        return c.request(fields(R, transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch,
                                generation_id=-1, member_id="", group_instance_id=None,
                                topics=(make(mod.TxnOffsetCommitRequestTopic, name=topic, partitions=(part,)),)))
    add_partition()  # 65: an Ongoing transaction has a start time
    resp = c.request(make(R, transactional_ids=(txn_id,)))
    assert resp.transaction_states[0].transaction_state == "Ongoing"
    return resp


# The ACL APIs answer SECURITY_DISABLED on this broker (no authorizer): every version of them
# is swept against a broker with one in tests/security/test_acl_admin_clients.py.
ACL_APIS = (29, 30, 31)
# SaslHandshake and SaslAuthenticate need a SASL listener: every version of theirs is swept in
# tests/security/test_secure_listeners.py (test_every_sasl_api_version).
SASL_APIS = (17, 36)
PAIRS = [(key, v) for key, (lo, hi) in sorted(supported_apis().items()) for v in range(lo, hi + 1)
         if key not in ACL_APIS and key not in SASL_APIS]


@pytest.mark.parametrize("api_key,version", PAIRS, ids=[f"{HANDLERS[k].__name__.rsplit('.', 1)[1]}-v{v}" for k, v in PAIRS])
def test_every_advertised_version(broker: BrokerProcess, api_key: int, version: int) -> None:
    topic = f"sweep-{api_key}-{version}"
    with WireClient("127.0.0.1", broker.port) as c:
        c.request(build(3, 12, topic))  # the topic exists (auto-created)
        c.request(build(0, 9, topic))   # and holds a record
        if api_key in (12, 13, 14):
            resp = group_session(c, api_key, version, topic)
        elif api_key in SHARE_APIS:
            resp = share_session(c, api_key, version, topic)
        elif api_key in SHARE_OFFSET_APIS:
            resp = share_offsets(c, api_key, version, topic)
        elif api_key in TXN_APIS:
            resp = txn_session(c, api_key, version, topic)
        else:
            if api_key in (15, 42, 47):  # a group with committed offsets to look at or delete
                c.request(build(8, 9, topic))
            if api_key == 66:  # a transactional id to look at
                init_transactional_id(c, "sweep-txn")
            resp = c.request(build(api_key, version, topic))
            if api_key == 11 and resp.error_code == ErrorCode.member_id_required:
                assert version == 4  # dynamic members of v4+ must rejoin with the given id (KIP-394)
                req = build(api_key, version, topic)
                resp = c.request(make(type(req), **{**{f: getattr(req, f) for f in req.__dataclass_fields__},
                                                    "member_id": resp.member_id}))
        assert errors_of(api_key, resp) and all(e == ErrorCode.none for e in errors_of(api_key, resp)), resp
        if api_key == 1:
            records = resp.responses[0].partitions[0].records
            assert records and len(records) > 61
        if api_key == 2:
            assert resp.topics[0].partitions[0].offset == 0
        if api_key == 9:
            parts = resp.groups[0].topics[0].partitions if version >= 8 else resp.topics[0].partitions
            assert parts[0].committed_offset == -1  # nothing committed by this group yet
        if api_key == 11:
            assert resp.generation_id == 1 and resp.leader == resp.member_id
        # The connection still works after the answer (framing was right).
        again = c.request(build(18, 3, topic))
        assert again.error_code == ErrorCode.none
