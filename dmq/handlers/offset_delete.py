"""OffsetDelete (47): remove committed offsets of partitions a group no longer consumes."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    await services.coordinators.ensure_offsets_topic()  # group writes go to its log
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error, results = await services.coordinators.group.delete_offsets(request.group_id, wanted)
    topics = tuple(
        make(schema.OffsetDeleteResponseTopic, name=t.name, partitions=tuple(
            make(schema.OffsetDeleteResponsePartition, partition_index=p.partition_index,
                 error_code=results.get((t.name, p.partition_index), ErrorCode.none))
            for p in t.partitions))
        for t in request.topics
    ) if error == ErrorCode.none else ()
    return make(schema.OffsetDeleteResponse, throttle_time=NO_THROTTLE, error_code=error, topics=topics)
