"""LeaveGroup (13): members leave (one member, or a batch of them in v3+)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    if not authorize(services, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return make(schema.LeaveGroupResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.group_authorization_failed, members=())
    await services.coordinators.ensure_offsets_topic()  # group writes go to its log
    if ctx.api_version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [(request.member_id, None)]
    error, errors = await services.coordinators.group.leave_group(request.group_id, leaving)
    if ctx.api_version >= 3:
        members = tuple(
            make(schema.MemberResponse, member_id=mid, group_instance_id=iid, error_code=e)
            for (mid, iid), e in zip(leaving, errors, strict=True)
        )
        return make(schema.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error, members=members)
    return make(schema.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=errors[0])
