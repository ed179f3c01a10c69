"""Fetch (1): read batches below the high watermark, long-polling on max_wait/min_bytes.

A read_committed consumer (isolation level 1) reads below the last stable
offset and gets the aborted transactions of what it read, to skip their records.

A follower's fetch (``replica_id >= 0``) reads up to the log end offset and
tells the leader how far the follower is (its fetch offset), which moves the
high watermark and the ISR. ``current_leader_epoch`` (v9+) is checked as KIP-320 says.

Fetch sessions (KIP-227, v7+) are kept in ``services.fetch_sessions``
(dmq.replication.fetch_session): an incremental request reads every partition of its
session and is answered with the partitions that changed.
"""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import SpliceRecords, constructor, make
from dmq.replication.fetch_session import FetchContext
from dmq.replication.partition import ReadResult
from dmq.replication.replica_manager import FetchRequestPartition

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 12

READ_COMMITTED = 1


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    requested = [
        FetchRequestPartition(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                              getattr(p, "current_leader_epoch", -1), getattr(p, "log_start_offset", -1))
        for t in request.topics
        for p in t.partitions
    ]
    now_ms = int(time.monotonic() * 1000)
    sessions = services.fetch_sessions
    if ctx.api_version >= 7:
        forgotten = [(f.topic, index) for f in request.forgotten_topics_data for index in f.partitions]
        context = sessions.new_context(request.session_id, request.session_epoch, requested,
                                       forgotten, request.replica_id >= 0, now_ms)
    else:
        context = FetchContext(requested)
    wanted = context.partitions
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    max_bytes = getattr(request, "max_bytes", 2**31 - 1)
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED and request.replica_id < 0
    if not wanted:
        results: list[ReadResult] = []
    elif services.authorizer is None:
        results = await services.replica_manager.fetch_messages(
            wanted, max_wait_ms, request.min_bytes, max_bytes, max(request.replica_id, -1),
            read_committed, waiting=ctx.dispatched)
    else:
        results = await _authorized_fetch(services, ctx, request, wanted, max_wait_ms, max_bytes,
                                          read_committed)
    answer = sessions.respond(context, results, int(time.monotonic() * 1000))
    partition_data = constructor(
        schema.PartitionData, "partition_index", "error_code", "high_watermark",
        "last_stable_offset", "log_start_offset", "aborted_transactions", "preferred_read_replica",
        "records")
    by_topic: dict[str, list[Any]] = {}
    for req, res in answer.partitions:
        parts = by_topic.get(req.topic)
        if parts is None:
            parts = by_topic[req.topic] = []
        parts.append(partition_data(
            req.partition, res.error, res.high_watermark, res.last_stable_offset,
            res.log_start_offset,
            None if res.aborted is None else tuple(
                make(schema.AbortedTransaction, producer_id=pid, first_offset=first)
                for pid, first in res.aborted),
            -1, SpliceRecords.of(res.data) if res.data is not None else b""))
    topic_response = constructor(schema.FetchableTopicResponse, "topic", "partitions")
    return constructor(schema.FetchResponse, "throttle_time", "error_code", "session_id", "responses")(
        NO_THROTTLE, answer.error, answer.session_id,
        tuple(topic_response(name, tuple(parts)) for name, parts in by_topic.items()))


_REFUSED = ReadResult(ErrorCode.topic_authorization_failed, -1, -1, -1, None)


async def _authorized_fetch(services: BrokerServices, ctx: RequestContext, request: Any,
                            wanted: list[FetchRequestPartition], max_wait_ms: int, max_bytes: int,
                            read_committed: bool) -> list[ReadResult]:
    """Kafka's rules: a follower's fetch needs CLUSTER_ACTION on the cluster, a consumer's
    READ on each topic; refused partitions get TOPIC_AUTHORIZATION_FAILED."""
    if request.replica_id >= 0:
        allowed = wanted if authorize(services, ctx, AclOperation.CLUSTER_ACTION) else []
    else:
        readable = {name: authorize(services, ctx, AclOperation.READ, ResourceType.TOPIC, name)
                    for name in {w.topic for w in wanted}}
        allowed = [w for w in wanted if readable[w.topic]]
    if len(allowed) == len(wanted):
        return await services.replica_manager.fetch_messages(
            wanted, max_wait_ms, request.min_bytes, max_bytes, max(request.replica_id, -1),
            read_committed, waiting=ctx.dispatched)
    got = iter(await services.replica_manager.fetch_messages(
        allowed, max_wait_ms, request.min_bytes, max_bytes, max(request.replica_id, -1),
        read_committed, waiting=ctx.dispatched) if allowed else [])
    kept = {id(w) for w in allowed}
    return [next(got) if id(w) in kept else _REFUSED for w in wanted]
