"""DescribeSharePartitions (dmq's extension 10003): a share group's share-partitions as
their leader holds them (start and end offsets, records in flight, acquired, waiting for
their dead letters, done). ``dmq groups describe`` asks each partition's leader; the
schema is in ``dmq.protocol.extensions``. Not advertised in ApiVersions."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.protocol.extensions import DESCRIBE_SHARE_PARTITIONS_KEY

API_KEY = DESCRIBE_SHARE_PARTITIONS_KEY
MIN_VERSION = 0
MAX_VERSION = 0
ADVERTISED = False


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    if services.share is None or not request.group_id:
        error = ErrorCode.unsupported_version if services.share is None else ErrorCode.invalid_group_id
        return make(schema.DescribeSharePartitionsResponse, throttle_time=NO_THROTTLE, error_code=error, topics=())
    # As DescribeShareGroupOffsets: DESCRIBE on the group and on each topic.
    if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, request.group_id):
        return make(schema.DescribeSharePartitionsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.group_authorization_failed, topics=())
    hidden = set()
    for t in request.topics:
        meta = services.metadata.topic_by_id(t.topic_id)
        if meta is not None and not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, meta.name):
            hidden.add(t.topic_id)
    wanted = [(t.topic_id, p) for t in request.topics if t.topic_id not in hidden for p in t.partitions]
    described = services.share.partitions.describe(request.group_id, wanted)
    described.update({(t.topic_id, p): (ErrorCode.topic_authorization_failed, None)
                      for t in request.topics if t.topic_id in hidden for p in t.partitions})
    topics = []
    for t in request.topics:
        parts = []
        for index in t.partitions:
            error, sp = described[(t.topic_id, index)]
            parts.append(make(
                schema.DescribedSharePartition, partition_index=index, error_code=error, loaded=sp is not None,
                start_offset=sp.start_offset if sp is not None else -1,
                end_offset=sp.end_offset if sp is not None else -1,
                in_flight=sp.in_flight_records if sp is not None else 0,
                acquired=sp.acquired_records if sp is not None else 0,
                archiving=sp.archiving_records if sp is not None else 0,
                delivery_complete=sp.delivery_complete_count if sp is not None else 0))
        topics.append(make(schema.DescribedShareTopic, topic_id=t.topic_id, partitions=tuple(parts)))
    return make(schema.DescribeSharePartitionsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                topics=tuple(topics))
