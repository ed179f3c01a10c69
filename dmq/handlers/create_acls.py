"""CreateAcls (30): add ACLs (Kafka's AclApis.handleCreateAcls). ALTER on the cluster."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import MetadataError
from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclError,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    code_of,
)

API_KEY = 30
MIN_VERSION = 1
MAX_VERSION = 3


def _binding(c: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(code_of(ResourceType, c.resource_type), c.resource_name,
                        code_of(PatternType, c.resource_pattern_type)),
        AccessControlEntry(c.principal, c.host, code_of(AclOperation, c.operation),
                           code_of(AclPermissionType, c.permission_type))).validated()


def _refusal(e: MetadataError | None) -> tuple[ErrorCode, str | None]:
    return (ErrorCode.none, None) if e is None else (ErrorCode[e.error], str(e))


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema

    def results(error: ErrorCode, message: str | None) -> Any:
        return make(schema.CreateAclsResponse, throttle_time=NO_THROTTLE, results=tuple(
            make(schema.AclCreationResult, error_code=error, error_message=message)
            for _ in request.creations))

    if not authorize(services, ctx, AclOperation.ALTER):
        return results(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    if services.authorizer is None:
        return results(ErrorCode.security_disabled, "No Authorizer is configured.")
    outcome: list[tuple[ErrorCode, str | None]] = []
    valid: list[AclBinding] = []
    for c in request.creations:
        try:
            valid.append(_binding(c))
            outcome.append((ErrorCode.none, None))
        except AclError as e:
            outcome.append((ErrorCode.invalid_request, str(e)))
    stored = iter(await services.authorizer.create_acls(valid))
    outcome = [(err, msg) if err != ErrorCode.none else _refusal(next(stored)) for err, msg in outcome]
    return make(schema.CreateAclsResponse, throttle_time=NO_THROTTLE, results=tuple(
        make(schema.AclCreationResult, error_code=err, error_message=msg) for err, msg in outcome))
