"""TxnOffsetCommit's answers per version: clients from 0.11 to 2.0 (v0-1) do not know
COORDINATOR_LOAD_IN_PROGRESS on this API and may crash on it; Kafka answers them
COORDINATOR_NOT_AVAILABLE, which they retry. The group coordinator here is a stand-in
that is still loading its partition."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_entity_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from dmq.handlers import txn_offset_commit
from dmq.handlers.context import RequestContext
from dmq.protocol.codec import make, request_class


class LoadingGroupCoordinator:
    async def txn_offset_commit(self, *args: Any) -> list[ErrorCode]:
        entries = args[-1]
        return [ErrorCode.coordinator_load_in_progress for _ in entries]


async def _nothing() -> None:
    return None


def answer(version: int) -> list[ErrorCode]:
    mod = load_entity_module("txn_offset_commit", version, EntityType.request)
    request = make(request_class(28, version), transactional_id="tx", group_id="g", producer_id=1,
                   producer_epoch=0, topics=(make(mod.TxnOffsetCommitRequestTopic, name="t", partitions=(
                       make(mod.TxnOffsetCommitRequestPartition, partition_index=0, committed_offset=5,
                            committed_metadata=""),)),))
    services = SimpleNamespace(authorizer=None, coordinators=SimpleNamespace(
        ensure_offsets_topic=_nothing, group=LoadingGroupCoordinator()))
    ctx = RequestContext(28, version, 1, "c", "127.0.0.1",
                         load_entity_module("txn_offset_commit", version, EntityType.response))
    response = asyncio.run(txn_offset_commit.handle(services, ctx, request))  # type: ignore[arg-type]
    return [p.error_code for t in response.topics for p in t.partitions]


@pytest.mark.parametrize(("version", "expected"), [
    (0, ErrorCode.coordinator_not_available), (1, ErrorCode.coordinator_not_available),
    (2, ErrorCode.coordinator_load_in_progress), (3, ErrorCode.coordinator_load_in_progress)])
def test_old_clients_are_told_the_coordinator_is_not_available(version: int, expected: ErrorCode) -> None:
    assert answer(version) == [expected]
