"""QueryRecords (dmq's extension 10001): message query, docs/message-query.md.

Each partition is answered by its leader, from its log (``dmq.storage.query``):
the records with a key, newest first, through the key indexes; or, without a
key, the records of an offset window, oldest first. The window is
``[start_offset, end_offset)`` clipped to the log start offset and the high
watermark (the last stable offset for read_committed) and narrowed by the
timestamps as ListOffsets finds them: from the first offset whose timestamp is
``start_timestamp`` or later, up to the first whose timestamp is
``end_timestamp`` or later; inside it, records are filtered by timestamp too.

The work runs on the event loop in short steps (a query never holds the loop for
long) and is bounded: MAX_RECORDS and MAX_BYTES per partition, READ_BUDGET log
bytes per request; a partition that stops early says where to go on
(``resume_offset``). Not advertised in ApiVersions: only ``dmq.client`` sends it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.protocol.extensions import QUERY_RECORDS_KEY
from dmq.replication.partition import PartitionError
from dmq.storage.query import Budget, LogSnapshot, QueryOutcome, QuerySpec, find_by_key, scan

API_KEY = QUERY_RECORDS_KEY
MIN_VERSION = 0
MAX_VERSION = 0
ADVERTISED = False

MAX_RECORDS = 10_000  # per partition
MAX_BYTES = 16 << 20  # per partition
READ_BUDGET = 64 << 20  # log bytes one request may read
STEP_SECONDS = 0.005  # work between two turns of the event loop

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def invalid(request: Any) -> str | None:
    """Why the query is malformed (INVALID_REQUEST), or None."""
    if request.isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
        return f"isolation_level must be 0 or 1, got {request.isolation_level}"
    if request.max_records < 1:
        return f"max_records must be at least 1, got {request.max_records}"
    if request.max_bytes < 1:
        return f"max_bytes must be at least 1, got {request.max_bytes}"
    for name in ("start_timestamp", "end_timestamp"):
        if getattr(request, name) < -1:
            return f"{name} must be -1 (none) or a timestamp, got {getattr(request, name)}"
    if 0 <= request.end_timestamp < request.start_timestamp:
        return f"start_timestamp {request.start_timestamp} is after end_timestamp {request.end_timestamp}"
    for t in request.topics:
        for p in t.partitions:
            if p.start_offset < -1 or p.end_offset < -1:
                return f"offsets must be -1 (none) or at least 0 ({t.name}-{p.partition_index})"
            if 0 <= p.end_offset < p.start_offset:
                return (f"start_offset {p.start_offset} is after end_offset {p.end_offset} "
                        f"({t.name}-{p.partition_index})")
    return None


async def run_steps(steps: Generator[None, None, QueryOutcome]) -> QueryOutcome:
    """Run a query to its end, letting the event loop turn every STEP_SECONDS."""
    deadline = time.monotonic() + STEP_SECONDS
    while True:
        try:
            next(steps)
        except StopIteration as done:
            outcome: QueryOutcome = done.value
            return outcome
        if time.monotonic() >= deadline:
            await asyncio.sleep(0)
            deadline = time.monotonic() + STEP_SECONDS


async def _partition(services: BrokerServices, request: Any, schema: Any, topic: str, p: Any,
                     budget: Budget, readable: bool) -> Any:
    index = p.partition_index
    try:
        if not readable:  # as Fetch: READ on the topic
            return make(schema.QueryPartitionResult, partition_index=index,
                        error_code=ErrorCode.topic_authorization_failed, error_message="Authorization failed.")
        partition = services.replica_manager.leader_partition(topic, index)
    except PartitionError as e:
        return make(schema.QueryPartitionResult, partition_index=index, error_code=e.error,
                    error_message=str(e))
    lg = partition.log
    hw = partition.high_watermark
    log_start = lg.log_start_offset
    read_committed = request.isolation_level == READ_COMMITTED

    def answer(outcome: QueryOutcome, error: ErrorCode = ErrorCode.none, message: str | None = None) -> Any:
        return make(schema.QueryPartitionResult, partition_index=index, error_code=error, error_message=message,
                    log_start_offset=log_start, high_watermark=hw, resume_offset=outcome.resume_offset,
                    unindexed_bytes=outcome.unindexed_bytes,
                    records=tuple(make(schema.QueriedRecord, offset=f.record.offset, timestamp=f.record.timestamp,
                                       key=f.record.key, value=f.record.value, aborted=f.aborted,
                                       headers=tuple(make(schema.QueriedHeader, key=k, value=v)
                                                     for k, v in f.record.headers))
                                  for f in outcome.records))

    if request.key is None and p.start_offset >= 0 and not log_start <= p.start_offset <= hw:
        return answer(QueryOutcome(), ErrorCode.offset_out_of_range,
                      f"offset {p.start_offset} is outside {topic}-{index}'s offsets [{log_start}, {hw})")
    start = max(log_start, p.start_offset)
    end = lg.last_stable_offset() if read_committed else hw
    if p.end_offset >= 0:
        end = min(end, p.end_offset)
    if request.start_timestamp >= 0:
        found = lg.offset_for_timestamp(request.start_timestamp)
        start = max(start, found[0]) if found is not None else end
    if request.end_timestamp >= 0:
        found = lg.offset_for_timestamp(request.end_timestamp)
        if found is not None:
            end = min(end, found[0])
    if start >= end:
        return answer(QueryOutcome())
    spec = QuerySpec(start, end, request.key, request.start_timestamp, request.end_timestamp, read_committed,
                     min(request.max_records, MAX_RECORDS), min(request.max_bytes, MAX_BYTES))
    snap = LogSnapshot(lg, start, end)
    try:
        outcome = await run_steps(find_by_key(snap, spec, budget) if spec.key is not None
                                  else scan(snap, spec, budget))
    finally:
        snap.close()
    return answer(outcome)


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    problem = invalid(request)
    if problem is not None:
        return make(schema.QueryRecordsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request,
                    error_message=problem, topics=())
    budget = Budget(READ_BUDGET)
    topics = []
    for t in request.topics:
        readable = authorize(services, ctx, AclOperation.READ, ResourceType.TOPIC, t.name)
        partitions = [await _partition(services, request, schema, t.name, p, budget, readable)
                      for p in t.partitions]
        topics.append(make(schema.QueryTopicResult, name=t.name, partitions=tuple(partitions)))
    return make(schema.QueryRecordsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                topics=tuple(topics))
