"""OffsetForLeaderEpoch (23): where a leader epoch ends in the leader's log.

A follower (or a KIP-320 consumer) asks, for the last epoch it has, for the
end offset of that epoch in the leader's log, and truncates its own log
there so it never keeps records the leader does not have.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.replication.partition import PartitionError

API_KEY = 23
MIN_VERSION = 2
MAX_VERSION = 4


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    rm = services.replica_manager
    topics = []
    # Kafka: CLUSTER_ACTION (followers), else DESCRIBE on each topic.
    as_cluster = authorize(services, ctx, AclOperation.CLUSTER_ACTION)
    for t in request.topics:
        partitions = []
        described = as_cluster or authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic)
        for p in t.partitions:
            error, epoch, end_offset = ErrorCode.none, -1, -1
            if not described:
                partitions.append(make(schema.EpochEndOffset, error_code=ErrorCode.topic_authorization_failed,
                                       partition=p.partition, leader_epoch=epoch, end_offset=end_offset))
                continue
            try:
                partition = rm.leader_partition(t.topic, p.partition, p.current_leader_epoch)
                epoch, end_offset = partition.log.leader_epochs.end_offset_for(
                    p.leader_epoch, partition.log.log_end_offset)
            except PartitionError as e:
                error = e.error
            partitions.append(make(schema.EpochEndOffset, error_code=error, partition=p.partition,
                                   leader_epoch=epoch, end_offset=end_offset))
        topics.append(make(schema.OffsetForLeaderTopicResult, topic=t.topic,
                           partitions=tuple(partitions)))
    return make(schema.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))
