"""ShareGroupMembership: a share-partition leader asks the group's coordinator before it
creates a share-partition's durable state (``SharePartitionManager.may_initialize``).

The question: may member ``m`` of group ``g`` have the state of topic-partition ``p``
initialized? The answer (``dmq.group.share_group.state_initialization_error``) comes
from the group as its coordinator describes it: this broker's GroupCoordinator when it
coordinates the group, else the coordinating broker's, asked with ShareGroupDescribe
(77, v1) over the broker's inter-broker channels (the broker's principal needs DESCRIBE
on the group, as for the other inter-broker share requests). A coordinator that has no
leader, is loading or does not answer is COORDINATOR_NOT_AVAILABLE: nothing is created
and the client retries. Asked only when a state is read back uninitialized: for a
group that uses it, once per share-partition, not per fetch. Event-loop thread only.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.client.channels import BrokerChannels, BrokerUnreachable
from dmq.cluster.metadata import BrokerInfo
from dmq.group.share_group import (
    DescribedShareGroup,
    DescribedShareMember,
    state_initialization_error,
)
from dmq.protocol.codec import make, request_class

DESCRIBE_API_KEY = 77
DESCRIBE_VERSION = 1


def described_from_wire(group: Any) -> DescribedShareGroup:
    """A ShareGroupDescribe answer's DescribedGroup as the coordinator's own view (only
    what ``state_initialization_error`` reads: the error, members and assignments)."""
    error = ErrorCode(group.error_code)
    if error is not ErrorCode.none:
        return DescribedShareGroup(group.group_id, error, group.error_message)
    members = tuple(
        DescribedShareMember(m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                             tuple(m.subscribed_topic_names), tuple(
                                 (tp.topic_id, tp.topic_name, tuple(tp.partitions))
                                 for tp in m.assignment.topic_partitions))
        for m in group.members)
    return DescribedShareGroup(group.group_id, error, None, group.group_state, group.group_epoch,
                               group.assignment_epoch, group.assignor_name, members)


class ShareGroupMembership:
    """Implements ``dmq.share.manager.InitializeCheck``. ``describe_here(group_id)`` is
    this broker's GroupCoordinator's describe (NOT_COORDINATOR when another broker
    coordinates the group), ``coordinator_node(group_id)`` the broker FindCoordinator
    names (None: none now). Holds no state of its own (each call asks afresh: the group
    changes)."""

    def __init__(self, describe_here: Callable[[str], DescribedShareGroup],
                 coordinator_node: Callable[[str], Awaitable[BrokerInfo | None]], broker_id: int,
                 channels: BrokerChannels, request_timeout_s: float = 10.0) -> None:
        self.describe_here = describe_here
        self.coordinator_node = coordinator_node
        self.broker_id = broker_id
        self.channels = channels
        self.request_timeout_s = request_timeout_s

    async def __call__(self, group_id: str, member_id: str, tp: tuple[uuid.UUID, int]) -> ErrorCode:
        return state_initialization_error(await self.describe(group_id), member_id, *tp)

    async def describe(self, group_id: str) -> DescribedShareGroup:
        """The group as its coordinator describes it (an error for a coordinator that
        cannot answer now: COORDINATOR_NOT_AVAILABLE)."""
        local = self.describe_here(group_id)
        if local.error is not ErrorCode.not_coordinator:
            return local
        node = await self.coordinator_node(group_id)
        if node is None or node.broker_id == self.broker_id:
            return DescribedShareGroup(group_id, ErrorCode.coordinator_not_available)
        request = make(request_class(DESCRIBE_API_KEY, DESCRIBE_VERSION), group_ids=(group_id,),
                       include_authorized_operations=False)
        try:
            response = await self.channels.request(node.broker_id, request, self.request_timeout_s)
        except BrokerUnreachable:
            return DescribedShareGroup(group_id, ErrorCode.coordinator_not_available)
        found = [g for g in response.groups if g.group_id == group_id]
        if len(found) != 1:
            return DescribedShareGroup(group_id, ErrorCode.coordinator_not_available)
        return described_from_wire(found[0])
