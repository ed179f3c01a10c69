"""ListPartitionReassignments (46): reassignments in progress, with adding and removing replicas."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import MetadataError
from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    if not authorize(services, ctx, AclOperation.DESCRIBE):
        return make(schema.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.", topics=())
    try:
        ongoing = await services.metadata.ongoing_reassignments()
    except MetadataError as e:
        return make(schema.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode[e.error], error_message=str(e), topics=())
    wanted = None if request.topics is None else {
        (t.name, p) for t in request.topics for p in t.partition_indexes}
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), (adding, removing) in sorted(ongoing.items()):
        if wanted is not None and (topic, p) not in wanted:
            continue
        meta = services.metadata.topic(topic)
        replicas = meta.partitions[p].replicas if meta and p in meta.partitions else []
        by_topic.setdefault(topic, []).append(make(
            schema.OngoingPartitionReassignment, partition_index=p, replicas=tuple(replicas),
            adding_replicas=tuple(adding), removing_replicas=tuple(removing)))
    topics = tuple(make(schema.OngoingTopicReassignment, name=name, partitions=tuple(parts))
                   for name, parts in by_topic.items())
    return make(schema.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                error_code=ErrorCode.none, error_message=None, topics=topics)
