"""Produce (0): append record batches; acks 0 (no response), 1 and -1 (all in-sync replicas)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.context import NO_THROTTLE, BrokerServices, CloseConnection, RequestContext
from dmq.protocol.codec import make

API_KEY = 0
MIN_VERSION = 3
MAX_VERSION = 9


def _timestamp(ms: int) -> datetime | None:
    return None if ms < 0 else datetime.fromtimestamp(ms / 1000, tz=UTC)


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    acks = request.acks
    rm = services.replica_manager
    timeout_s = max(request.timeout.total_seconds(), 0.0)
    pending: list[tuple[str, list[Any]]] = []
    waits: list[tuple[tuple[list[Any], int], Any]] = []  # (where the entry is, its wait) for acks=all
    message: str | None
    for topic_data in request.topic_data:
        partitions: list[Any] = []
        for pdata in topic_data.partition_data:
            if acks not in (0, 1, -1):
                error, base, append_time, start, message = (
                    ErrorCode.invalid_required_acks, -1, -1, -1, f"acks={acks} is not 0, 1 or -1")
            elif request.transactional_id is not None:
                error, base, append_time, start, message = (
                    ErrorCode.invalid_request, -1, -1, -1,
                    "transactions are not supported by this broker yet")
            else:
                result = rm.append_records(topic_data.name, pdata.index, pdata.records, acks)
                error, base, append_time, start, message = (
                    result.error, result.base_offset, result.log_append_time,
                    result.log_start_offset, result.error_message)
                if acks == -1 and error == ErrorCode.none:
                    waits.append(((partitions, len(partitions)), rm.wait_for_replication(
                        topic_data.name, pdata.index, result.last_offset, timeout_s)))
            partitions.append(make(
                schema.PartitionProduceResponse, index=pdata.index, error_code=error,
                base_offset=base, log_append_time=_timestamp(append_time),
                log_start_offset=start, record_errors=(), error_message=message,
            ))
        pending.append((topic_data.name, partitions))
    if waits:
        # Kafka's DelayedProduce: answer once every partition is replicated, or fails.
        outcomes = await asyncio.gather(*(w for _, w in waits))
        for ((entries, i), _), (error, message) in zip(waits, outcomes, strict=True):
            if error != ErrorCode.none:
                entries[i] = make(schema.PartitionProduceResponse, index=entries[i].index,
                                  error_code=error, base_offset=-1, log_append_time=None,
                                  log_start_offset=-1, record_errors=(), error_message=message)
    topics = [make(schema.TopicProduceResponse, name=name, partition_responses=tuple(parts))
              for name, parts in pending]
    if acks == 0:
        failed = [p for t in topics for p in t.partition_responses if p.error_code != ErrorCode.none]
        if failed:
            # An acks=0 client reads no response; as in Kafka, closing the connection is
            # the signal that makes it refresh metadata and notice the failure.
            raise CloseConnection(f"acks=0 produce failed with {failed[0].error_code.name}")
        return None
    return make(schema.ProduceResponse, responses=tuple(topics), throttle_time=NO_THROTTLE)
