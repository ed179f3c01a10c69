"""IncrementalAlterConfigs (44): SET, DELETE, APPEND, SUBTRACT on a topic's config overrides,
a broker's dynamic configs or a group's configs (Kafka's GROUP resource, 32: share.*)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import MetadataError, validate_topic_name
from dmq.config import (
    BROKER_CONFIGS,
    GROUP_CONFIGS,
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigType,
    LogConfig,
    group_config_values,
)
from dmq.handlers.alter_configs import (
    RESOURCE_BROKER,
    RESOURCE_GROUP,
    preprocess,
    unsupported_resource,
)
from dmq.handlers.authorize import AclOperation, authorize_config_resource
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1

RESOURCE_TOPIC = 2
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def apply_operations(current: dict[str, str], effective: Any, ops: Any,
                     defs: dict[str, ConfigDef] = TOPIC_CONFIGS, kind_name: str = "topic") -> dict[str, str]:
    """The new override map after applying ``ops`` (raises MetadataError on bad ops).

    ``effective[name]`` is the value in force, which APPEND and SUBTRACT start from.
    """
    out = dict(current)
    for op in ops:
        name, kind, value = op.name, op.config_operation, op.value
        if kind == DELETE:  # whatever the name (Kafka's prepareIncrementalConfigs): removing
            out.pop(name, None)  # an override nobody knows (or set) is no error
            continue
        cdef = defs.get(name)
        if kind == SET:  # the name is checked with the result (for a broker: INVALID_REQUEST)
            if value is None:
                raise MetadataError("invalid_request", f"Null value not supported for : {name}")
            out[name] = value
            continue
        if cdef is None:
            raise MetadataError("invalid_config", f"Unknown {kind_name} config name: {name}")
        if kind in (APPEND, SUBTRACT):
            if cdef.type != ConfigType.LIST:
                raise MetadataError("invalid_config",
                                    f"Config value append/subtract is not allowed for config key {name}")
            items = [x for x in out.get(name, ",".join(effective[name])).split(",") if x]
            for item in (value or "").split(","):
                item = item.strip()
                if not item:
                    continue
                if kind == APPEND and item not in items:
                    items.append(item)
                elif kind == SUBTRACT and item in items:
                    items.remove(item)
            out[name] = ",".join(items)
        else:
            raise MetadataError("invalid_request", f"Unknown config operation {kind}")
    return out


async def alter(services: BrokerServices, resource_type: int, name: str, ops: Any,
                validate_only: bool) -> None:
    """Apply ``ops`` to one resource's overrides as the store holds them when it writes (not
    as read before): a concurrent change of the same resource is kept."""
    if resource_type == RESOURCE_TOPIC:
        validate_topic_name(name)  # INVALID_TOPIC_EXCEPTION, as Kafka, before the lookup
        await services.admin_manager.update_topic_configs(
            name, lambda current: apply_operations(current, LogConfig(services.config, current), ops),
            validate_only)
    elif resource_type == RESOURCE_GROUP:
        def group_change(current: dict[str, str]) -> dict[str, str]:
            in_force = {n: v[0] for n, v in group_config_values(services.config, current).items()}
            return apply_operations(current, in_force, ops, GROUP_CONFIGS, "group")
        await services.admin_manager.update_group_configs(name, group_change, validate_only)
    elif resource_type == RESOURCE_BROKER:
        await services.admin_manager.update_broker_configs(
            name, lambda current: apply_operations(current, services.config, ops, BROKER_CONFIGS, "broker"),
            validate_only)
    else:
        raise MetadataError("invalid_request", unsupported_resource(resource_type))


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    results = []
    invalid = preprocess(request.resources, incremental=True)
    for i, res in enumerate(request.resources):
        error, message = ErrorCode.none, None
        refused = authorize_config_resource(services, ctx, AclOperation.ALTER_CONFIGS,
                                            res.resource_type, res.resource_name)
        try:
            if i in invalid:
                raise MetadataError("invalid_request", invalid[i])
            if refused != ErrorCode.none:
                raise MetadataError(refused.name, "Authorization failed.")
            await alter(services, res.resource_type, res.resource_name, res.configs, request.validate_only)
        except MetadataError as e:
            error, message = ErrorCode[e.error], str(e)
        results.append(make(schema.AlterConfigsResourceResponse, error_code=error,
                            error_message=message, resource_type=res.resource_type,
                            resource_name=res.resource_name))
    return make(schema.IncrementalAlterConfigsResponse, throttle_time=NO_THROTTLE,
                responses=tuple(results))
