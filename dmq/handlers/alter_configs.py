"""AlterConfigs (33): replace a topic's config overrides, or a broker's dynamic configs."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import MetadataError
from dmq.handlers.authorize import AclOperation, authorize_config_resource
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32  # Kafka's ConfigResource.Type.GROUP


def unsupported_resource(resource_type: int) -> str:
    return (f"Resource type {resource_type} cannot be altered: dmq alters topics (2), the "
            f"dynamic configs of brokers (4) and, with IncrementalAlterConfigs, groups (32).")


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    results = []
    for res in request.resources:
        error, message = ErrorCode.none, None
        configs = {c.name: c.value for c in res.configs if c.value is not None}
        refused = authorize_config_resource(services, ctx, AclOperation.ALTER_CONFIGS,
                                            res.resource_type, res.resource_name)
        try:
            if refused != ErrorCode.none:
                raise MetadataError(refused.name, "Authorization failed.")
            if res.resource_type == RESOURCE_TOPIC:
                await services.admin_manager.alter_topic_configs(res.resource_name, configs,
                                                        request.validate_only)
            elif res.resource_type == RESOURCE_BROKER:
                await services.admin_manager.alter_broker_configs(res.resource_name, configs,
                                                         request.validate_only)
            else:
                raise MetadataError("invalid_request", unsupported_resource(res.resource_type))
        except MetadataError as e:
            error, message = ErrorCode[e.error], str(e)
        results.append(make(schema.AlterConfigsResourceResponse, error_code=error,
                            error_message=message, resource_type=res.resource_type,
                            resource_name=res.resource_name))
    return make(schema.AlterConfigsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))
