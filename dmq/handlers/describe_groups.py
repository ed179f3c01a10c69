"""DescribeGroups (15): state, protocol and members with their metadata and assignment."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.group.metadata import GroupState
from dmq.handlers.authorize import (
    NOT_REQUESTED,
    AclOperation,
    ResourceType,
    authorize,
    authorized_operations,
)
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    described = []
    for group_id in request.groups:
        if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(make(schema.DescribedGroup, error_code=ErrorCode.group_authorization_failed,
                                  group_id=group_id, group_state="", protocol_type="",
                                  protocol_data="", members=()))
            continue
        if not services.coordinators.group.owns(group_id):
            described.append(make(schema.DescribedGroup,
                                  error_code=services.coordinators.group.absent_error(group_id),
                                  group_id=group_id, group_state="", protocol_type="",
                                  protocol_data="", members=()))
            continue
        group = services.coordinators.group.describe_group(group_id)
        operations = (authorized_operations(services, ctx, ResourceType.GROUP, group_id)
                      if getattr(request, "include_authorized_operations", False) else NOT_REQUESTED)
        if group is None:
            described.append(make(schema.DescribedGroup, error_code=ErrorCode.none, group_id=group_id,
                                  group_state="Dead", protocol_type="", protocol_data="", members=(),
                                  authorized_operations=operations))
            continue
        # As Kafka's describeGroups: the protocol and the members' metadata only of a Stable
        # group (during a rebalance they are those of a generation being replaced).
        protocol = group.protocol if group.state == GroupState.STABLE else None
        members = tuple(
            make(schema.DescribedGroupMember, member_id=m.member_id, group_instance_id=m.group_instance_id,
                 client_id=m.client_id, client_host=m.client_host,
                 member_metadata=m.metadata_for(protocol) if protocol else b"",
                 member_assignment=m.assignment)
            for m in group.members.values()
        )
        described.append(make(schema.DescribedGroup, error_code=ErrorCode.none, group_id=group_id,
                              group_state=group.state.value, protocol_type=group.protocol_type or "",
                              protocol_data=protocol or "", members=members,
                              authorized_operations=operations))
    return make(schema.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(described))
