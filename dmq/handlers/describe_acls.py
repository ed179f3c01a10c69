"""DescribeAcls (29): the ACLs a filter matches (Kafka's AclApis). DESCRIBE on the cluster."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.security.acl import AclBinding, AclError, filter_of

API_KEY = 29
MIN_VERSION = 1
MAX_VERSION = 3


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema

    def response(error: ErrorCode, message: str | None, resources: tuple[Any, ...] = ()) -> Any:
        return make(schema.DescribeAclsResponse, throttle_time=NO_THROTTLE, error_code=error,
                    error_message=message, resources=resources)

    if not authorize(services, ctx, AclOperation.DESCRIBE):
        return response(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    if services.authorizer is None:
        return response(ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    try:
        acl_filter = filter_of(request.resource_type_filter, request.resource_name_filter,
                               request.pattern_type_filter, request.principal_filter,
                               request.host_filter, request.operation, request.permission_type)
    except AclError as e:
        return response(ErrorCode.invalid_request, str(e))
    by_pattern: dict[Any, list[AclBinding]] = {}
    for b in services.authorizer.acls(acl_filter):
        by_pattern.setdefault(b.pattern, []).append(b)
    return response(ErrorCode.none, None, tuple(
        make(schema.DescribeAclsResource, resource_type=int(p.resource_type), resource_name=p.name,
             pattern_type=int(p.pattern_type), acls=tuple(
                 make(schema.AclDescription, principal=b.entry.principal, host=b.entry.host,
                      operation=int(b.entry.operation), permission_type=int(b.entry.permission))
                 for b in bindings))
        for p, bindings in by_pattern.items()))
