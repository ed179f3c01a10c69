"""DeleteShareGroupOffsets (92): forget an empty share group's state of whole topics
(KIP-932; ``kafka-share-groups.sh --delete-offsets``). ``dmq.share.admin`` says what it does."""

from __future__ import annotations

import uuid
from typing import Any

from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 92
MIN_VERSION = 0
MAX_VERSION = 0

ZERO_UUID = uuid.UUID(int=0)


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    admin = services.share_admin
    assert admin is not None
    await services.coordinators.ensure_offsets_topic()  # the group's record goes to its log
    result = await admin.delete_offsets(request.group_id, [t.topic_name for t in request.topics])
    return make(schema.DeleteShareGroupOffsetsResponse, throttle_time=NO_THROTTLE, error_code=result.error,
                error_message=result.message, responses=tuple(
                    make(schema.DeleteShareGroupOffsetsResponseTopic, topic_name=t.name,
                         topic_id=t.topic_id or ZERO_UUID, error_code=t.error, error_message=t.message)
                    for t in result.topics))
