"""DeleteRecords (21): move partitions' log start offsets forward (-1: to the high watermark).

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
from dmq.replication.partition import PartitionError

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    rm = services.replica_manager
    topics = []
    for t in request.topics:
        partitions = []
        deletable = authorize(services, ctx, AclOperation.DELETE, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            low, error = -1, ErrorCode.none
            try:
                if not deletable:
                    error = ErrorCode.topic_authorization_failed
                elif t.name in INTERNAL_TOPICS and services.metadata.topic(t.name) is not None:
                    error = ErrorCode.invalid_topic_exception
                else:
                    low = rm.leader_partition(t.name, p.partition_index).delete_records(p.offset)
            except PartitionError as e:
                error = e.error
            partitions.append(make(schema.DeleteRecordsPartitionResult,
                                   partition_index=p.partition_index, low_watermark=low,
                                   error_code=error))
        topics.append(make(schema.DeleteRecordsTopicResult, name=t.name, partitions=tuple(partitions)))
    return make(schema.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))
