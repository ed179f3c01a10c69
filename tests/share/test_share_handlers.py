"""ShareFetch (78) and ShareAcknowledge (79) handlers: requests decoded from the wire, the
share service over a real ReplicaManager and the in-memory persister, answers encoded and
read back as a client would."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode
from support.acls import acl, store_with
from support.share import TID, ShareEnv, run_share_env

from dmq.client.wire import decode_response, encode_request
from dmq.cluster.metadata import BrokerInfo, PartitionState, TopicMetadata
from dmq.handlers import HANDLERS, share_acknowledge, share_fetch, supported_apis
from dmq.handlers.context import RequestContext
from dmq.protocol.codec import (
    decode_request,
    encode_response,
    make,
    request_class,
    request_module,
    response_module,
)
from dmq.record.batch import iter_headers
from dmq.security.acl import AclOperation, AclPermissionType, ResourceType
from dmq.security.authorizer import AclAuthorizer
from dmq.share.service import ShareService
from dmq.share.session import ShareSessionCache

FETCH_REQ = request_module(78, 1)
ACK_REQ = request_module(79, 1)


class Metadata:
    """What the handlers read of the metadata store: topic by id, brokers."""

    def __init__(self) -> None:
        self.topic = TopicMetadata("t", TID.hex, {0: PartitionState([1, 2], 2, 3, [1, 2]),
                                                   1: PartitionState([1], 1, 0, [1])})

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self.topic if topic_id == TID else None

    def brokers(self) -> list[BrokerInfo]:
        return [BrokerInfo(1, "h1", 9092), BrokerInfo(2, "h2", 9093, "r2")]


def services(env: ShareEnv | None) -> Any:
    share = ShareService(ShareSessionCache(), env.manager) if env is not None else None
    return SimpleNamespace(share=share, metadata=Metadata(), authorizer=None)


def fetch_request(epoch: int, topics: list[tuple[uuid.UUID, list[tuple[int, list[tuple[int, int, int]]]]]],
                  forgotten: tuple[Any, ...] = (), member: str = "m", max_wait_ms: int = 0) -> Any:
    return make(request_class(78, 1), group_id="g", member_id=member, share_session_epoch=epoch,
                max_wait=timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 20,
                max_records=500, batch_size=500, forgotten_topics_data=forgotten,
                topics=tuple(make(FETCH_REQ.FetchTopic, topic_id=tid, partitions=tuple(
                    make(FETCH_REQ.FetchPartition, partition_index=p, acknowledgement_batches=tuple(
                        make(FETCH_REQ.AcknowledgementBatch, first_offset=f, last_offset=last,
                             acknowledge_types=(t,)) for f, last, t in acks))
                    for p, acks in parts)) for tid, parts in topics))


def ack_request(epoch: int, partition: int, acks: list[tuple[int, int, int]], member: str = "m") -> Any:
    return make(request_class(79, 1), group_id="g", member_id=member, share_session_epoch=epoch,
                topics=(make(ACK_REQ.AcknowledgeTopic, topic_id=TID, partitions=(
                    make(ACK_REQ.AcknowledgePartition, partition_index=partition, acknowledgement_batches=tuple(
                        make(ACK_REQ.AcknowledgementBatch, first_offset=f, last_offset=last,
                             acknowledge_types=(t,)) for f, last, t in acks)),)),))


async def call(svc: Any, request: Any, connection: int = 1, principal: str = "User:ANONYMOUS") -> Any:
    """Through the wire both ways: decode the request, handle, encode and read back."""
    api_key = type(request).__api_key__
    frame = encode_request(request, 5, "test")[4:]
    _, decoded = decode_request(frame, api_key, 1)
    ctx = RequestContext(api_key, 1, 5, "test", "127.0.0.1", response_module(api_key, 1),
                         connection_id=connection, principal=principal)
    response = await HANDLERS[api_key].handle(svc, ctx, decoded)
    encoded = encode_response(5, api_key, response)
    assert isinstance(encoded, bytes)
    return decode_response(type(request), 5, encoded[4:])


def parts(response: Any) -> dict[tuple[uuid.UUID, int], Any]:
    return {(t.topic_id, p.partition_index): p for t in response.responses for p in t.partitions}


def test_registered_and_advertised_at_the_version_librdkafka_sends() -> None:
    assert HANDLERS[78] is share_fetch and HANDLERS[79] is share_acknowledge
    assert supported_apis()[78] == (1, 1) and supported_apis()[79] == (1, 1)


def test_without_a_share_service_the_answer_is_unsupported_version(tmp_path: Path) -> None:
    async def scenario(env: ShareEnv) -> None:
        r = await call(services(None), fetch_request(0, [(TID, [(0, [])])]))
        assert r.error_code == ErrorCode.unsupported_version and r.responses == ()
        r = await call(services(None), ack_request(1, 0, [(0, 0, 1)]))
        assert r.error_code == ErrorCode.unsupported_version
    run_share_env(tmp_path, scenario)


def test_full_fetch_answers_every_partition_with_records_never_null(tmp_path: Path) -> None:
    async def scenario(env: ShareEnv) -> None:
        await env.init_state()
        env.produce(3)
        env.produce(2)
        svc = services(env)
        # the same partition twice, as librdkafka sends it
        r = await call(svc, fetch_request(0, [(TID, [(0, []), (1, [])]), (TID, [(0, [])])]))
        assert r.error_code == ErrorCode.none
        assert r.acquisition_lock_timeout == timedelta(milliseconds=30_000)
        got = parts(r)
        assert set(got) == {(TID, 0), (TID, 1)}
        p0, p1 = got[(TID, 0)], got[(TID, 1)]
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in p0.acquired_records] == [(0, 4, 1)]
        assert [h.base_offset for _, h in iter_headers(bytes(p0.records))] == [0, 3]
        assert p1.records is not None and bytes(p1.records) == b"" and p1.acquired_records == ()
        assert (p0.current_leader.leader_id, p0.current_leader.leader_epoch) == (-1, -1)
        assert r.node_endpoints == ()
    run_share_env(tmp_path, scenario)


def test_acks_in_a_full_fetch_are_an_invalid_request(tmp_path: Path) -> None:
    async def scenario(env: ShareEnv) -> None:
        await env.init_state()
        r = await call(services(env), fetch_request(0, [(TID, [(0, [(0, 1, 1)])])]))
        assert r.error_code == ErrorCode.invalid_request
    run_share_env(tmp_path, scenario)


def test_an_acked_partition_is_echoed_even_without_records(tmp_path: Path) -> None:
    async def scenario(env: ShareEnv) -> None:
        await env.init_state()
        env.produce(4)
        svc = services(env)
        await call(svc, fetch_request(0, [(TID, [(0, []), (1, [])])]))
        r = await call(svc, fetch_request(1, [(TID, [(0, [(0, 3, 1)])])]))
        got = parts(r)
        assert list(got) == [(TID, 0)]  # partition 1: no records, no error, no acks
        assert got[(TID, 0)].acknowledge_error_code == ErrorCode.none
        assert bytes(got[(TID, 0)].records) == b""
        assert env.stored().start_offset == 4
        # a wrong epoch
        r = await call(svc, fetch_request(1, [(TID, [(0, [])])]))
        assert r.error_code == ErrorCode.invalid_share_session_epoch
        # acks of records not held: the partition's acknowledge error
        r = await call(svc, fetch_request(2, [(TID, [(1, [(0, 0, 1)])])]))
        assert parts(r)[(TID, 1)].acknowledge_error_code == ErrorCode.invalid_record_state
    run_share_env(tmp_path, scenario)


def test_share_acknowledge_final_closes_the_session_and_releases_its_records(tmp_path: Path) -> None:
    async def scenario(env: ShareEnv) -> None:
        await env.init_state()
        env.produce(4)
        svc = services(env)
        await call(svc, fetch_request(0, [(TID, [(0, [])])]))
        r = await call(svc, ack_request(0, 0, [(0, 0, 1)]))
        assert r.error_code == ErrorCode.invalid_share_session_epoch
        r = await call(svc, ack_request(-1, 0, [(0, 0, 1)]))
        assert r.error_code == ErrorCode.none
        assert [(p.partition_index, p.error_code) for t in r.responses for p in t.partitions] == [(0, 0)]
        assert svc.share.sessions.get("g", "m") is None
        r = await call(svc, fetch_request(0, [(TID, [(0, [])])], member="other"))
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for a in parts(r)[(TID, 0)].acquired_records] == [(1, 3, 2)]
        r = await call(svc, ack_request(1, 0, [(0, 0, 1)], member="m"))
        assert r.error_code == ErrorCode.share_session_not_found
    run_share_env(tmp_path, scenario)


def test_a_closed_connection_releases_its_sessions_records(tmp_path: Path) -> None:
    async def scenario(env: ShareEnv) -> None:
        await env.init_state()
        env.produce(2)
        svc = services(env)
        await call(svc, fetch_request(0, [(TID, [(0, [])])]), connection=7)
        svc.share.connection_closed(7)
        r = await call(svc, fetch_request(0, [(TID, [(0, [])])], member="other", max_wait_ms=2000),
                       connection=8)
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for a in parts(r)[(TID, 0)].acquired_records] == [(0, 1, 2)]
    run_share_env(tmp_path, scenario)


def test_not_leader_names_the_current_leader_and_its_endpoint(tmp_path: Path) -> None:
    async def scenario(env: ShareEnv) -> None:
        await env.init_state()
        env.rm.become_follower("t", 0, TID.hex, 2, 3, [1, 2], [1, 2])
        svc = services(env)
        r = await call(svc, fetch_request(0, [(TID, [(0, [])]), (uuid.UUID(int=99), [(0, [])])]))
        got = parts(r)
        p0 = got[(TID, 0)]
        assert p0.error_code == ErrorCode.not_leader_or_follower
        assert (p0.current_leader.leader_id, p0.current_leader.leader_epoch) == (2, 3)
        assert [(n.node_id, n.host, n.port, n.rack) for n in r.node_endpoints] == [(2, "h2", 9093, "r2")]
        assert got[(uuid.UUID(int=99), 0)].error_code == ErrorCode.unknown_topic_id
    run_share_env(tmp_path, scenario)


def test_session_limit_and_replaced_sessions(tmp_path: Path) -> None:
    async def scenario(env: ShareEnv) -> None:
        await env.init_state()
        env.produce(3)
        svc = SimpleNamespace(share=ShareService(ShareSessionCache(max_sessions=1), env.manager), authorizer=None,
                              metadata=Metadata())
        await call(svc, fetch_request(0, [(TID, [(0, [])])], member="a"))
        r = await call(svc, fetch_request(0, [(TID, [(0, [])])], member="b", max_wait_ms=20))
        assert r.error_code == ErrorCode.share_session_limit_reached
        # a's new full fetch replaces its session: what the old one held is released first
        r = await call(svc, fetch_request(0, [(TID, [(0, [])])], member="a"))
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for a in parts(r)[(TID, 0)].acquired_records] == [(0, 2, 2)]
    run_share_env(tmp_path, scenario)


def test_records_acquired_after_the_session_went_are_released(tmp_path: Path) -> None:
    async def scenario(env: ShareEnv) -> None:
        await env.init_state()
        svc = services(env)
        waiting = asyncio.ensure_future(call(svc, fetch_request(0, [(TID, [(0, [])])], max_wait_ms=5000),
                                             connection=3))
        await asyncio.sleep(0.05)
        svc.share.connection_closed(3)  # the client went while its fetch waited
        await asyncio.sleep(0.05)  # the release of what the session held is done
        env.produce(2)
        await asyncio.wait_for(waiting, 2)
        # Released, written, and unloaded (nobody holds a record of it): the next fetch
        # reads the state written with the release.
        assert env.manager.share_partition("g", TID, 0) is None
        r = await call(svc, fetch_request(0, [(TID, [(0, [])])], member="other"))
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for a in parts(r)[(TID, 0)].acquired_records] == [(0, 1, 2)]
    run_share_env(tmp_path, scenario)


def test_the_sessions_partitions_are_authorised_on_every_fetch(tmp_path: Path) -> None:
    """Kafka authorises READ on every partition a ShareFetch will read, the session's as
    well as the request's: a principal who may read the group but not the topic gets
    TOPIC_AUTHORIZATION_FAILED through another member's session (whose member id
    ShareGroupDescribe shows it) and acquires nothing; the member itself keeps reading."""
    async def scenario(env: ShareEnv) -> None:
        await env.init_state()
        svc = services(env)
        svc.authorizer = AclAuthorizer(store_with(tmp_path / "acls", [
            acl(ResourceType.GROUP, "g", "User:*", AclOperation.READ, AclPermissionType.ALLOW),
            acl(ResourceType.TOPIC, "t", "User:alice", AclOperation.READ, AclPermissionType.ALLOW)]))
        r = await call(svc, fetch_request(0, [(TID, [(0, [])])]), principal="User:alice")
        assert parts(r)[(TID, 0)].error_code == ErrorCode.none
        env.produce(3)
        r = await call(svc, fetch_request(1, []), principal="User:mallory")  # alice's session, no topics
        assert r.error_code == ErrorCode.none
        refused = parts(r)[(TID, 0)]
        assert refused.error_code == ErrorCode.topic_authorization_failed
        assert refused.acquired_records == () and bytes(refused.records) == b""
        r = await call(svc, fetch_request(2, []), principal="User:alice")
        assert [(a.first_offset, a.last_offset) for a in parts(r)[(TID, 0)].acquired_records] == [(0, 2)]
    run_share_env(tmp_path, scenario)
