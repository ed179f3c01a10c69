"""OffsetFetch with require_stable (KIP-447) against a group coordinator whose
TxnOffsetCommit is appended but not yet replicated (an in-memory writer holding it)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_entity_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from support.coordinator import MemoryWriter

from dmq.group.coordinator import GroupConfig, GroupCoordinator
from dmq.handlers import offset_fetch
from dmq.handlers.context import RequestContext
from dmq.protocol.codec import make, request_class


def request(version: int, require_stable: bool) -> Any:
    mod = load_entity_module("offset_fetch", version, EntityType.request)
    if version >= 8:
        return make(request_class(9, version), require_stable=require_stable, groups=(make(
            mod.OffsetFetchRequestGroup, group_id="g", topics=(
                make(mod.OffsetFetchRequestTopics, name="t", partition_indexes=(0,)),)),))
    return make(request_class(9, version), group_id="g", require_stable=require_stable, topics=(
        make(mod.OffsetFetchRequestTopic, name="t", partition_indexes=(0,)),))


def partitions(response: Any, version: int) -> list[tuple[int, ErrorCode]]:
    topics = response.groups[0].topics if version >= 8 else response.topics
    return [(p.committed_offset, p.error_code) for t in topics for p in t.partitions]


@pytest.mark.parametrize("version", [7, 8])
def test_require_stable_counts_a_txn_offset_commit_not_yet_replicated(version: int) -> None:
    async def main() -> None:
        w = MemoryWriter()
        gc = GroupCoordinator(GroupConfig(num_partitions=1), w, lambda t, p: True)
        gc.set_led({0: 0})
        assert await gc.commit_offsets("g", -1, "", None, [("t", 0, 10, -1, None)]) == [ErrorCode.none]
        services = SimpleNamespace(authorizer=None, coordinators=SimpleNamespace(group=gc))
        ctx = RequestContext(9, version, 1, "c", "127.0.0.1",
                             load_entity_module("offset_fetch", version, EntityType.response))
        w.hold()
        txn = asyncio.ensure_future(gc.txn_offset_commit("tx", "g", 7, 0, -1, "", None,
                                                         [("t", 0, 20, -1, None)]))
        await asyncio.sleep(0.01)
        plain = await offset_fetch.handle(services, ctx, request(version, False))  # type: ignore[arg-type]
        assert partitions(plain, version) == [(10, ErrorCode.none)]
        stable = asyncio.ensure_future(
            offset_fetch.handle(services, ctx, request(version, True)))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        w.release()
        assert partitions(await stable, version) == [(-1, ErrorCode.unstable_offset_commit)]
        await txn
        await gc.close()
    asyncio.run(main())
