"""DescribeUserScramCredentials (50): each user's SCRAM mechanisms and iterations (never
salts or keys); all users when none are named. A user without credentials is
RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE, as in Kafka."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    credentials = services.credentials
    if not authorize(services, ctx, AclOperation.DESCRIBE):  # Kafka: Describe on the cluster
        return make(schema.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Authorization failed.", results=())
    if credentials is None:
        return make(schema.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.unsupported_version,
                    error_message="this broker keeps no SCRAM credentials", results=())
    names = [u.name for u in request.users] if request.users else credentials.users()
    results = []
    for name in dict.fromkeys(names):
        if names.count(name) > 1:
            results.append(make(schema.DescribeUserScramCredentialsResult, user=name,
                                error_code=ErrorCode.duplicate_resource,
                                error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
                                credential_infos=()))
            continue
        infos = credentials.describe(name)
        if not infos:
            results.append(make(schema.DescribeUserScramCredentialsResult, user=name,
                                error_code=ErrorCode.resource_not_found,
                                error_message=f"Attempt to describe a user credential that does not exist: {name}",
                                credential_infos=()))
            continue
        results.append(make(schema.DescribeUserScramCredentialsResult, user=name,
                            error_code=ErrorCode.none, error_message=None,
                            credential_infos=tuple(make(schema.CredentialInfo, mechanism=m, iterations=i)
                                                   for m, i in infos)))
    return make(schema.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                error_code=ErrorCode.none, error_message=None, results=tuple(results))
