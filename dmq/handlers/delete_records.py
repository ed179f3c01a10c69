"""DeleteRecords (21): move partitions' log start offsets forward (-1: to the high watermark),
answered once the followers' log starts are there too or the request's timeout passed
(``ReplicaManager.delete_records``).

Internal topics are refused with INVALID_TOPIC_EXCEPTION, as Kafka's ReplicaManager refuses
them: their coordinators keep state in them, which a moved log start would take from the
next coordinator to load the log."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import INTERNAL_TOPICS
from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    refused: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], int] = {}
    for t in request.topics:
        deletable = authorize(services, ctx, AclOperation.DELETE, ResourceType.TOPIC, t.name)
        internal = t.name in INTERNAL_TOPICS and services.metadata.topic(t.name) is not None
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if not deletable:
                refused[tp] = ErrorCode.topic_authorization_failed
            elif internal:
                refused[tp] = ErrorCode.invalid_topic_exception
            else:
                offsets[tp] = p.offset
    # Waits until the followers' log starts reach the offsets too (Kafka's DelayedDeleteRecords).
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    done = await services.replica_manager.delete_records(offsets, timeout_ms) if offsets else {}
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            low, error = done[tp] if tp in done else (-1, refused[tp])
            partitions.append(make(schema.DeleteRecordsPartitionResult,
                                   partition_index=p.partition_index, low_watermark=low,
                                   error_code=error))
        topics.append(make(schema.DeleteRecordsTopicResult, name=t.name, partitions=tuple(partitions)))
    return make(schema.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))
