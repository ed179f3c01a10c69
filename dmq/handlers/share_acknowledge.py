"""ShareAcknowledge (79): acknowledge records without fetching; epoch -1 closes the share
session (KIP-932).

Only v1. Every partition that carried acknowledgements is answered, its ErrorCode the
acknowledgement's outcome (librdkafka maps it onto its acknowledgement batches);
CurrentLeader is -1/-1 except with NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH. Not
advertised until share groups are (``SHARE_GROUPS_ADVERTISED``); without a share
service the broker answers UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.context import (
    NO_THROTTLE,
    SHARE_GROUPS_ADVERTISED,
    BrokerServices,
    RequestContext,
)
from dmq.handlers.share_fetch import authorized_entries, current_leader, node_endpoints
from dmq.protocol.codec import make
from dmq.share.service import ShareOutcome

API_KEY = 79
MIN_VERSION = 1
MAX_VERSION = 1
ADVERTISED = SHARE_GROUPS_ADVERTISED


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    share = services.share
    refusal, entries, refused = authorized_entries(services, ctx, request.group_id, request.topics)
    if share is None:
        outcome = ShareOutcome(ErrorCode.unsupported_version)
    elif refusal != ErrorCode.none:
        outcome = ShareOutcome(refusal)
    elif refused and not entries:
        outcome = ShareOutcome(ErrorCode.none, refused)
    else:
        outcome = await share.share_acknowledge(request.group_id, request.member_id,
                                                request.share_session_epoch, entries, ctx.connection_id)
        if refused:
            outcome = ShareOutcome(outcome.error, {**outcome.partitions, **refused})
    by_topic: dict[uuid.UUID, list[Any]] = {}
    leaders: set[int] = set()
    for (topic_id, index), p in outcome.partitions.items():
        error = p.ack_error if p.ack_error is not None else p.error
        leader_id, leader_epoch = current_leader(services, topic_id, index, error)
        if leader_id >= 0:
            leaders.add(leader_id)
        by_topic.setdefault(topic_id, []).append(make(
            schema.PartitionData, partition_index=index, error_code=error,
            current_leader=make(schema.LeaderIdAndEpoch, leader_id=leader_id, leader_epoch=leader_epoch)))
    responses = tuple(make(schema.ShareAcknowledgeTopicResponse, topic_id=topic_id, partitions=tuple(parts))
                      for topic_id, parts in by_topic.items())
    return make(schema.ShareAcknowledgeResponse, throttle_time=NO_THROTTLE, error_code=outcome.error,
                responses=responses, node_endpoints=node_endpoints(services, schema, leaders, ctx.listener))
