"""ReadShareGroupStateSummary (87): state epoch, leader epoch, start offset and delivery
complete count of share-partitions (DescribeShareGroupOffsets; inter-broker;
NOT_COORDINATOR where this broker does not lead the key's ``__share_group_state``
partition). Not advertised in ApiVersions (broker-to-broker only)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.share.persister import SharePartitionKey, StateSummary

API_KEY = 87
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
                summary = StateSummary(ErrorCode.cluster_authorization_failed)
            elif topic.topic_id is None:
                summary = StateSummary(ErrorCode.invalid_request)
            elif coordinator is None:
                summary = StateSummary(ErrorCode.coordinator_not_available)
            else:
                summary = await coordinator.read_state_summary(
                    SharePartitionKey(request.group_id, topic.topic_id, p.partition), p.leader_epoch)
            partitions.append(make(
                schema.PartitionResult, partition=p.partition, error_code=summary.error, error_message=None,
                state_epoch=summary.state_epoch, leader_epoch=summary.leader_epoch,
                start_offset=summary.start_offset, delivery_complete_count=summary.delivery_complete_count))
        results.append(make(schema.ReadStateSummaryResult, topic_id=topic.topic_id,
                            partitions=tuple(partitions)))
    return make(schema.ReadShareGroupStateSummaryResponse, results=tuple(results))
