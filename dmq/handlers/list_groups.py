"""ListGroups (16): the groups this coordinator knows, classic and share (filtered by
state in v4, by type in v5); COORDINATOR_LOAD_IN_PROGRESS and no groups while a
``__consumer_offsets`` partition led here is still loading, as Kafka answers (its groups
would be missing from the list); COORDINATOR_NOT_AVAILABLE once the coordinator is closed
(the broker shutting down)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    group = services.coordinators.group
    if not group.active or group.loading():
        error = ErrorCode.coordinator_load_in_progress if group.active else ErrorCode.coordinator_not_available
        return make(schema.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=error, groups=())
    # Before v5 a client cannot tell a share group from a classic one: Kafka lists both.
    groups = services.coordinators.group.list_groups(getattr(request, "states_filter", ()),
                                                     getattr(request, "types_filter", ()))
    # Kafka: everything with DESCRIBE on the cluster, else the groups the principal may describe.
    everything = authorize(services, ctx, AclOperation.DESCRIBE)
    listed = tuple(
        make(schema.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
             group_type=g.group_type)
        for g in groups
        if everything or authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id)
    )
    return make(schema.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                groups=listed)
