"""DeleteTopics (20): delete topics by name (or by id, v6)."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import MetadataError
from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6
ZERO_UUID = uuid.UUID(int=0)


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    refusal = None
    if not services.config["delete.topic.enable"]:  # before anything else, as Kafka's KafkaApis
        refusal = (ErrorCode.invalid_request if ctx.api_version < 3 else ErrorCode.topic_deletion_disabled,
                   "Topic deletion is disabled.")
    elif any(name is not None and topic_id not in (None, ZERO_UUID) for name, topic_id in wanted):
        # Kafka fails the whole request (InvalidRequestException): nothing is deleted
        refusal = (ErrorCode.invalid_request, "Topic name and topic ID can not both be specified.")
    if refusal is not None:
        return make(schema.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=tuple(
            make(schema.DeletableTopicResult, name=name, topic_id=topic_id or ZERO_UUID, error_code=refusal[0],
                 error_message=refusal[1]) for name, topic_id in wanted))
    results = []
    for name, topic_id in wanted:
        if name is None and topic_id is not None and topic_id != ZERO_UUID:
            found = services.metadata.topic_by_id(topic_id)
            if found is None:
                results.append(make(schema.DeletableTopicResult, name=None, topic_id=topic_id,
                                    error_code=ErrorCode.unknown_topic_id,
                                    error_message="This server does not host this topic ID."))
                continue
            if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, found.name):
                # Kafka: the name stays undisclosed.
                results.append(make(schema.DeletableTopicResult, name=None, topic_id=topic_id,
                                    error_code=ErrorCode.topic_authorization_failed,
                                    error_message="Authorization failed."))
                continue
            name = found.name
        if name is not None and not authorize(services, ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
            results.append(make(schema.DeletableTopicResult, name=name, topic_id=topic_id or ZERO_UUID,
                                error_code=ErrorCode.topic_authorization_failed,
                                error_message="Authorization failed."))
            continue
        if name is None:
            results.append(make(schema.DeletableTopicResult, name=None, topic_id=ZERO_UUID,
                                error_code=ErrorCode.invalid_request, error_message="no topic name or id"))
            continue
        try:
            topic = await services.admin_manager.delete_topic(name)
            results.append(make(schema.DeletableTopicResult, name=name, topic_id=topic.uuid,
                                error_code=ErrorCode.none, error_message=None))
        except MetadataError as e:
            results.append(make(schema.DeletableTopicResult, name=name, topic_id=topic_id or ZERO_UUID,
                                error_code=ErrorCode[e.error], error_message=str(e)))
    return make(schema.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))
