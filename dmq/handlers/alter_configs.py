"""AlterConfigs (33): replace a topic's config overrides, or a broker's dynamic configs."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import MetadataError, validate_topic_name
from dmq.handlers.authorize import AclOperation, authorize_config_resource
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32  # Kafka's ConfigResource.Type.GROUP
INCREMENTAL_DELETE = 1  # IncrementalAlterConfigs' DELETE operation


def preprocess(resources: Any, incremental: bool) -> dict[int, str]:
    """The resources (by index) refused INVALID_REQUEST before anything else, with Kafka's
    messages (ConfigAdminManager.preprocess): one named twice (both entries), a config key
    given twice, a null value (but for an incremental DELETE)."""
    refused: dict[int, str] = {}
    seen: dict[tuple[int, str], int] = {}
    for i, res in enumerate(resources):
        first = seen.setdefault((res.resource_type, res.resource_name), i)
        if first != i:
            refused[first] = refused[i] = "Each resource must appear at most once."
    for i, res in enumerate(resources):
        if i in refused:
            continue
        names = [c.name for c in res.configs]
        nulls = [c.name for c in res.configs
                 if c.value is None and not (incremental and c.config_operation == INCREMENTAL_DELETE)]
        if len(set(names)) != len(names):
            refused[i] = "Error due to duplicate config keys"
        elif nulls:
            refused[i] = "Null value not supported for : " + ", ".join(nulls)
    return refused


def unsupported_resource(resource_type: int) -> str:
    return (f"Resource type {resource_type} cannot be altered: dmq alters topics (2), the "
            f"dynamic configs of brokers (4) and, with IncrementalAlterConfigs, groups (32).")


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    results = []
    invalid = preprocess(request.resources, incremental=False)
    for i, res in enumerate(request.resources):
        error, message = ErrorCode.none, None
        configs = {c.name: c.value for c in res.configs}
        refused = authorize_config_resource(services, ctx, AclOperation.ALTER_CONFIGS,
                                            res.resource_type, res.resource_name)
        try:
            if i in invalid:
                raise MetadataError("invalid_request", invalid[i])
            if refused != ErrorCode.none:
                raise MetadataError(refused.name, "Authorization failed.")
            if res.resource_type == RESOURCE_TOPIC:
                validate_topic_name(res.resource_name)  # as Kafka, before the lookup
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
