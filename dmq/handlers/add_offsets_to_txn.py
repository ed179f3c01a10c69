"""AddOffsetsToTxn (25): the group's ``__consumer_offsets`` partition joins the transaction."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import OFFSETS_TOPIC
from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    # Kafka: WRITE on the transactional id, READ on the group.
    if not authorize(services, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed
    elif not authorize(services, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed
    elif not request.group_id:
        error = ErrorCode.invalid_group_id
    elif not request.transactional_id:
        error = ErrorCode.invalid_request  # as Kafka's handleAddPartitionsToTransaction
    else:
        await services.coordinators.ensure_offsets_topic()  # the transaction writes offsets there
        partition = services.coordinators.group.partition_for(request.group_id)
        error = await services.transactions.add_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, [(OFFSETS_TOPIC, partition)])
        if error == ErrorCode.producer_fenced and ctx.api_version < 2:
            error = ErrorCode.invalid_producer_epoch  # KIP-588
    return make(ctx.schema.AddOffsetsToTxnResponse, throttle_time=NO_THROTTLE, error_code=error)
