"""ShareGroupDescribe (77): share groups with their epochs, members and assignments.

v1 (v0 was Kafka 4.0's early access). Advertised in ApiVersions only once the
rest of what a share consumer needs exists (``SHARE_GROUPS_ADVERTISED``).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.group.share_group import DescribedShareGroup
from dmq.handlers.authorize import (
    NOT_REQUESTED,
    AclOperation,
    ResourceType,
    authorize,
    authorized_operations,
)
from dmq.handlers.context import (
    NO_THROTTLE,
    SHARE_GROUPS_ADVERTISED,
    BrokerServices,
    RequestContext,
)
from dmq.protocol.codec import make

API_KEY = 77
MIN_VERSION = 1
MAX_VERSION = 1
ADVERTISED = SHARE_GROUPS_ADVERTISED


def _group(schema: Any, g: DescribedShareGroup, operations: int = NOT_REQUESTED) -> Any:
    members = tuple(
        make(schema.Member, member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
             client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=m.subscribed_topic_names,
             assignment=make(schema.Assignment, topic_partitions=tuple(
                 make(schema.TopicPartitions, topic_id=topic_id, topic_name=name, partitions=partitions)
                 for topic_id, name, partitions in m.assignment)))
        for m in g.members)
    return make(schema.DescribedGroup, error_code=g.error, error_message=g.message, group_id=g.group_id,
                group_state=g.state, group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
                assignor_name=g.assignor_name, members=members, authorized_operations=operations)


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    allowed = [g for g in request.group_ids
               if authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g)]
    found = iter(services.coordinators.group.share_group_describe(allowed) if allowed else [])
    allowed_set = set(allowed)
    described = [next(found) if g in allowed_set
                 else DescribedShareGroup(g, ErrorCode.group_authorization_failed, "Authorization failed.")
                 for g in request.group_ids]
    return make(schema.ShareGroupDescribeResponse, throttle_time=NO_THROTTLE,
                groups=tuple(_group(schema, g, authorized_operations(services, ctx, ResourceType.GROUP, g.group_id)
                                    if request.include_authorized_operations and g.error == ErrorCode.none
                                    else NOT_REQUESTED) for g in described))
