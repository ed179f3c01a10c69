"""CheckTransactions (dmq's extension 10000): half-message check-back, docs/half-messages.md.

A checker of a producer group polls the coordinator of the group's
half-message transactions with its answers to earlier checks and gets the
transactions now due a check; ``describe_only`` lists them for the CLI.
Not advertised in ApiVersions: only ``dmq.client`` sends it.

v1: each answer carries the start time of the transaction it answers (the
``start_time_ms`` it was handed), so an answer that comes after the producer
ended that transaction and began another (same producer id and epoch) is not
applied to the new one. A v0 answer lacks it and is applied only when no other
transaction's check can be answered (``TransactionShard.poll_checks``).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.protocol.extensions import CHECK_TRANSACTIONS_KEY
from dmq.transaction.shard import CheckAnswer, HalfTransaction

API_KEY = CHECK_TRANSACTIONS_KEY
MIN_VERSION = 0
MAX_VERSION = 1
ADVERTISED = False


def _entry(schema: Any, half: HalfTransaction) -> Any:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(half.meta.partitions):
        topics.setdefault(topic, []).append(partition)
    meta = half.meta
    return make(schema.CheckedTransaction, transactional_id=meta.transactional_id,
                producer_id=meta.producer_id, producer_epoch=meta.producer_epoch, state=meta.state.display,
                start_time_ms=meta.start_ms, checks=half.checks, last_answer=half.last_answer,
                last_check_ms=half.last_check_ms,
                topics=tuple(make(schema.CheckedTopic, name=t, partitions=tuple(ps)) for t, ps in topics.items()))


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    group = request.producer_group
    found: list[HalfTransaction]
    if not group:
        error, found = ErrorCode.invalid_request, []
    elif not authorize(services, ctx, AclOperation.DESCRIBE if request.describe_only else AclOperation.WRITE,
                       ResourceType.TRANSACTIONAL_ID, f"__dmq_half/{group}/"):
        # The group's half transactions have the ids __dmq_half/<group>/<instance>: as for
        # EndTxn (DescribeTransactions when only listing), a prefixed ACL on
        # "__dmq_half/<group>/" covers them.
        error, found = ErrorCode.transactional_id_authorization_failed, []
    elif request.describe_only:
        error, found = services.transactions.half_transactions(group)
    else:
        poll = await services.transactions.poll_checks(group, [
            CheckAnswer(a.transactional_id, int(a.producer_id), int(a.producer_epoch), int(a.resolution),
                        int(a.start_time_ms) if ctx.api_version >= 1 else None)
            for a in request.answers])
        error, found = poll.error, poll.transactions
    return make(schema.CheckTransactionsResponse, throttle_time=NO_THROTTLE, error_code=error,
                transactions=tuple(_entry(schema, h) for h in found))
