"""InitializeShareGroupState (83): create or reset share-partition states (inter-broker;
answered by the share coordinator leading each key's ``__share_group_state`` partition,
NOT_COORDINATOR elsewhere). Not advertised in ApiVersions (broker-to-broker only)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.share.persister import SharePartitionKey

API_KEY = 83
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
                error = ErrorCode.cluster_authorization_failed
            elif topic.topic_id is None:
                error = ErrorCode.invalid_request
            elif coordinator is None:
                error = ErrorCode.coordinator_not_available
            else:
                key = SharePartitionKey(request.group_id, topic.topic_id, p.partition)
                error = await coordinator.initialize_state(key, p.state_epoch, p.start_offset)
            partitions.append(make(schema.PartitionResult, partition=p.partition, error_code=error,
                                   error_message=None))
        results.append(make(schema.InitializeStateResult, topic_id=topic.topic_id,
                            partitions=tuple(partitions)))
    return make(schema.InitializeShareGroupStateResponse, results=tuple(results))
