"""ACLs in ZooKeeper in Kafka's layout, seen by every broker's store (Debian's ZooKeeper)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.zookeeper import ZooKeeperProcess, available, wait_for

pytestmark = pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")

from dmq.cluster.acls import AclResource, StoredAce  # noqa: E402
from dmq.cluster.zookeeper import ZooKeeperMetadataStore  # noqa: E402

READ = StoredAce("User:alice", "Allow", "Read", "*")
WRITE = StoredAce("User:bob", "Deny", "Write", "10.0.0.1")


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperProcess]:
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    yield zk
    zk.stop()


def test_acls_in_kafka_layout_reach_every_broker(zookeeper: ZooKeeperProcess) -> None:
    literal = AclResource("Topic", "LITERAL", "orders")
    prefixed = AclResource("TransactionalId", "PREFIXED", "app-")

    async def body() -> None:
        connect = zookeeper.connect + "/dmq"
        a = await ZooKeeperMetadataStore.connect(connect, 1, session_timeout_ms=3000)
        b = await ZooKeeperMetadataStore.connect(connect, 2, session_timeout_ms=3000)
        try:
            version = b.acl_version
            assert await a.update_acls(literal, lambda now: now | {READ, WRITE}) == {READ, WRITE}
            assert await a.update_acls(prefixed, lambda now: now | {READ}) == {READ}
            # Kafka's znodes, JSON and change notifications.
            data, _ = await a.client.get("/kafka-acl/Topic/orders")
            assert json.loads(data) == {"version": 1, "acls": [
                {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"},
                {"principal": "User:bob", "permissionType": "Deny", "operation": "Write", "host": "10.0.0.1"}]}
            assert await a.client.exists("/kafka-acl-extended/prefixed/TransactionalId/app-") is not None
            changes = await a.client.children("/kafka-acl-changes")
            assert [c.startswith("acl_changes_") for c in changes] == [True]
            note, _ = await a.client.get(f"/kafka-acl-changes/{changes[0]}")
            assert note == b"TOPIC:orders"
            extended = await a.client.children("/kafka-acl-extended-changes")
            note, _ = await a.client.get(f"/kafka-acl-extended-changes/{extended[0]}")
            assert json.loads(note) == {"version": 1, "resourceType": "TRANSACTIONAL_ID", "name": "app-",
                                        "patternType": "PREFIXED"}
            # The other broker's cache follows the notifications, and its version moves.
            await wait_for(lambda: b.acls() == {literal: {READ, WRITE}, prefixed: {READ}})
            assert b.acl_version > version
            # Concurrent changes of one resource are both kept (compare-and-set).
            await asyncio.gather(a.update_acls(literal, lambda now: now - {WRITE}),
                                 b.update_acls(literal, lambda now: now | {StoredAce("User:carol", "Allow",
                                                                                     "Describe", "*")}))
            expected = {READ, StoredAce("User:carol", "Allow", "Describe", "*")}
            await wait_for(lambda: a.acls().get(literal) == expected and b.acls().get(literal) == expected)
            # Removing the last entry removes the znode; a broker starting later reads the rest.
            await b.update_acls(prefixed, lambda now: frozenset())
            assert await a.client.exists("/kafka-acl-extended/prefixed/TransactionalId/app-") is None
            await wait_for(lambda: prefixed not in a.acls())
            c = await ZooKeeperMetadataStore.connect(connect, 3, session_timeout_ms=3000)
            try:
                assert c.acls() == {literal: expected}
            finally:
                await c.stop()
        finally:
            await a.stop()
            await b.stop()
    asyncio.run(body())
