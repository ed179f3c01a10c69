"""DescribeGroups over a real group coordinator on the in-memory writer."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kio.index import load_entity_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from support.coordinator import MemoryWriter

from dmq.group.coordinator import GroupConfig, GroupCoordinator
from dmq.handlers import describe_groups
from dmq.handlers.context import RequestContext
from dmq.protocol.codec import make, request_class


def test_protocol_and_member_metadata_only_of_a_stable_group() -> None:
    """Kafka's describeGroups: outside Stable (here CompletingRebalance, the leader not yet
    synced) the protocol name and the members' metadata are blank."""
    async def main() -> None:
        gc = GroupCoordinator(GroupConfig(num_partitions=1, initial_rebalance_delay_ms=0), MemoryWriter(),
                              lambda t, p: True)
        gc.set_led({0: 0})
        services = SimpleNamespace(authorizer=None, coordinators=SimpleNamespace(group=gc))
        ctx = RequestContext(15, 5, 1, "c", "127.0.0.1", load_entity_module("describe_groups", 5, EntityType.response))

        async def describe() -> Any:
            response = await describe_groups.handle(services, ctx, make(  # type: ignore[arg-type]
                request_class(15, 5), groups=("g",), include_authorized_operations=False))
            return response.groups[0]

        joined = await gc.join_group("g", "", None, "c", "/h", 10_000, 10_000, "consumer",
                                     [("range", b"meta")], False)
        assert joined.error == ErrorCode.none
        rebalancing = await describe()
        assert rebalancing.group_state == "CompletingRebalance" and rebalancing.protocol_type == "consumer"
        assert rebalancing.protocol_data == "" and rebalancing.members[0].member_metadata == b""
        synced = await gc.sync_group("g", joined.generation, joined.member_id, None, "consumer", "range",
                                     {joined.member_id: b"asg"})
        assert synced.error == ErrorCode.none
        stable = await describe()
        assert stable.group_state == "Stable" and stable.protocol_data == "range"
        assert stable.members[0].member_metadata == b"meta" and stable.members[0].member_assignment == b"asg"
        await gc.close()
    asyncio.run(main())
