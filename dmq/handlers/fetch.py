"""Fetch (1): read batches below the high watermark, long-polling on max_wait/min_bytes.

A read_committed consumer (isolation level 1) reads below the last stable
offset and gets the aborted transactions of what it read, to skip their records.

A follower's fetch (``replica_id >= 0``) reads up to the log end offset and
tells the leader how far the follower is (its fetch offset), which moves the
high watermark and the ISR. ``current_leader_epoch`` (v9+) is checked as KIP-320 says.

Fetch sessions (KIP-227) are not kept: every response carries session id 0,
which tells clients to send full fetch requests.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import SpliceRecords, constructor, make
from dmq.replication.replica_manager import FetchRequestPartition

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 12

READ_COMMITTED = 1


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    wanted = [
        FetchRequestPartition(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                              getattr(p, "current_leader_epoch", -1))
        for t in request.topics
        for p in t.partitions
    ]
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    max_bytes = getattr(request, "max_bytes", 2**31 - 1)
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED and request.replica_id < 0
    results = await services.replica_manager.fetch_messages(
        wanted, max_wait_ms, request.min_bytes, max_bytes, max(request.replica_id, -1), read_committed,
        waiting=ctx.dispatched)
    partition_data = constructor(
        schema.PartitionData, "partition_index", "error_code", "high_watermark",
        "last_stable_offset", "log_start_offset", "aborted_transactions", "preferred_read_replica",
        "records")
    by_topic: dict[str, list[Any]] = {}
    for req, res in zip(wanted, results, strict=True):
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
        NO_THROTTLE, ErrorCode.none, 0,
        tuple(topic_response(name, tuple(parts)) for name, parts in by_topic.items()))
