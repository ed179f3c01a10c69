"""EndTxn (26): commit or abort a producer's transaction (answered once prepared)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    if not authorize(services, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return make(ctx.schema.EndTxnResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.transactional_id_authorization_failed)
    if not request.transactional_id:  # as Kafka's handleEndTransaction
        return make(ctx.schema.EndTxnResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request)
    error = await services.transactions.end_txn(request.transactional_id, request.producer_id,
                                                request.producer_epoch, bool(request.committed))
    if error == ErrorCode.producer_fenced and ctx.api_version < 2:
        error = ErrorCode.invalid_producer_epoch  # KIP-588
    return make(ctx.schema.EndTxnResponse, throttle_time=NO_THROTTLE, error_code=error)
