"""ReadShareGroupState (84): share-partition states, a newer leader epoch recorded
(inter-broker; NOT_COORDINATOR where this broker does not lead the key's
``__share_group_state`` partition). Not advertised in ApiVersions (broker-to-broker only)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.share.persister import ReadStateResult, SharePartitionKey

API_KEY = 84
MIN_VERSION = 0
MAX_VERSION = 0
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
                answer = ReadStateResult(ErrorCode.cluster_authorization_failed)
            elif topic.topic_id is None:
                answer = ReadStateResult(ErrorCode.invalid_request)
            elif coordinator is None:
                answer = ReadStateResult(ErrorCode.coordinator_not_available)
            else:
                key = SharePartitionKey(request.group_id, topic.topic_id, p.partition)
                answer = await coordinator.read_state(key, p.leader_epoch)
            partitions.append(make(
                schema.PartitionResult, partition=p.partition, error_code=answer.error,
                error_message=answer.error_message, state_epoch=answer.state_epoch,
                start_offset=answer.start_offset, state_batches=tuple(
                    make(schema.StateBatch, first_offset=b.first_offset, last_offset=b.last_offset,
                         delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                    for b in answer.state_batches)))
        results.append(make(schema.ReadStateResult, topic_id=topic.topic_id, partitions=tuple(partitions)))
    return make(schema.ReadShareGroupStateResponse, results=tuple(results))
