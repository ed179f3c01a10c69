"""CheckTransactions (half-message check-back) under ACLs: a prefixed ACL on the group's
``__dmq_half/<group>/`` lets a checker poll, but each transaction's real id is checked as
Kafka checks it (EndTxn: Write, DescribeTransactions: Describe), and a transaction's topics
the checker may not Describe are not shown. The coordinator is a real TransactionShard, so
a check handed out or an answer applied is seen in its state."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode
from support.acls import acl, store_with
from support.coordinator import ShardDriver

from dmq.handlers import check_transactions
from dmq.handlers.context import RequestContext
from dmq.protocol import extensions as ext
from dmq.protocol.codec import make, response_module
from dmq.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from dmq.security.authorizer import AclAuthorizer
from dmq.transaction import records as rec
from dmq.transaction.metadata import TransactionState
from dmq.transaction.shard import (
    CheckAnswer,
    CheckPoll,
    HalfTransaction,
    InitResult,
    TransactionConfig,
    TransactionShard,
)

T = ResourceType.TRANSACTIONAL_ID
VIP = rec.half_transactional_id("billing", "vip")
OTHER = rec.half_transactional_id("billing", "p1")


class Coordinator:
    """The transaction coordinator's half-message calls over one shard."""

    def __init__(self, driver: ShardDriver) -> None:
        self.driver = driver
        self.polled: list[CheckAnswer] = []

    async def poll_checks(self, group: str, answers: list[CheckAnswer], may_write: Any = None) -> CheckPoll:
        d = self.driver
        self.polled += [a for a in answers if may_write is None or may_write(a.transactional_id)]
        limited = {} if may_write is None else {"may_write": may_write}
        result = d.apply(d.shard.poll_checks(group, answers, d.now, **limited))
        assert isinstance(result, CheckPoll)
        return result

    def half_transactions(self, group: str) -> tuple[ErrorCode, list[HalfTransaction]]:
        return ErrorCode.none, self.driver.shard.half_transactions(group)


def open_half(d: ShardDriver, txn: str, producer_id: int, topic: str) -> None:
    result = d.run(d.shard.init_producer_id, txn, 60_000, -1, -1, producer_id)
    assert isinstance(result, InitResult) and result.error == ErrorCode.none
    assert d.run(d.shard.add_partitions, txn, producer_id, 0, [(topic, 0), ("orders", 1)]) == ErrorCode.none


def request(services: Any, principal: str, describe_only: bool, *answers: CheckAnswer) -> Any:
    ctx = RequestContext(ext.CHECK_TRANSACTIONS_KEY, 1, 1, "c", "10.0.0.9",
                         response_module(ext.CHECK_TRANSACTIONS_KEY, 1), principal=principal)
    req = make(ext.CheckTransactionsRequestV1, producer_group="billing", describe_only=describe_only, answers=tuple(
        make(ext.CheckAnswerV1, transactional_id=a.transactional_id, producer_id=a.producer_id,
             producer_epoch=a.producer_epoch, resolution=a.resolution, start_time_ms=a.start_ms) for a in answers))
    response = asyncio.run(check_transactions.handle(services, ctx, req))
    assert response.error_code == ErrorCode.none
    return {t.transactional_id: {topic.name for topic in t.topics} for t in response.transactions}


def test_each_transactional_id_and_topic_is_checked(tmp_path: Path) -> None:
    authorizer = AclAuthorizer(store_with(tmp_path, [
        acl(T, "__dmq_half/billing/", "User:checker", AclOperation.ALL, AclPermissionType.ALLOW,
            PatternType.PREFIXED),
        acl(T, "__dmq_half/billing/vip", "User:checker", AclOperation.ALL, AclPermissionType.DENY),
        acl(ResourceType.TOPIC, "orders", "User:checker", AclOperation.ALL, AclPermissionType.ALLOW),
        acl(T, "__dmq_half/billing/", "User:admin", AclOperation.ALL, AclPermissionType.ALLOW, PatternType.PREFIXED),
    ]))
    d = ShardDriver(TransactionShard(0, 5, TransactionConfig(check_delay_ms=6000, check_interval_ms=1000)))
    d.apply(d.shard.on_loaded(d.now))
    open_half(d, VIP, 1000, "payroll")
    open_half(d, OTHER, 2000, "payroll")
    coordinator = Coordinator(d)
    services = SimpleNamespace(authorizer=authorizer, transactions=coordinator)

    assert request(services, "User:checker", True) == {OTHER: {"orders"}}
    d.now += 6000
    # The vip transaction is due, but never handed to the checker: no check of it counted.
    assert request(services, "User:checker", False) == {OTHER: {"orders"}}
    assert d.shard.check_state(VIP).checks == 0  # type: ignore[union-attr]
    # A checker allowed on it is handed it (and sees every topic it may Describe)...
    assert request(services, "User:admin", False) == {VIP: set()}
    vip = d.shard.transactions[VIP]
    # ...but the checker's answer for it is dropped, not applied by the coordinator.
    request(services, "User:checker", False, CheckAnswer(VIP, 1000, 0, int(ext.Resolution.ROLLBACK), vip.start_ms),
            CheckAnswer(OTHER, 2000, 0, int(ext.Resolution.UNKNOWN), d.shard.transactions[OTHER].start_ms))
    assert [a.transactional_id for a in coordinator.polled] == [OTHER]
    assert d.shard.transactions[VIP].state == TransactionState.ONGOING
    assert d.shard.check_state(OTHER).last_answer == ext.Resolution.UNKNOWN  # type: ignore[union-attr]


def test_a_caller_allowed_on_the_whole_group_sees_and_answers_every_transaction(tmp_path: Path) -> None:
    authorizer = AclAuthorizer(store_with(tmp_path, [
        acl(T, "__dmq_half/billing/", "User:checker", AclOperation.WRITE, AclPermissionType.ALLOW,
            PatternType.PREFIXED),
        acl(ResourceType.TOPIC, "*", "User:checker", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
    ]))
    d = ShardDriver(TransactionShard(0, 5, TransactionConfig(check_delay_ms=6000, check_interval_ms=1000)))
    d.apply(d.shard.on_loaded(d.now))
    open_half(d, VIP, 1000, "payroll")
    services = SimpleNamespace(authorizer=authorizer, transactions=Coordinator(d))
    assert request(services, "User:checker", True) == {VIP: {"payroll", "orders"}}
    d.now += 6000
    assert request(services, "User:checker", False) == {VIP: {"payroll", "orders"}}
    request(services, "User:checker", False,
            CheckAnswer(VIP, 1000, 0, int(ext.Resolution.ROLLBACK), d.shard.transactions[VIP].start_ms))
    assert d.shard.transactions[VIP].state == TransactionState.PREPARE_ABORT
