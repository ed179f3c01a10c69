"""The controller's leader and ISR decisions (``Controller.decide``), without ZooKeeper.

The safety rules: a new leader comes from the ISR (unless the topic allows an
unclean election), the controller never adds a replica to an ISR, and the
leader epoch moves exactly when the leader changes (or the partition goes
offline), so a deposed leader is fenced.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.cluster.controller import Controller
from dmq.cluster.metadata import EmbeddedMetadataStore, MetadataError, PartitionState
from dmq.config import BrokerConfig


@pytest.fixture
def controller(tmp_path: Path) -> Controller:
    return _controller(tmp_path, unclean=False)


def _controller(path: Path, unclean: bool) -> Controller:
    store = EmbeddedMetadataStore(str(path), 1)
    asyncio.run(store.create_topic("t", 1, 1, {"unclean.leader.election.enable": str(unclean).lower()}))
    c = Controller(store, BrokerConfig())  # type: ignore[arg-type]
    c.live = {1, 2, 3}
    return c


def state(leader: int, epoch: int, isr: list[int], replicas: Any = (1, 2, 3)) -> PartitionState:
    return PartitionState(list(replicas), leader, epoch, isr)


def test_live_leader_keeps_leading_and_dead_followers_leave_the_isr(controller: Controller) -> None:
    controller.live = {1, 2}
    assert controller.decide("t", state(1, 4, [1, 2, 3]), set()) == state(1, 4, [1, 2])


def test_dead_leader_is_replaced_by_the_first_live_isr_member_in_replica_order(
        controller: Controller) -> None:
    controller.live = {2, 3}
    assert controller.decide("t", state(1, 4, [3, 1, 2], replicas=(1, 2, 3)), set()) == \
        state(2, 5, [3, 2])


def test_no_live_isr_member_takes_the_partition_offline_keeping_the_isr(
        controller: Controller) -> None:
    controller.live = {3}  # 3 is a replica but not in the ISR: not eligible
    offline = controller.decide("t", state(1, 4, [1, 2]), set())
    assert offline == state(-1, 5, [1, 2])
    # Already offline: nothing to write again.
    assert controller.decide("t", offline, set()) == offline
    # An ISR member returns and leads.
    controller.live = {2, 3}
    assert controller.decide("t", offline, set()) == state(2, 6, [2])


def test_unclean_election_only_when_the_topic_allows_it(tmp_path: Path) -> None:
    c = _controller(tmp_path, unclean=True)
    c.live = {3}
    assert c.decide("t", state(1, 4, [1, 2]), set()) == state(3, 5, [3])


def test_controlled_shutdown_moves_leadership_unless_it_is_the_last_isr_member(
        controller: Controller) -> None:
    assert controller.decide("t", state(1, 4, [1, 2, 3]), {1}) == state(2, 5, [2, 3])
    assert controller.decide("t", state(1, 4, [1]), {1}) == state(1, 4, [1])


# Reachable states: a leader is in its own ISR, or the partition is offline (-1).
states = st.sets(st.sampled_from([1, 2, 3]), min_size=1).flatmap(lambda isr: st.builds(
    lambda leader, epoch: state(leader, epoch, sorted(isr)),
    st.sampled_from([-1, *sorted(isr)]), st.integers(0, 100)))


@settings(max_examples=300, deadline=None)
@given(before=states, live=st.sets(st.sampled_from([1, 2, 3])),
       excluded=st.sets(st.sampled_from([1, 2, 3])))
def test_decisions_never_widen_the_isr_and_fence_every_leader_change(
        tmp_path_factory: pytest.TempPathFactory, before: PartitionState, live: set[int],
        excluded: set[int]) -> None:
    c = _controller(tmp_path_factory.mktemp("c"), unclean=False)
    c.live = live
    after = c.decide("t", before, excluded & live)
    assert set(after.isr) <= set(before.isr), "the controller never adds to the ISR"
    if after.leader >= 0:
        assert after.leader in before.isr, "a clean leader comes from the ISR"
        assert after.leader in live
    if after.leader != before.leader:
        assert after.leader_epoch == before.leader_epoch + 1
    else:
        assert after.leader_epoch == before.leader_epoch


class _ReassigningStore:
    """What ``Controller._reassign`` reads and writes of one partition moving from [1, 2, 3]
    to [2, 3] (KIP-455's second phase: the target in sync, broker 1 to leave), with ISR
    writes that fail while ``refusing``."""

    broker_id = 1

    def __init__(self) -> None:
        self.raw: dict[str, Any] = {"partitions": {"0": [2, 3, 1]}, "adding_replicas": {},
                                    "removing_replicas": {"0": [1]}}
        self.state = PartitionState([2, 3, 1], 2, 5, [1, 2, 3])
        self.refusing = True

    async def read_assignment(self, topic: str) -> tuple[dict[str, Any], int]:
        import copy
        return copy.deepcopy(self.raw), 0

    async def write_assignment(self, topic: str, raw: dict[str, Any], version: int) -> None:
        self.raw = raw

    async def read_partition_state(self, topic: str, partition: int) -> tuple[PartitionState, int]:
        return self.state, 0

    async def update_partition_state(self, topic: str, partition: int, new: PartitionState, version: int,
                                     base_epoch: int = -1) -> int:
        if self.refusing:
            raise MetadataError("not_controller", "the state changed")
        self.state = new
        return version + 1


def test_a_reassignment_completes_only_once_the_old_replicas_left_the_isr() -> None:
    """The last step writes the ISR without the replicas that leave, then the assignment.
    A refused ISR write used to be ignored: the assignment dropped broker 1 while the ISR
    still named it, and a broker moved back in that window would count as in sync with an
    empty log. Now the step is tried again later (as Kafka retries it)."""
    store = _ReassigningStore()
    c = Controller(store, BrokerConfig())  # type: ignore[arg-type]
    c.live = {1, 2, 3}
    assert asyncio.run(c._reassign("t", 0, [2, 3])) is False
    assert store.raw["partitions"]["0"] == [2, 3, 1] and store.state.isr == [1, 2, 3]
    store.refusing = False
    assert asyncio.run(c._reassign("t", 0, [2, 3])) is True
    assert store.raw["partitions"]["0"] == [2, 3] and store.state.isr == [2, 3]
