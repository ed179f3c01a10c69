"""Heartbeat (12): keep a member's session alive; tells it when to rejoin."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    if not authorize(services, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return make(ctx.schema.HeartbeatResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.group_authorization_failed)
    error = await services.coordinators.group.heartbeat(request.group_id, request.generation_id,
                                                        request.member_id,
                                                        getattr(request, "group_instance_id", None))
    return make(ctx.schema.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=error)
