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
from dmq.cluster.metadata import EmbeddedMetadataStore, PartitionState
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
