"""ShareFetch (78): acknowledge, then acquire records for a share-group member (KIP-932).

Only v1 (what librdkafka's ShareConsumer sends; v2's record_limit mode and RENEW are
not implemented). The request's entries are not deduplicated by clients: the share
service merges them by partition. The answer follows what librdkafka parses: Records
is never null (b"" when nothing was acquired), every partition that carried
acknowledgements is in it with its AcknowledgeErrorCode, CurrentLeader is -1/-1 except
with NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH (then the metadata's leader, whose
endpoint is in NodeEndpoints). Advertised in ApiVersions only with the rest of share
groups (``SHARE_GROUPS_ADVERTISED``); without a share service (``services.share``) the
broker answers UNSUPPORTED_VERSION, as Kafka does with share groups disabled.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import (
    NO_THROTTLE,
    SHARE_GROUPS_ADVERTISED,
    BrokerServices,
    RequestContext,
)
from dmq.protocol.codec import make
from dmq.share.partition import AckBatch
from dmq.share.service import PartitionOutcome, ShareOutcome
from dmq.share.session import PartitionEntry

API_KEY = 78
MIN_VERSION = 1
MAX_VERSION = 1
ADVERTISED = SHARE_GROUPS_ADVERTISED

NO_TOPIC_ID = uuid.UUID(int=0)
_LEADER_MOVED = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)


def entries_of(topics: Any) -> list[PartitionEntry]:
    """A request's Topics as entries (duplicates kept: the session cache merges them)."""
    return [PartitionEntry(t.topic_id or NO_TOPIC_ID, p.partition_index, tuple(
                AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                for b in p.acknowledgement_batches))
            for t in topics for p in t.partitions]


def authorized_entries(services: BrokerServices, ctx: RequestContext, group_id: str | None, topics: Any
                       ) -> tuple[ErrorCode, list[PartitionEntry], dict[tuple[uuid.UUID, int], PartitionOutcome]]:
    """KIP-932's rules for ShareFetch and ShareAcknowledge: READ on the group (else the
    request's error), READ on each topic (a refused topic's partitions are answered
    TOPIC_AUTHORIZATION_FAILED and left out). Returns (error, entries to serve, refused)."""
    entries = entries_of(topics)
    if not authorize(services, ctx, AclOperation.READ, ResourceType.GROUP, group_id or ""):
        return ErrorCode.group_authorization_failed, [], {}
    readable = readable_partitions(services, ctx)
    if readable is None:
        return ErrorCode.none, entries, {}
    unreadable = {e.topic_id for e in entries if not readable((e.topic_id, e.partition))}
    refused = PartitionOutcome(ErrorCode.topic_authorization_failed)
    return (ErrorCode.none, [e for e in entries if e.topic_id not in unreadable],
            {(e.topic_id, e.partition): refused for e in entries if e.topic_id in unreadable})


def readable_partitions(services: BrokerServices, ctx: RequestContext
                        ) -> Callable[[tuple[uuid.UUID, int]], bool] | None:
    """Whether this request's principal may READ a session partition's topic now (None
    without an authorizer). A topic that no longer exists is left to the fetch, which
    answers it UNKNOWN_TOPIC_ID."""
    if services.authorizer is None:
        return None
    known: dict[uuid.UUID, bool] = {}

    def readable(tp: tuple[uuid.UUID, int]) -> bool:
        allowed = known.get(tp[0])
        if allowed is None:
            meta = services.metadata.topic_by_id(tp[0])
            allowed = known[tp[0]] = meta is None or authorize(
                services, ctx, AclOperation.READ, ResourceType.TOPIC, meta.name)
        return allowed
    return readable


def current_leader(services: BrokerServices, topic_id: uuid.UUID, partition: int,
                   error: ErrorCode) -> tuple[int, int]:
    """(leader id, leader epoch) to tell a client whose partition moved; -1/-1 otherwise."""
    if error not in _LEADER_MOVED:
        return -1, -1
    topic = services.metadata.topic_by_id(topic_id)
    state = topic.partitions.get(partition) if topic is not None else None
    if state is None or state.leader < 0:
        return -1, -1
    return state.leader, state.leader_epoch


def node_endpoints(services: BrokerServices, schema: Any, leaders: set[int],
                   listener: str = "PLAINTEXT") -> tuple[Any, ...]:
    return tuple(make(schema.NodeEndpoint, node_id=b.broker_id, host=host, port=port, rack=b.rack)
                 for b in services.metadata.brokers() if b.broker_id in leaders
                 for host, port in (b.endpoint(listener),))


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    share = services.share
    lock_timeout = timedelta(milliseconds=share.lock_duration_ms(request.group_id or "") if share is not None else 0)
    refusal, entries, refused = authorized_entries(services, ctx, request.group_id, request.topics)
    if share is None:
        outcome = ShareOutcome(ErrorCode.unsupported_version)
    elif refusal != ErrorCode.none:
        outcome = ShareOutcome(refusal)
    elif refused and not entries:
        outcome = ShareOutcome(ErrorCode.none, refused)  # nothing it may read: no session change
    else:
        forgotten = [(t.topic_id or NO_TOPIC_ID, p) for t in request.forgotten_topics_data
                     for p in t.partitions]
        outcome = await share.share_fetch(
            request.group_id, request.member_id, request.share_session_epoch, entries,
            forgotten, ctx.connection_id, max_wait_ms=int(request.max_wait.total_seconds() * 1000),
            max_bytes=request.max_bytes, max_records=request.max_records, batch_size=request.batch_size,
            waiting=ctx.dispatched, readable=readable_partitions(services, ctx))
        if refused:
            outcome = ShareOutcome(outcome.error, {**outcome.partitions, **refused})
    by_topic: dict[uuid.UUID, list[Any]] = {}
    leaders: set[int] = set()
    for (topic_id, index), p in outcome.partitions.items():
        leader_id, leader_epoch = current_leader(services, topic_id, index, p.error)
        if leader_id >= 0:
            leaders.add(leader_id)
        by_topic.setdefault(topic_id, []).append(make(
            schema.PartitionData, partition_index=index, error_code=p.error,
            acknowledge_error_code=int(p.ack_error if p.ack_error is not None else ErrorCode.none),
            current_leader=make(schema.LeaderIdAndEpoch, leader_id=leader_id, leader_epoch=leader_epoch),
            records=p.records,
            acquired_records=tuple(make(schema.AcquiredRecords, first_offset=a.first, last_offset=a.last,
                                        delivery_count=a.delivery_count) for a in p.acquired)))
    responses = tuple(make(schema.ShareFetchableTopicResponse, topic_id=topic_id, partitions=tuple(parts))
                      for topic_id, parts in by_topic.items())
    return make(schema.ShareFetchResponse, throttle_time=NO_THROTTLE, error_code=outcome.error,
                acquisition_lock_timeout=lock_timeout, responses=responses,
                node_endpoints=node_endpoints(services, schema, leaders, ctx.listener))
