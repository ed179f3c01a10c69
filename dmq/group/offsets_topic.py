"""Group coordinator lookup: the leader of the group's ``__consumer_offsets`` partition.

The topic itself (created on first use, with ``offsets.topic.num.partitions``
partitions, compacted) is an ``InternalTopic`` (``dmq.coordinator.internal_topic``).
"""

from __future__ import annotations

import logging

from dmq.cluster.metadata import OFFSETS_TOPIC, BrokerInfo, MetadataStore
from dmq.coordinator.internal_topic import InternalTopic
from dmq.coordinator.runtime import coordinator_broker
from dmq.group.coordinator import GroupCoordinator

log = logging.getLogger("dmq.group")


class Coordinators:
    """Which broker coordinates what.

    The leader of the group's ``__consumer_offsets`` partition (on a single
    broker: this one, for every group); ``set_led_partitions`` loads the groups
    of partitions this broker starts leading and unloads the others.
    """

    def __init__(self, group: GroupCoordinator, offsets: InternalTopic, store: MetadataStore,
                 broker_id: int) -> None:
        self.group = group
        self.offsets = offsets
        self.store = store
        self.broker_id = broker_id

    async def group_coordinator_node(self, group_id: str) -> BrokerInfo | None:
        if not await self.offsets.ensure_exists():
            return None
        return coordinator_broker(self.store, OFFSETS_TOPIC, self.group.partition_for(group_id),
                                  self.group.runtime)

    async def ensure_offsets_topic(self) -> bool:
        """Create ``__consumer_offsets`` if it is missing (a group write without a
        FindCoordinator first); False when it cannot be created now."""
        return await self.offsets.ensure_exists()

    def set_led_partitions(self, led: dict[int, int]) -> None:
        """Follow the leadership of ``__consumer_offsets``: ``{partition: leader epoch}``."""
        self.group.set_led(led)
