"""CreatePartitions (37): grow a topic's partition count."""

from __future__ import annotations

from collections import Counter
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
    counts = Counter(t.name for t in request.topics)
    results = []
    answered: set[str] = set()
    for t in request.topics:
        if t.name in answered:
            continue  # Kafka answers a duplicated topic once
        answered.add(t.name)
        error, message = ErrorCode.none, None
        if counts[t.name] > 1:
            error, message = ErrorCode.invalid_request, "Duplicate topic in request."
        elif not authorize(services, ctx, AclOperation.ALTER, ResourceType.TOPIC, t.name):
            error, message = ErrorCode.topic_authorization_failed, "The topic authorization is failed."
        else:
            assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
            try:
                await services.admin_manager.create_partitions(t.name, t.count, request.validate_only,
                                                               assignments)
            except MetadataError as e:
                error, message = ErrorCode[e.error], str(e)
        results.append(make(schema.CreatePartitionsTopicResult, name=t.name, error_code=error,
                            error_message=message))
    return make(schema.CreatePartitionsResponse, throttle_time=NO_THROTTLE, results=tuple(results))
