"""DescribeDelayedRecords (dmq's extension 10002): how many delayed records a partition holds.

Answered by each partition's leader from ``Log.delayed`` (docs/delayed-delivery.md);
``dmq topics describe`` shows it. Not advertised in ApiVersions: only dmq's tools send it.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.protocol.extensions import DESCRIBE_DELAYED_KEY
from dmq.replication.partition import PartitionError

API_KEY = DESCRIBE_DELAYED_KEY
MIN_VERSION = 0
MAX_VERSION = 0
ADVERTISED = False


def _partition(services: BrokerServices, ctx: RequestContext, schema: Any, topic: str, index: int) -> Any:
    if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic):  # as ListOffsets
        return make(schema.DelayedPartition, partition_index=index, error_code=ErrorCode.topic_authorization_failed,
                    pending=0, awaiting_commit=0, next_deliver_ms=-1)
    try:
        delayed = services.replica_manager.leader_partition(topic, index).log.delayed
    except PartitionError as e:
        return make(schema.DelayedPartition, partition_index=index, error_code=e.error, pending=0,
                    awaiting_commit=0, next_deliver_ms=-1)
    return make(schema.DelayedPartition, partition_index=index, error_code=ErrorCode.none,
                pending=delayed.pending, awaiting_commit=sum(len(w) for w in delayed.awaiting.values()),
                next_deliver_ms=delayed.earliest() if delayed.pending else -1)


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    return make(schema.DescribeDelayedRecordsResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(schema.DelayedTopic, name=t.name, partitions=tuple(
            _partition(services, ctx, schema, t.name, int(p)) for p in t.partitions))
        for t in request.topics))
