"""OffsetCommit (8): store a group's consumed positions in __consumer_offsets."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9


def _retention_ms(request: Any) -> int:
    """OffsetCommit v2-4's retention time in ms; -1 (the default, and later versions): none."""
    retention = getattr(request, "retention_time", None)
    if retention is None:
        return -1
    ms = retention // timedelta(milliseconds=1)
    return ms if ms >= 0 else -1


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    # Kafka: READ on the group (else every partition is refused and the coordinator is not
    # asked at all: a commit of no offsets still counts as the member's heartbeat), READ on
    # each topic.
    group_allowed = authorize(services, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    if not group_allowed:
        refused = {t.name: ErrorCode.group_authorization_failed for t in request.topics}
    else:
        refused = {t.name: ErrorCode.topic_authorization_failed for t in request.topics
                   if not authorize(services, ctx, AclOperation.READ, ResourceType.TOPIC, t.name)}
    entries = [
        (t.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
         p.committed_metadata)
        for t in request.topics if t.name not in refused for p in t.partitions
    ]
    generation = getattr(request, "generation_id_or_member_epoch", None)
    if generation is None:
        generation = request.generation_id
    results: list[Any] = []
    if group_allowed and (entries or not refused):
        await services.coordinators.ensure_offsets_topic()  # group writes go to its log
        # Answered once the commit is on every in-sync replica of the group's partition.
        # A generation's commit to a group that does not exist: v9+ say GROUP_ID_NOT_FOUND,
        # earlier versions ILLEGAL_GENERATION (Kafka's validateOffsetCommit).
        results = await services.coordinators.group.commit_offsets(
            request.group_id, generation, request.member_id,
            getattr(request, "group_instance_id", None), entries,
            unknown_group=ErrorCode.group_id_not_found if ctx.api_version >= 9 else ErrorCode.illegal_generation,
            retention_ms=_retention_ms(request))
    committed = iter(results)
    errors = (refused[t.name] if t.name in refused else next(committed)
              for t in request.topics for _ in t.partitions)
    topics = tuple(
        make(schema.OffsetCommitResponseTopic, name=t.name, partitions=tuple(
            make(schema.OffsetCommitResponsePartition, partition_index=p.partition_index,
                 error_code=next(errors))
            for p in t.partitions))
        for t in request.topics
    )
    return make(schema.OffsetCommitResponse, throttle_time=NO_THROTTLE, topics=topics)
