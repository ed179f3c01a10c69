"""WriteShareGroupState (85): persist share-partition states, durable once answered
(inter-broker; NOT_COORDINATOR where this broker does not lead the key's
``__share_group_state`` partition). Not advertised in ApiVersions (broker-to-broker only)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.share.persister import SharePartitionKey
from dmq.share.records import UNKNOWN_DELIVERY_COMPLETE_COUNT, StateBatch

API_KEY = 85
MIN_VERSION = 0
MAX_VERSION = 1
ADVERTISED = False


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    coordinator = services.share_coordinator
    allowed = authorize(services, ctx, AclOperation.CLUSTER_ACTION)  # brokers' requests (Kafka)
    if coordinator is not None and allowed:
        await coordinator.topic.ensure_exists()  # created on first use, as Kafka does
    results = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if not allowed:
                error = ErrorCode.cluster_authorization_failed
            elif topic.topic_id is None:
                error = ErrorCode.invalid_request
            elif coordinator is None:
                error = ErrorCode.coordinator_not_available
            else:
                key = SharePartitionKey(request.group_id, topic.topic_id, p.partition)
                batches = tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                for b in p.state_batches)
                error = await coordinator.write_state(
                    key, p.state_epoch, p.leader_epoch, p.start_offset, batches,
                    getattr(p, "delivery_complete_count", UNKNOWN_DELIVERY_COMPLETE_COUNT))
            partitions.append(make(schema.PartitionResult, partition=p.partition, error_code=error,
                                   error_message=None))
        results.append(make(schema.WriteStateResult, topic_id=topic.topic_id, partitions=tuple(partitions)))
    return make(schema.WriteShareGroupStateResponse, results=tuple(results))
