"""OffsetDelete (47): remove committed offsets of partitions a group no longer consumes."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    # Kafka: DELETE on the group, READ on each topic.
    if not authorize(services, ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return make(schema.OffsetDeleteResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.group_authorization_failed, topics=())
    refused = {t.name for t in request.topics
               if not authorize(services, ctx, AclOperation.READ, ResourceType.TOPIC, t.name)}
    # As Kafka's handleOffsetDeleteRequest: partitions the cluster does not have are
    # UNKNOWN_TOPIC_OR_PARTITION, not asked of the coordinator.
    unknown: set[tuple[str, int]] = set()
    for t in request.topics:
        meta = services.metadata.topic(t.name) if t.name not in refused else None
        unknown.update((t.name, p.partition_index) for p in t.partitions
                       if t.name not in refused and (meta is None or p.partition_index not in meta.partitions))
    await services.coordinators.ensure_offsets_topic()  # group writes go to its log
    wanted = [(t.name, p.partition_index) for t in request.topics if t.name not in refused
              for p in t.partitions if (t.name, p.partition_index) not in unknown]
    error, results = await services.coordinators.group.delete_offsets(request.group_id, wanted)

    def partition_error(topic: str, partition: int) -> ErrorCode:
        if topic in refused:
            return ErrorCode.topic_authorization_failed
        if (topic, partition) in unknown:
            return ErrorCode.unknown_topic_or_partition
        return results.get((topic, partition), ErrorCode.none)

    topics = tuple(
        make(schema.OffsetDeleteResponseTopic, name=t.name, partitions=tuple(
            make(schema.OffsetDeleteResponsePartition, partition_index=p.partition_index,
                 error_code=partition_error(t.name, p.partition_index))
            for p in t.partitions))
        for t in request.topics
    ) if error == ErrorCode.none else ()
    return make(schema.OffsetDeleteResponse, throttle_time=NO_THROTTLE, error_code=error, topics=topics)
