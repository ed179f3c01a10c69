"""JoinGroup (11): join a group; answered when the rebalance completes."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    if not authorize(services, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return make(schema.JoinGroupResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.group_authorization_failed, generation_id=-1,
                    protocol_type=None, protocol_name="" if ctx.api_version < 7 else None,
                    leader="", skip_assignment=False, member_id="", members=())
    await services.coordinators.ensure_offsets_topic()  # group writes go to its log
    session_ms = int(request.session_timeout.total_seconds() * 1000)
    rebalance = getattr(request, "rebalance_timeout", None)
    rebalance_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None and ctx.api_version >= 1 else session_ms
    result = await services.coordinators.group.join_group(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None),
        ctx.client_id or "", ctx.client_host, session_ms, rebalance_ms, request.protocol_type,
        [(p.name, bytes(p.metadata)) for p in request.protocols],
        require_known_member=ctx.api_version >= 4)
    leader, listed = result.leader, result.members
    if result.skip_assignment and ctx.api_version < 9:
        # A restarted static leader of a stable group must not assign again: older clients
        # learn it from the previous leader's id and no member list (Kafka's
        # replaceStaticMember); v9+ from SkipAssignment.
        leader, listed = result.previous_leader, []
    members = tuple(
        make(schema.JoinGroupResponseMember, member_id=mid, group_instance_id=iid, metadata=meta)
        for mid, iid, meta in listed
    )
    return make(schema.JoinGroupResponse, throttle_time=NO_THROTTLE, error_code=result.error,
                generation_id=result.generation, protocol_type=result.protocol_type,
                protocol_name=result.protocol or ("" if ctx.api_version < 7 else None),
                leader=leader, skip_assignment=result.skip_assignment and ctx.api_version >= 9,
                member_id=result.member_id, members=members)
