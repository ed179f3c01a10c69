"""DeleteAcls (31): remove the ACLs each filter matches (Kafka's AclApis). ALTER on the cluster."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import MetadataError
from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.security.acl import AclBindingFilter, AclError, filter_of

API_KEY = 31
MIN_VERSION = 1
MAX_VERSION = 3


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema

    def response(results: list[tuple[ErrorCode, str | None, list[Any]]]) -> Any:
        return make(schema.DeleteAclsResponse, throttle_time=NO_THROTTLE, filter_results=tuple(
            make(schema.DeleteAclsFilterResult, error_code=err, error_message=msg, matching_acls=tuple(
                make(schema.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                     resource_type=int(b.pattern.resource_type), resource_name=b.pattern.name,
                     pattern_type=int(b.pattern.pattern_type), principal=b.entry.principal,
                     host=b.entry.host, operation=int(b.entry.operation),
                     permission_type=int(b.entry.permission))
                for b in matched))
            for err, msg, matched in results))

    if not authorize(services, ctx, AclOperation.ALTER):
        return response([(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.", [])
                         for _ in request.filters])
    if services.authorizer is None:
        return response([(ErrorCode.security_disabled, "No Authorizer is configured.", [])
                         for _ in request.filters])
    outcome: list[tuple[ErrorCode, str | None, list[Any]]] = []
    valid: list[AclBindingFilter] = []
    for f in request.filters:
        try:
            valid.append(filter_of(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                   f.principal_filter, f.host_filter, f.operation, f.permission_type))
            outcome.append((ErrorCode.none, None, []))
        except AclError as e:
            outcome.append((ErrorCode.invalid_request, str(e), []))
    try:
        removed = iter(await services.authorizer.delete_acls(valid))
    except MetadataError as e:
        return response([(ErrorCode[e.error], str(e), []) if err == ErrorCode.none else (err, msg, m)
                         for err, msg, m in outcome])
    return response([(err, msg, next(removed)) if err == ErrorCode.none else (err, msg, m)
                     for err, msg, m in outcome])
