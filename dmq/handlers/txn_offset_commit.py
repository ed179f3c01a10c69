"""TxnOffsetCommit (28): a transaction's consumed offsets, counted once it commits."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    await services.coordinators.ensure_offsets_topic()
    entries = [(t.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata) for t in request.topics for p in t.partitions]
    results = await services.coordinators.group.txn_offset_commit(
        request.transactional_id, request.group_id, request.producer_id, request.producer_epoch,
        getattr(request, "generation_id", -1), getattr(request, "member_id", "") or "",
        getattr(request, "group_instance_id", None), entries)
    if ctx.api_version < 3:
        results = [ErrorCode.invalid_producer_epoch if e == ErrorCode.producer_fenced else e for e in results]
    errors = iter(results)
    return make(schema.TxnOffsetCommitResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(schema.TxnOffsetCommitResponseTopic, name=t.name, partitions=tuple(
            make(schema.TxnOffsetCommitResponsePartition, partition_index=p.partition_index,
                 error_code=next(errors))
            for p in t.partitions))
        for t in request.topics))
