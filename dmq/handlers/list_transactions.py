"""ListTransactions (66): the transactional ids this broker coordinates, filtered;
COORDINATOR_LOAD_IN_PROGRESS and none while a ``__transaction_state`` partition led here
is still loading, as Kafka answers; COORDINATOR_NOT_AVAILABLE once the coordinator is closed."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.transaction.metadata import TransactionState

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 0

KNOWN_STATES = {s.display.lower() for s in TransactionState}


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    txns = services.transactions
    if not txns.active or txns.loading():
        error = ErrorCode.coordinator_load_in_progress if txns.active else ErrorCode.coordinator_not_available
        return make(schema.ListTransactionsResponse, throttle_time=NO_THROTTLE, error_code=error,
                    unknown_state_filters=(), transaction_states=())
    filters = list(request.state_filters)
    unknown = tuple(s for s in filters if s.lower() not in KNOWN_STATES)
    found = services.transactions.list([s for s in filters if s not in unknown],
                                       [int(p) for p in request.producer_id_filters])
    if filters and len(unknown) == len(filters):
        found = []  # only unknown states asked for: nothing matches
    return make(schema.ListTransactionsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                unknown_state_filters=unknown, transaction_states=tuple(
                    make(schema.TransactionState, transactional_id=m.transactional_id,
                         producer_id=m.producer_id, transaction_state=m.state.display)
                    for m in sorted(found, key=lambda m: m.transactional_id)
                    # Kafka: only the transactional ids the principal may describe.
                    if authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                 m.transactional_id)))
