"""ApiVersions (18): the APIs and versions this broker implements, from the handler registry."""

from __future__ import annotations

import re
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

# Kafka's ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN (v3's client_software_name and
# client_software_version): letters, digits, '-' and '.', beginning and ending alphanumeric.
_SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")

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
    if ctx.api_version >= 3 and not (
            _SOFTWARE_NAME_VERSION.fullmatch(request.client_software_name)
            and _SOFTWARE_NAME_VERSION.fullmatch(request.client_software_version)):
        # Kafka's ApiVersionsRequest.isValid and getErrorResponse: the error, no API keys.
        return make(ctx.schema.ApiVersionsResponse, error_code=ErrorCode.invalid_request, api_keys=(),
                    throttle_time=NO_THROTTLE)
    return build_response(services, ctx.schema, ErrorCode.none)
