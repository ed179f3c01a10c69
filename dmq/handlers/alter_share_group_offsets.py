"""AlterShareGroupOffsets (91): set an empty share group's start offsets (KIP-932;
``kafka-share-groups.sh --reset-offsets``). ``dmq.share.admin`` says what it does."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.share.admin import ChangeResult, PartitionResult, TopicResult

API_KEY = 91
MIN_VERSION = 0
MAX_VERSION = 0

ZERO_UUID = uuid.UUID(int=0)


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    admin = services.share_admin
    assert admin is not None
    # Kafka: READ on the group, READ on each topic.
    if not authorize(services, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        result = ChangeResult(ErrorCode.group_authorization_failed, "Authorization failed.")
    else:
        refused = [t for t in request.topics
                   if not authorize(services, ctx, AclOperation.READ, ResourceType.TOPIC, t.topic_name)]
        wanted = [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions])
                  for t in request.topics if t not in refused]
        result = ChangeResult()
        if wanted or not refused:
            await services.coordinators.ensure_offsets_topic()  # the group's record goes to its log
            result = await admin.alter_offsets(request.group_id, wanted)
        result = ChangeResult(result.error, result.message, result.topics + tuple(
            TopicResult(t.topic_name, None, partitions=tuple(
                PartitionResult(p.partition_index, ErrorCode.topic_authorization_failed, "Authorization failed.")
                for p in t.partitions)) for t in refused))
    return make(schema.AlterShareGroupOffsetsResponse, throttle_time=NO_THROTTLE, error_code=result.error,
                error_message=result.message, responses=tuple(
                    make(schema.AlterShareGroupOffsetsResponseTopic, topic_name=t.name,
                         topic_id=t.topic_id or ZERO_UUID, partitions=tuple(
                             make(schema.AlterShareGroupOffsetsResponsePartition, partition_index=p.partition,
                                  error_code=p.error, error_message=p.message)
                             for p in t.partitions))
                    for t in result.topics))
