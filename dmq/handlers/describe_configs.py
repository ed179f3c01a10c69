"""DescribeConfigs (32): topic, broker and group configs with their source and synonyms."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import MetadataError, validate_topic_name
from dmq.config import (
    BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    GROUP_CONFIGS,
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    LogConfig,
    format_value,
    group_config_values,
)
from dmq.handlers.authorize import AclOperation, authorize_config_resource
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 4

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32


def _entry(schema: Any, request: Any, name: str, value: str | None, source: ConfigSource,
           read_only: bool, synonyms: list[tuple[str, str, ConfigSource]], ctype: int, doc: str) -> Any:
    sensitive = ctype == int(ConfigType.PASSWORD)  # passwords are never shown, as in Kafka
    syns = tuple(
        make(schema.DescribeConfigsSynonym, name=n, value=None if sensitive else v, source=int(s))
        for n, v, s in synonyms
    ) if request.include_synonyms else ()
    return make(schema.DescribeConfigsResourceResult, name=name, value=None if sensitive else value,
                read_only=read_only, config_source=int(source), is_sensitive=sensitive,
                synonyms=syns, config_type=ctype,
                documentation=doc if getattr(request, "include_documentation", False) else None)


def describe_topic(services: BrokerServices, schema: Any, request: Any, name: str,
                   keys: set[str] | None) -> tuple[ErrorCode, str | None, list[Any]]:
    try:
        validate_topic_name(name)  # Kafka's Topic.validate before the lookup
    except MetadataError as e:
        return ErrorCode.invalid_topic_exception, str(e), []
    topic = services.metadata.topic(name)
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist.", []
    out = []
    for cname, value, source, synonyms in LogConfig(services.config, topic.configs).describe():
        if keys is not None and cname not in keys:
            continue
        cdef = TOPIC_CONFIGS[cname]
        out.append(_entry(schema, request, cname, value, source, False, synonyms,
                          int(cdef.type), cdef.doc))
    return ErrorCode.none, None, out


def describe_broker(services: BrokerServices, schema: Any, request: Any, name: str,
                    keys: set[str] | None) -> tuple[ErrorCode, str | None, list[Any]]:
    if name not in ("", str(services.broker_id)):
        return ErrorCode.invalid_request, f"Unexpected broker id {name!r}, expected {services.broker_id}", []
    out = []
    config = services.config
    if name == "":
        # The cluster-wide default resource: the dynamic defaults alone, as Kafka's
        # ConfigHelper (currentDynamicDefaultConfigs), not this broker's whole config.
        for cname, raw in sorted(config.dynamic_default.items()):
            if keys is not None and cname not in keys:
                continue
            cdef = BROKER_CONFIGS[cname]
            source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
            out.append(_entry(schema, request, cname, raw, source, False, [(cname, raw, source)],
                              int(cdef.type), cdef.doc))
        return ErrorCode.none, None, out
    for cname, cdef in BROKER_CONFIGS.items():
        if keys is not None and cname not in keys:
            continue
        value = config.values[cname]
        text = None if value is None else format_value(value)
        out.append(_entry(schema, request, cname, text, config.source(cname),
                          cname not in DYNAMIC_BROKER_CONFIGS, config.synonyms(cname),
                          int(cdef.type), cdef.doc))
    return ErrorCode.none, None, out


def describe_group(services: BrokerServices, schema: Any, request: Any, name: str,
                   keys: set[str] | None) -> tuple[ErrorCode, str | None, list[Any]]:
    """A group's configs (whether or not the group exists, as Kafka): each override, or the
    broker's ``group.share.*`` value it falls back to."""
    if not name:
        return ErrorCode.invalid_request, "Group name must not be empty", []
    out = []
    for cname, (value, source, synonyms) in group_config_values(services.config,
                                                                  services.metadata.group_configs(name)).items():
        if keys is not None and cname not in keys:
            continue
        cdef = GROUP_CONFIGS[cname]
        out.append(_entry(schema, request, cname, format_value(value), source, False, synonyms,
                          int(cdef.type), cdef.doc))
    return ErrorCode.none, None, out


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    results = []
    for res in request.resources:
        keys = set(res.configuration_keys) if res.configuration_keys else None
        error: ErrorCode
        message: str | None
        configs: list[Any]
        refused = authorize_config_resource(services, ctx, AclOperation.DESCRIBE_CONFIGS,
                                            res.resource_type, res.resource_name)
        if refused != ErrorCode.none:
            error, message, configs = refused, "Authorization failed.", []
        elif res.resource_type == RESOURCE_TOPIC:
            error, message, configs = describe_topic(services, schema, request, res.resource_name, keys)
        elif res.resource_type == RESOURCE_BROKER:
            error, message, configs = describe_broker(services, schema, request, res.resource_name, keys)
        elif res.resource_type == RESOURCE_GROUP:
            error, message, configs = describe_group(services, schema, request, res.resource_name, keys)
        else:
            error, message, configs = (ErrorCode.invalid_request,
                                       f"Unsupported resource type {res.resource_type}", [])
        results.append(make(schema.DescribeConfigsResult, error_code=error, error_message=message,
                            resource_type=res.resource_type, resource_name=res.resource_name,
                            configs=tuple(configs)))
    return make(schema.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))
