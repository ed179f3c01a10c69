"""DeleteGroups (42): delete empty groups and their committed offsets (and a share group's
share-partition states: ``dmq.share.admin``)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    groups = [g for g in request.groups_names
              if authorize(services, ctx, AclOperation.DELETE, ResourceType.GROUP, g)]
    results = {}
    if groups:
        await services.coordinators.ensure_offsets_topic()  # group writes go to its log
        results = (await services.share_admin.delete_groups(groups) if services.share_admin is not None
                   else await services.coordinators.group.delete_groups(groups))
    for g in request.groups_names:
        results.setdefault(g, ErrorCode.group_authorization_failed)
    return make(schema.DeleteGroupsResponse, throttle_time=NO_THROTTLE, results=tuple(
        make(schema.DeletableGroupResult, group_id=g, error_code=e) for g, e in results.items()))
