"""CreatePartitions (37): grow a topic's partition count."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import MetadataError
from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    live = {b.broker_id for b in services.metadata.brokers()}
    results = []
    for t in request.topics:
        error, message = ErrorCode.none, None
        bad = [a.broker_ids for a in (t.assignments or ()) if not a.broker_ids or set(a.broker_ids) - live]
        if not authorize(services, ctx, AclOperation.ALTER, ResourceType.TOPIC, t.name):
            error, message = ErrorCode.topic_authorization_failed, "The topic authorization is failed."
        elif bad:
            error, message = ErrorCode.invalid_replica_assignment, f"Invalid replica assignment {bad[0]}"
        else:
            try:
                await services.admin_manager.create_partitions(t.name, t.count, request.validate_only)
            except MetadataError as e:
                error, message = ErrorCode[e.error], str(e)
        results.append(make(schema.CreatePartitionsTopicResult, name=t.name, error_code=error,
                            error_message=message))
    return make(schema.CreatePartitionsResponse, throttle_time=NO_THROTTLE, results=tuple(results))
