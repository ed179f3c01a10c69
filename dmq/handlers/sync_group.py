"""SyncGroup (14): the leader hands out assignments; every member receives its own."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    if not authorize(services, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return make(schema.SyncGroupResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.group_authorization_failed, protocol_type=None,
                    protocol_name=None, assignment=b"")
    await services.coordinators.ensure_offsets_topic()  # group writes go to its log
    result = await services.coordinators.group.sync_group(
        request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None), getattr(request, "protocol_type", None),
        getattr(request, "protocol_name", None),
        {a.member_id: bytes(a.assignment) for a in request.assignments})
    return make(schema.SyncGroupResponse, throttle_time=NO_THROTTLE, error_code=result.error,
                protocol_type=result.protocol_type, protocol_name=result.protocol,
                assignment=result.assignment)
