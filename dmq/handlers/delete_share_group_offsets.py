"""DeleteShareGroupOffsets (92): forget an empty share group's state of whole topics
(KIP-932; ``kafka-share-groups.sh --delete-offsets``). ``dmq.share.admin`` says what it does."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.share.admin import ChangeResult, TopicResult

API_KEY = 92
MIN_VERSION = 0
MAX_VERSION = 0

ZERO_UUID = uuid.UUID(int=0)


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    admin = services.share_admin
    assert admin is not None
    # Kafka: DELETE on the group, READ on each topic.
    if not authorize(services, ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        result = ChangeResult(ErrorCode.group_authorization_failed, "Authorization failed.")
    else:
        refused = [t.topic_name for t in request.topics
                   if not authorize(services, ctx, AclOperation.READ, ResourceType.TOPIC, t.topic_name)]
        wanted = [t.topic_name for t in request.topics if t.topic_name not in refused]
        result = ChangeResult()
        if wanted or not refused:
            await services.coordinators.ensure_offsets_topic()  # the group's record goes to its log
            result = await admin.delete_offsets(request.group_id, wanted)
        result = ChangeResult(result.error, result.message, result.topics + tuple(
            TopicResult(name, None, ErrorCode.topic_authorization_failed, "Authorization failed.")
            for name in refused))
    return make(schema.DeleteShareGroupOffsetsResponse, throttle_time=NO_THROTTLE, error_code=result.error,
                error_message=result.message, responses=tuple(
                    make(schema.DeleteShareGroupOffsetsResponseTopic, topic_name=t.name,
                         topic_id=t.topic_id or ZERO_UUID, error_code=t.error, error_message=t.message)
                    for t in result.topics))
