"""DescribeProducers (61): the active producers of partitions hosted here (KIP-664).

As Kafka, any replica answers from its own log's producer state (the leader's is
current, a follower's as far as it has fetched): producer id and epoch, last
sequence and timestamp, the epoch of the coordinator that wrote its last marker,
and the first offset of its open transaction (-1: none). A partition the cluster
has elsewhere is NOT_LEADER_OR_FOLLOWER, one it lacks UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.replication.partition import PartitionError

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    rm = services.replica_manager
    topics = []
    for t in request.topics:
        partitions = []
        readable = authorize(services, ctx, AclOperation.READ, ResourceType.TOPIC, t.name)
        for index in t.partition_indexes:
            error, message, producers = ErrorCode.none, None, []
            try:
                if not readable:
                    error, message = ErrorCode.topic_authorization_failed, "Authorization failed."
                else:
                    producers = rm.active_producers(t.name, index)
            except PartitionError as e:
                error, message = e.error, str(e)
            partitions.append(make(
                schema.PartitionResponse, partition_index=index, error_code=error, error_message=message,
                active_producers=tuple(make(
                    schema.ProducerState, producer_id=p.producer_id, producer_epoch=p.epoch,
                    last_sequence=p.last_seq, last_timestamp=p.last_timestamp,
                    coordinator_epoch=p.coordinator_epoch, current_txn_start_offset=p.current_txn_first_offset)
                    for p in producers)))
        topics.append(make(schema.TopicResponse, name=t.name, partitions=tuple(partitions)))
    return make(schema.DescribeProducersResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))
