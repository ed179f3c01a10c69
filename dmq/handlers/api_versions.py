"""ApiVersions (18): the APIs and versions this broker implements, from the handler registry."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 3


def build_response(services: BrokerServices, schema: Any, error: ErrorCode) -> Any:
    api_keys = tuple(
        make(schema.ApiVersion, api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in sorted(services.supported_apis.items())
    )
    return make(schema.ApiVersionsResponse, error_code=error, api_keys=api_keys,
                throttle_time=NO_THROTTLE)


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    return build_response(services, ctx.schema, ErrorCode.none)
