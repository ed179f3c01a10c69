"""InitProducerId (22): a producer id for an idempotent producer, or a transactional id's
producer id and next epoch from its transaction coordinator."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import MetadataError
from dmq.handlers.authorize import AclOperation, ResourceType, authorize, authorize_any_topic
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

log = logging.getLogger("dmq.producer")

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    # Kafka: WRITE on the transactional id; an idempotent producer IDEMPOTENT_WRITE on the
    # cluster or WRITE on some topic (KIP-679).
    if not (authorize(services, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
            if request.transactional_id is not None
            else authorize(services, ctx, AclOperation.IDEMPOTENT_WRITE)
            or authorize_any_topic(services, ctx, AclOperation.WRITE)):
        error = (ErrorCode.transactional_id_authorization_failed if request.transactional_id is not None
                 else ErrorCode.cluster_authorization_failed)
        return make(schema.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=error,
                    producer_id=-1, producer_epoch=-1)
    expected_id = int(getattr(request, "producer_id", -1))
    expected_epoch = int(getattr(request, "producer_epoch", -1))
    if (expected_id < 0) != (expected_epoch < 0) or request.transactional_id == "":
        # Kafka: a producer id without an epoch (or the reverse), or an empty transactional
        # id, is INVALID_REQUEST.
        return make(schema.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.invalid_request, producer_id=-1, producer_epoch=-1)
    if request.transactional_id is not None:
        timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
        result = await services.transactions.init_producer_id(
            request.transactional_id, timeout_ms, expected_id, expected_epoch)
        error = result.error
        if error == ErrorCode.producer_fenced and ctx.api_version < 4:
            error = ErrorCode.invalid_producer_epoch  # KIP-588: older clients know only this
        return make(schema.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=error,
                    producer_id=result.producer_id, producer_epoch=result.producer_epoch)
    try:
        producer_id = await services.producer_ids.generate()
    except MetadataError as e:  # the block could not be reserved in time
        return make(schema.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode[e.error], producer_id=-1, producer_epoch=-1)
    if expected_id >= 0:  # v3+: an idempotent producer bumping (KIP-360)
        # As Kafka does for a producer without a transactional id, the bump gets a fresh id:
        # what the client re-sends under it cannot be deduplicated against the old id.
        log.info("producer %d (epoch %d) asked to bump its epoch; issued producer id %d",
                 expected_id, expected_epoch, producer_id)
    return make(schema.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                error_code=ErrorCode.none, producer_id=producer_id, producer_epoch=0)
