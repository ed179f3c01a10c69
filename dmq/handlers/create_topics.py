"""CreateTopics (19): create topics (or only validate them), with configs and assignments."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.admin_manager import manual_assignment
from dmq.cluster.metadata import CLUSTER_METADATA_TOPIC, MetadataError
from dmq.config import LogConfig
from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    counts = Counter(t.name for t in request.topics)
    results = []
    may_create_any = authorize(services, ctx, AclOperation.CREATE)
    for t in request.topics:
        if t.name == CLUSTER_METADATA_TOPIC:  # before the duplicate and ACL checks, as Kafka's
            results.append(make(schema.CreatableTopicResult, name=t.name, topic_id=None,
                                error_code=ErrorCode.invalid_request,
                                error_message=f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.",
                                num_partitions=-1, replication_factor=-1, configs=None))
            continue
        if not (may_create_any or authorize(services, ctx, AclOperation.CREATE, ResourceType.TOPIC, t.name)):
            results.append(make(schema.CreatableTopicResult, name=t.name, topic_id=None,
                                error_code=ErrorCode.topic_authorization_failed,
                                error_message="Authorization failed.",
                                num_partitions=-1, replication_factor=-1, configs=None))
            continue
        if counts[t.name] > 1:
            results.append(make(schema.CreatableTopicResult, name=t.name, topic_id=None,
                                error_code=ErrorCode.invalid_request,
                                error_message=f"Create topics request from client contains "
                                              f"multiple entries for topic {t.name}.",
                                num_partitions=-1, replication_factor=-1, configs=None))
            continue
        configs = {c.name: c.value for c in t.configs}
        try:
            assignment = manual_assignment([(a.partition_index, list(a.broker_ids)) for a in t.assignments])
            topic = await services.admin_manager.create_topic(
                t.name, t.num_partitions, t.replication_factor, configs, assignment,
                validate_only=request.validate_only)
        except MetadataError as e:
            results.append(make(schema.CreatableTopicResult, name=t.name, topic_id=None,
                                error_code=ErrorCode[e.error], error_message=str(e),
                                num_partitions=-1, replication_factor=-1, configs=None))
            continue
        described = None
        config_error = ErrorCode.none
        if not authorize(services, ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, t.name):
            config_error = ErrorCode.topic_authorization_failed  # Kafka: no configs shown
        elif hasattr(schema, "CreatableTopicConfigs"):  # v5+ echoes the effective configs
            log_config = LogConfig(services.config, topic.configs)
            described = tuple(
                make(schema.CreatableTopicConfigs, name=name, value=value, read_only=False,
                     config_source=int(source), is_sensitive=False)
                for name, value, source, _syn in log_config.describe()
            )
        if config_error != ErrorCode.none:
            num_partitions, rf = -1, -1  # Kafka shows them with the configs only
        elif topic.partitions:
            num_partitions, rf = len(topic.partitions), len(next(iter(topic.partitions.values())).replicas)
        elif assignment:  # validate_only: what the assignment would create
            num_partitions, rf = len(assignment), len(next(iter(assignment.values())))
        else:
            num_partitions = t.num_partitions if t.num_partitions > 0 else int(services.config["num.partitions"])
            rf = t.replication_factor if t.replication_factor > 0 \
                else int(services.config["default.replication.factor"])
        results.append(make(schema.CreatableTopicResult, name=t.name,
                            topic_id=topic.uuid if topic.partitions else None,
                            error_code=ErrorCode.none, error_message=None,
                            num_partitions=num_partitions, replication_factor=rf,
                            configs=described, topic_config_error_code=config_error))
    return make(schema.CreateTopicsResponse, throttle_time=NO_THROTTLE, topics=tuple(results))
