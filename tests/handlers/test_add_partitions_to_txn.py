"""AddPartitionsToTxn from a client (v0-3) under ACLs, with a real AclAuthorizer: when a
topic is refused nothing is added, and each other partition says why (Kafka's
handleAddPartitionsToTxnRequest)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode
from support.acls import acl, store_with

from dmq.handlers import add_partitions_to_txn
from dmq.handlers.context import RequestContext
from dmq.protocol.codec import make, request_class, request_module, response_module
from dmq.security.acl import AclOperation, AclPermissionType, ResourceType
from dmq.security.authorizer import AclAuthorizer


class Transactions:
    async def add_partitions(self, *args: Any) -> ErrorCode:
        raise AssertionError("nothing is added when a partition is refused")


def test_a_refused_topic_leaves_unknown_partitions_unknown(tmp_path: Path) -> None:
    authorizer = AclAuthorizer(store_with(tmp_path, [
        acl(ResourceType.TRANSACTIONAL_ID, "tx", "User:app", AclOperation.WRITE, AclPermissionType.ALLOW),
        acl(ResourceType.TOPIC, "orders", "User:app", AclOperation.WRITE, AclPermissionType.ALLOW),
        acl(ResourceType.TOPIC, "ghost", "User:app", AclOperation.WRITE, AclPermissionType.ALLOW),
    ]))
    topics = {"orders": SimpleNamespace(partitions={0: None}), "payroll": SimpleNamespace(partitions={0: None})}
    services = SimpleNamespace(authorizer=authorizer, metadata=SimpleNamespace(topic=topics.get),
                               transactions=Transactions())
    mod = request_module(24, 3)
    request = make(request_class(24, 3), v3_and_below_transactional_id="tx", v3_and_below_producer_id=1,
                   v3_and_below_producer_epoch=0, v3_and_below_topics=tuple(
                       make(mod.AddPartitionsToTxnTopic, name=name, partitions=tuple(ps))
                       for name, ps in (("orders", (0, 7)), ("ghost", (0,)), ("payroll", (0,)))))
    ctx = RequestContext(24, 3, 1, "c", "1.2.3.4", response_module(24, 3), principal="User:app")
    response = asyncio.run(add_partitions_to_txn.handle(services, ctx, request))  # type: ignore[arg-type]
    errors = {(t.name, p.partition_index): p.partition_error_code
              for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}
    assert errors == {
        ("orders", 0): ErrorCode.operation_not_attempted,
        ("orders", 7): ErrorCode.unknown_topic_or_partition,
        ("ghost", 0): ErrorCode.unknown_topic_or_partition,
        ("payroll", 0): ErrorCode.topic_authorization_failed,
    }
