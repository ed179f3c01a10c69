"""AlterConfigs (33): replace a topic's config overrides. Broker configs are static."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import MetadataError
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

RESOURCE_TOPIC = 2
BROKER_CONFIGS_STATIC = ("Broker configs are static in dmq: set them in the --config file or "
                         "with --override and restart the broker.")


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    results = []
    for res in request.resources:
        error, message = ErrorCode.none, None
        if res.resource_type != RESOURCE_TOPIC:
            error, message = ErrorCode.invalid_request, BROKER_CONFIGS_STATIC
        else:
            configs = {c.name: c.value for c in res.configs if c.value is not None}
            try:
                services.controller.alter_topic_configs(res.resource_name, configs,
                                                        request.validate_only)
            except MetadataError as e:
                error, message = ErrorCode[e.error], str(e)
        results.append(make(schema.AlterConfigsResourceResponse, error_code=error,
                            error_message=message, resource_type=res.resource_type,
                            resource_name=res.resource_name))
    return make(schema.AlterConfigsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))
