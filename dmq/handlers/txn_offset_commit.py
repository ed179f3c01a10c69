"""TxnOffsetCommit (28): a transaction's consumed offsets, counted once it commits."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    # Kafka: WRITE on the transactional id, READ on the group (either refused: every
    # partition, and the coordinator is not asked at all), READ on each topic.
    allowed = False
    if not authorize(services, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        refused = dict.fromkeys((t.name for t in request.topics), ErrorCode.transactional_id_authorization_failed)
    elif not authorize(services, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        refused = dict.fromkeys((t.name for t in request.topics), ErrorCode.group_authorization_failed)
    else:
        allowed = True
        refused = {t.name: ErrorCode.topic_authorization_failed for t in request.topics
                   if not authorize(services, ctx, AclOperation.READ, ResourceType.TOPIC, t.name)}
    entries = [(t.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata) for t in request.topics if t.name not in refused for p in t.partitions]
    results: list[ErrorCode] = []
    if allowed and (entries or not refused):
        await services.coordinators.ensure_offsets_topic()
        results = await services.coordinators.group.txn_offset_commit(
            request.transactional_id, request.group_id, request.producer_id, request.producer_epoch,
            getattr(request, "generation_id", -1), getattr(request, "member_id", "") or "",
            getattr(request, "group_instance_id", None), entries)
    if ctx.api_version < 3:
        results = [ErrorCode.invalid_producer_epoch if e == ErrorCode.producer_fenced else e for e in results]
    if ctx.api_version < 2:
        # Kafka: clients from 0.11 to 2.0 do not know COORDINATOR_LOAD_IN_PROGRESS here.
        results = [ErrorCode.coordinator_not_available if e == ErrorCode.coordinator_load_in_progress else e
                   for e in results]
    committed = iter(results)
    errors = iter([refused[t.name] if t.name in refused else next(committed)
                   for t in request.topics for _ in t.partitions])
    return make(schema.TxnOffsetCommitResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(schema.TxnOffsetCommitResponseTopic, name=t.name, partitions=tuple(
            make(schema.TxnOffsetCommitResponsePartition, partition_index=p.partition_index,
                 error_code=next(errors))
            for p in t.partitions))
        for t in request.topics))
