"""DescribeShareGroupOffsets (90): each share group's start offset per partition, and (v1)
its lag (KIP-932, KIP-1226). Answered by the groups' coordinator (NOT_COORDINATOR per
group otherwise); ``dmq.share.admin`` says what each field means."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.share.admin import GroupOffsets, PartitionOffset, TopicOffsets

API_KEY = 90
MIN_VERSION = 0
MAX_VERSION = 1

ZERO_UUID = uuid.UUID(int=0)


def _group(schema: Any, g: GroupOffsets) -> Any:
    return make(schema.DescribeShareGroupOffsetsResponseGroup, group_id=g.group_id, error_code=g.error,
                error_message=g.message, topics=tuple(
                    make(schema.DescribeShareGroupOffsetsResponseTopic, topic_name=t.name,
                         topic_id=t.topic_id or ZERO_UUID, partitions=tuple(
                             make(schema.DescribeShareGroupOffsetsResponsePartition, partition_index=p.partition,
                                  start_offset=p.start_offset, leader_epoch=p.leader_epoch, lag=p.lag,
                                  error_code=p.error, error_message=p.message)
                             for p in t.partitions))
                    for t in g.topics))


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    admin = services.share_admin
    assert admin is not None
    groups = []
    for g in request.groups:
        # Kafka: DESCRIBE on the group; DESCRIBE on each topic (refused when named, left
        # out when all are asked for).
        if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id):
            groups.append(_group(schema, GroupOffsets(g.group_id, ErrorCode.group_authorization_failed,
                                                      "Authorization failed.")))
            continue
        topics = None if g.topics is None else [(t.topic_name, list(t.partitions)) for t in g.topics]
        hidden = [(name, parts) for name, parts in topics or ()
                  if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)]
        wanted = None if topics is None else [t for t in topics if t not in hidden]
        found = (GroupOffsets(g.group_id) if hidden and not wanted
                 else await admin.describe_offsets(g.group_id, wanted))
        shown = tuple(t for t in found.topics
                      if authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t.name))
        refused = tuple(TopicOffsets(name, None, tuple(
            PartitionOffset(p, error=ErrorCode.topic_authorization_failed, message="Authorization failed.")
            for p in parts)) for name, parts in hidden)
        groups.append(_group(schema, GroupOffsets(found.group_id, found.error, found.message, shown + refused)))
    return make(schema.DescribeShareGroupOffsetsResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))
