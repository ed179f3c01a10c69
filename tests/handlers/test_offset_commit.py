"""OffsetCommit over a real group coordinator on the in-memory writer."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import SimpleNamespace

import pytest
from kio.index import load_entity_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from support.coordinator import MemoryWriter

from dmq.group import records as rec
from dmq.group.coordinator import GroupConfig, GroupCoordinator
from dmq.handlers import offset_commit
from dmq.handlers.context import RequestContext
from dmq.protocol.codec import make, request_class


async def _nothing() -> None:
    return None


@pytest.mark.parametrize(("version", "retention", "expected_after"), [
    (2, timedelta(seconds=5), 5000), (4, timedelta(hours=1), 3_600_000),
    (2, timedelta(milliseconds=-1), None), (5, None, None)])
def test_the_retention_time_of_v2_to_v4_sets_the_offsets_expiry(version: int, retention: timedelta | None,
                                                                expected_after: int | None) -> None:
    """Kafka's expireTimestampMs: a retention time (v2-4; -1 is none, v5+ have none) makes
    the offsets expire that long after the commit (an OffsetCommitValue v1)."""
    async def main() -> None:
        w = MemoryWriter()
        gc = GroupCoordinator(GroupConfig(num_partitions=1), w, lambda t, p: True)
        gc.set_led({0: 0})
        mod = load_entity_module("offset_commit", version, EntityType.request)
        request = make(request_class(8, version), group_id="g", generation_id_or_member_epoch=-1, member_id="",
                       **({} if retention is None else {"retention_time": retention}),
                       topics=(make(mod.OffsetCommitRequestTopic, name="t", partitions=(
                           make(mod.OffsetCommitRequestPartition, partition_index=0, committed_offset=5,
                                committed_metadata=""),)),))
        services = SimpleNamespace(authorizer=None, coordinators=SimpleNamespace(
            group=gc, ensure_offsets_topic=_nothing))
        ctx = RequestContext(8, version, 1, "c", "127.0.0.1",
                             load_entity_module("offset_commit", version, EntityType.response))
        response = await offset_commit.handle(services, ctx, request)  # type: ignore[arg-type]
        assert response.topics[0].partitions[0].error_code == ErrorCode.none
        value = rec.decode_offset_value(w.logs[0][0].value or b"")
        expected = -1 if expected_after is None else value.commit_timestamp + expected_after
        assert value.expire_timestamp == expected
        await gc.close()
    asyncio.run(main())
