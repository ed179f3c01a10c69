"""DescribeTransactions (65): the state of transactional ids this broker coordinates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    states = []
    for txn_id in request.transactional_ids:
        if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            error, meta = ErrorCode.transactional_id_authorization_failed, None
        else:
            error, meta = services.transactions.describe(txn_id)
        if meta is None:
            states.append(make(schema.TransactionState, error_code=error, transactional_id=txn_id,
                               transaction_state="", transaction_timeout=timedelta(0),
                               transaction_start_time=_at(-1), producer_id=-1, producer_epoch=-1, topics=()))
            continue
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            if authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic):  # Kafka
                topics.setdefault(topic, []).append(partition)
        states.append(make(
            schema.TransactionState, error_code=error, transactional_id=txn_id,
            transaction_state=meta.state.display, transaction_timeout=timedelta(milliseconds=meta.timeout_ms),
            transaction_start_time=_at(meta.start_ms), producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            topics=tuple(make(schema.TopicData, topic=t, partitions=tuple(ps)) for t, ps in topics.items())))
    return make(schema.DescribeTransactionsResponse, throttle_time=NO_THROTTLE,
                transaction_states=tuple(states))
