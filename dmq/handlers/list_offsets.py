"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3) or first offset at a timestamp."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.replication.partition import Partition, PartitionError

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 7

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


def found_epoch(partition: Partition, timestamp: int, offset: int) -> int:
    """The leader epoch ListOffsets answers with an offset: the partition's current one for
    the latest offset, else the epoch that wrote the offset found (-1 for none), as Kafka's
    fetchOffsetForTimestamp. A consumer that seeks there checks that epoch for truncation
    (KIP-320); the current epoch would hide a truncation since."""
    if timestamp == LATEST:
        return partition.leader_epoch
    if offset < 0:
        return -1
    return partition.log.leader_epochs.epoch_for(offset)


def lookup(partition: Partition, timestamp: int, read_committed: bool = False) -> tuple[int, int]:
    """(offset, timestamp) for a ListOffsets query; (-1, -1) when no record matches.
    read_committed: the latest offset is the last stable offset, and a lookup by time
    finds nothing at or past it."""
    lg = partition.log
    if timestamp == EARLIEST:
        return lg.log_start_offset, -1
    # A new leader whose high watermark has not yet reached the start of its epoch does not
    # know how far the log is committed: OFFSET_NOT_AVAILABLE (retriable) for the latest
    # offset and for a lookup past what is fetchable, as Kafka's fetchOffsetForTimestamp;
    # else the latest offset would go back and a time lookup find nothing.
    lagging = partition.leader_epoch_start_offset > partition.high_watermark
    if timestamp == LATEST:
        if lagging:
            raise PartitionError(ErrorCode.offset_not_available)
        return (lg.last_stable_offset() if read_committed else partition.high_watermark), -1
    if timestamp == MAX_TIMESTAMP:
        found = lg.offset_of_max_timestamp()
    else:
        found = lg.offset_for_timestamp(timestamp)
    # Only a fetchable offset: below the high watermark, or for read_committed below the
    # last stable offset, as Kafka's fetchOffsetForTimestamp. A lagging leader that finds
    # none, or none fetchable, does not know that there is none: OFFSET_NOT_AVAILABLE
    # (Kafka's ReplicaManager.fetchOffset throws maybeOffsetsError for an empty lookup too).
    bound = lg.last_stable_offset() if read_committed else partition.high_watermark
    if found is None or found[0] >= bound:
        if lagging:
            raise PartitionError(ErrorCode.offset_not_available)
        return -1, -1
    return found


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    rm = services.replica_manager
    # A partition asked more than once is answered once, INVALID_REQUEST (Kafka's
    # ListOffsetsRequest.duplicatePartitions): which of its queries to answer is not said.
    asked: set[tuple[str, int]] = set()
    duplicated: set[tuple[str, int]] = set()
    for t in request.topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            (duplicated if key in asked else asked).add(key)
    answered: set[tuple[str, int]] = set()
    topics = []
    for t in request.topics:
        partitions = []
        described = authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            error, offset, ts, epoch = ErrorCode.none, -1, -1, -1
            key = (t.name, p.partition_index)
            if described and key in duplicated:
                if key in answered:
                    continue
                answered.add(key)
                error = ErrorCode.invalid_request
            if not described or error != ErrorCode.none:
                partitions.append(make(schema.ListOffsetsPartitionResponse,
                                       partition_index=p.partition_index,
                                       error_code=error if described else ErrorCode.topic_authorization_failed,
                                       timestamp=ts, offset=offset, leader_epoch=epoch))
                continue
            try:
                partition = rm.leader_partition(t.name, p.partition_index, getattr(p, "current_leader_epoch", -1))
                if p.timestamp < MAX_TIMESTAMP or (p.timestamp == MAX_TIMESTAMP and ctx.api_version < 7):
                    error = ErrorCode.unsupported_version
                else:
                    offset, ts = lookup(partition, p.timestamp, getattr(request, "isolation_level", 0) == 1)
                    epoch = found_epoch(partition, p.timestamp, offset)
            except PartitionError as e:
                error = e.error
                if error == ErrorCode.offset_not_available and ctx.api_version < 5:
                    error = ErrorCode.leader_not_available  # as Kafka answers versions before 5
            partitions.append(make(schema.ListOffsetsPartitionResponse,
                                   partition_index=p.partition_index, error_code=error,
                                   timestamp=ts, offset=offset, leader_epoch=epoch))
        topics.append(make(schema.ListOffsetsTopicResponse, name=t.name, partitions=tuple(partitions)))
    return make(schema.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))
