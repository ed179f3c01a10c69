"""AlterUserScramCredentials (51): add, replace or delete users' SCRAM credentials. The
client sends the salted password (never the password); the broker keeps the salt, the
stored key, the server key and the iterations, as Kafka does (dmq.security.credentials)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.security.credentials import Deletion, Upsertion

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    deletions = [Deletion(d.name, int(d.mechanism)) for d in request.deletions]
    upsertions = [Upsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt),
                            bytes(u.salted_password)) for u in request.upsertions]
    users = dict.fromkeys([*(d.user for d in deletions), *(u.user for u in upsertions)])
    if not authorize(services, ctx, AclOperation.ALTER):  # Kafka: Alter on the cluster
        return make(schema.AlterUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                    results=tuple(make(schema.AlterUserScramCredentialsResult, user=u,
                                       error_code=ErrorCode.cluster_authorization_failed,
                                       error_message="Authorization failed.") for u in users))
    if services.credentials is None:
        return make(schema.AlterUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                    results=tuple(make(schema.AlterUserScramCredentialsResult, user=u,
                                       error_code=ErrorCode.unsupported_version,
                                       error_message="this broker keeps no SCRAM credentials")
                                  for u in users))
    results = await services.credentials.alter(deletions, upsertions)
    return make(schema.AlterUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                results=tuple(make(schema.AlterUserScramCredentialsResult, user=r.user,
                                   error_code=r.error, error_message=r.message) for r in results))
