"""ShareGroupMembership: a share-partition leader asks the group's coordinator whether a
member may have a share-partition's state created, here or on the coordinating broker.
The remote coordinator is a GroupCoordinator behind the real ShareGroupDescribe handler,
reached through a stand-in channel that encodes and decodes both ways (real brokers:
tests/integration/test_share_groups.py)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode
from support.coordinator import MemoryWriter

from dmq.client.channels import BrokerUnreachable
from dmq.client.wire import decode_response, encode_request
from dmq.cluster.metadata import BrokerInfo
from dmq.group.coordinator import GroupConfig, GroupCoordinator, ShareConfig, ShareTopic
from dmq.group.share_group import DescribedShareGroup
from dmq.handlers import HANDLERS
from dmq.handlers.context import RequestContext
from dmq.protocol.codec import decode_request, encode_response, response_module
from dmq.server.share_membership import ShareGroupMembership

TOPIC = uuid.UUID(int=7)
OTHER = BrokerInfo(2, "h2", 9093)


def coordinator() -> GroupCoordinator:
    c = GroupCoordinator(GroupConfig(num_partitions=1, share=ShareConfig()), MemoryWriter(),
                         lambda t, p: t == "t" and p < 2, topics={"t": ShareTopic(TOPIC, 2)}.get)
    c.set_led({0: 1})
    return c


class Channel:
    """BrokerChannels to broker 2, whose GroupCoordinator answers ShareGroupDescribe
    through its handler, over the wire both ways."""

    def __init__(self, remote: GroupCoordinator) -> None:
        self.services = SimpleNamespace(coordinators=SimpleNamespace(group=remote), authorizer=None)
        self.requests = 0
        self.unreachable = False

    async def request(self, broker_id: int, request: Any, timeout_s: float) -> Any:
        assert broker_id == OTHER.broker_id
        self.requests += 1
        if self.unreachable:
            raise BrokerUnreachable("refused")
        frame = encode_request(request, 9, "dmq-share-1")[4:]
        _, decoded = decode_request(frame, 77, 1)
        ctx = RequestContext(77, 1, 9, "dmq-share-1", "127.0.0.1", response_module(77, 1))
        response = await HANDLERS[77].handle(self.services, ctx, decoded)
        encoded = encode_response(9, 77, response)
        assert isinstance(encoded, bytes)
        return decode_response(type(request), 9, encoded[4:])


def test_the_local_or_the_remote_coordinator_vouches_for_its_members_partitions() -> None:
    """The leader created a state for any group id a ShareFetch named. Now it asks the
    coordinator of the group: this broker's when it coordinates the group, else the
    coordinating broker's with ShareGroupDescribe; only a member of a share group gets
    the state of a partition assigned in it created."""
    async def scenario() -> None:
        here, there = coordinator(), coordinator()
        await here.share_group_heartbeat("local", "m", 0, None, ["t"], "c", "h")
        await there.share_group_heartbeat("remote", "m", 0, None, ["t"], "c", "h")
        channel = Channel(there)

        def describe_here(group_id: str) -> DescribedShareGroup:
            if group_id == "local":
                return here.share_group_describe([group_id])[0]
            return DescribedShareGroup(group_id, ErrorCode.not_coordinator)

        async def node(group_id: str) -> BrokerInfo | None:
            return OTHER

        may = ShareGroupMembership(describe_here, node, 1, channel)  # type: ignore[arg-type]
        assert await may("local", "m", (TOPIC, 1)) == ErrorCode.none
        assert channel.requests == 0
        assert await may("local", "x", (TOPIC, 1)) == ErrorCode.unknown_member_id
        assert await may("remote", "m", (TOPIC, 0)) == ErrorCode.none
        assert await may("remote", "x", (TOPIC, 0)) == ErrorCode.unknown_member_id
        assert await may("remote", "m", (uuid.UUID(int=8), 0)) == ErrorCode.invalid_request
        assert await may("made-up", "m", (TOPIC, 0)) == ErrorCode.group_id_not_found
        assert channel.requests == 4
        channel.unreachable = True
        assert await may("remote", "m", (TOPIC, 0)) == ErrorCode.coordinator_not_available

        async def none(group_id: str) -> BrokerInfo | None:
            return None

        leaderless = ShareGroupMembership(describe_here, none, 1, channel)  # type: ignore[arg-type]
        assert await leaderless("remote", "m", (TOPIC, 0)) == ErrorCode.coordinator_not_available
        await here.close()
        await there.close()

    asyncio.run(scenario())
