"""DeleteGroups (42): delete empty groups and their committed offsets (and a share group's
share-partition states: ``dmq.share.admin``)."""

from __future__ import annotations

from typing import Any

from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    await services.coordinators.ensure_offsets_topic()  # group writes go to its log
    groups = list(request.groups_names)
    results = (await services.share_admin.delete_groups(groups) if services.share_admin is not None
               else await services.coordinators.group.delete_groups(groups))
    return make(schema.DeleteGroupsResponse, throttle_time=NO_THROTTLE, results=tuple(
        make(schema.DeletableGroupResult, group_id=g, error_code=e) for g, e in results.items()))
