"""ShareGroupHeartbeat (76): join, stay in and leave a share group (KIP-932).

Only v1: v0 was Kafka 4.0's early access and is gone since 4.1, and librdkafka's
ShareConsumer sends exactly v1. Advertised in ApiVersions only once the rest of
what a share consumer needs exists (``SHARE_GROUPS_ADVERTISED``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import (
    NO_THROTTLE,
    SHARE_GROUPS_ADVERTISED,
    BrokerServices,
    RequestContext,
)
from dmq.protocol.codec import make

API_KEY = 76
MIN_VERSION = 1
MAX_VERSION = 1
ADVERTISED = SHARE_GROUPS_ADVERTISED


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    topics = request.subscribed_topic_names
    # Kafka (KIP-932): READ on the group; DESCRIBE on each subscribed topic.
    refused = None
    if not authorize(services, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        refused = ErrorCode.group_authorization_failed, "Authorization failed."
    elif topics:
        hidden = sorted(t for t in topics if not authorize(services, ctx, AclOperation.DESCRIBE,
                                                           ResourceType.TOPIC, t))
        if hidden:
            refused = ErrorCode.topic_authorization_failed, f"Topic authorization failed for topics {hidden}"
    if refused is not None:
        return make(schema.ShareGroupHeartbeatResponse, throttle_time=NO_THROTTLE, error_code=refused[0],
                    error_message=refused[1], member_id=None, member_epoch=0,
                    heartbeat_interval=timedelta(0), assignment=None)
    await services.coordinators.ensure_offsets_topic()  # group writes go to its log
    result = await services.coordinators.group.share_group_heartbeat(
        request.group_id, request.member_id, request.member_epoch, request.rack_id,
        list(topics) if topics is not None else None, ctx.client_id or "", ctx.client_host)
    assignment = None
    if result.assignment is not None:
        assignment = make(schema.Assignment, topic_partitions=tuple(
            make(schema.TopicPartitions, topic_id=topic_id, partitions=partitions)
            for topic_id, partitions in result.assignment.items()))
    return make(schema.ShareGroupHeartbeatResponse, throttle_time=NO_THROTTLE, error_code=result.error,
                error_message=result.message, member_id=result.member_id, member_epoch=result.member_epoch,
                heartbeat_interval=timedelta(milliseconds=result.heartbeat_interval_ms), assignment=assignment)
