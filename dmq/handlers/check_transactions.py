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

Authorisation: the request needs Write (Describe when only listing) on the transactional id
``__dmq_half/<group>/``, which a prefixed ACL on that name covers; then, as Kafka checks
each real id (EndTxn Write, DescribeTransactions Describe), a listing shows only the ids the
caller may Describe, and a poll hands out and answers only the ids it may Write (checked by
the coordinator, where a check is counted and an answer applied). A transaction's topics the
caller may not Describe are left out of it, as DescribeTransactions does.
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


def _entry(services: BrokerServices, ctx: RequestContext, half: HalfTransaction) -> Any:
    schema = ctx.schema
    topics: dict[str, list[int]] = {}
    shown: dict[str, bool] = {}
    for topic, partition in sorted(half.meta.partitions):
        if topic not in shown:
            shown[topic] = authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
        if shown[topic]:
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
        found = [h for h in found if authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                               h.meta.transactional_id)]
    else:
        # A prefixed ACL on the group may be narrowed by ACLs on single ids: each id is
        # checked where its check is handed out and its answer applied (a check handed out
        # is counted, an answer ends the transaction), not only in this response.
        may_write = None if services.authorizer is None else (
            lambda txn_id: authorize(services, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id))
        poll = await services.transactions.poll_checks(group, [
            CheckAnswer(a.transactional_id, int(a.producer_id), int(a.producer_epoch), int(a.resolution),
                        int(a.start_time_ms) if ctx.api_version >= 1 else None)
            for a in request.answers], may_write)
        error, found = poll.error, poll.transactions
    return make(schema.CheckTransactionsResponse, throttle_time=NO_THROTTLE, error_code=error,
                transactions=tuple(_entry(services, ctx, h) for h in found))
