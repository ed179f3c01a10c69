"""The controller's partition state machine and leader elections, as pure functions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.cluster.metadata import PartitionState
from dmq.cluster.partition_state_machine import (
    PARTITION_TRANSITIONS,
    ClusterFacts,
    Election,
    IllegalStateTransition,
    PartitionStatus,
    elect_leader,
    partition_status,
    reconcile_partition,
    transition_to,
)


def s(leader: int, epoch: int, isr: list[int], replicas: tuple[int, ...] = (1, 2, 3)) -> PartitionState:
    return PartitionState(list(replicas), leader, epoch, isr)


def facts(live: set[int], shutting_down: frozenset[int] | set[int] = frozenset(),
          unclean: bool = False) -> ClusterFacts:
    return ClusterFacts(frozenset(live), frozenset(shutting_down), unclean)


def test_every_status_has_a_transition_table_entry() -> None:
    assert set(PARTITION_TRANSITIONS) == set(PartitionStatus)
    for sources in PARTITION_TRANSITIONS.values():
        assert sources <= set(PartitionStatus)


def test_an_illegal_transition_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PARTITION_TRANSITIONS, PartitionStatus.OFFLINE,
                        frozenset({PartitionStatus.OFFLINE}))
    with pytest.raises(IllegalStateTransition):
        transition_to(s(1, 0, [1, 2]), PartitionStatus.OFFLINE, facts({1, 2}))


def test_elections_pick_as_kafka_does() -> None:
    state = s(1, 3, [3, 2, 1])
    assert elect_leader(Election.OFFLINE, state, facts({2, 3})) == 2  # replica order, not ISR order
    assert elect_leader(Election.CONTROLLED_SHUTDOWN, state, facts({1, 2, 3}, {1, 2})) == 3
    assert elect_leader(Election.PREFERRED, s(2, 3, [1, 2]), facts({1, 2})) == 1
    assert elect_leader(Election.PREFERRED, s(2, 3, [2]), facts({1, 2})) is None  # not in the ISR
    assert elect_leader(Election.REASSIGNMENT, s(1, 3, [1, 2, 3]), facts({1, 2, 3}), [3, 2]) == 3
    assert elect_leader(Election.OFFLINE, s(1, 3, [1]), facts({2, 3})) is None
    assert elect_leader(Election.OFFLINE, s(1, 3, [1]), facts({3}, unclean=True)) == 3


def test_going_offline_and_back() -> None:
    f = facts({3})
    offline = transition_to(s(1, 4, [1, 2]), PartitionStatus.OFFLINE, f)
    assert offline == s(-1, 5, [1, 2])
    assert partition_status(offline, f) is PartitionStatus.OFFLINE
    assert transition_to(offline, PartitionStatus.OFFLINE, f) is None  # already offline
    back = transition_to(offline, PartitionStatus.ONLINE, facts({2, 3}), Election.OFFLINE)
    assert back == s(2, 6, [2])


def test_a_resigning_leader_hands_over_to_another_isr_member_and_leaves_the_isr() -> None:
    f = facts({1, 2, 3})
    assert elect_leader(Election.RESIGNATION, s(2, 4, [1, 2, 3]), f) == 1  # replica order
    assert transition_to(s(1, 4, [1, 2, 3]), PartitionStatus.ONLINE, f, Election.RESIGNATION) == \
        s(2, 5, [2, 3])
    # Nobody else in the ISR is registered (or all others are shutting down): no change.
    assert transition_to(s(1, 4, [1, 2]), PartitionStatus.ONLINE, facts({1, 3}),
                         Election.RESIGNATION) is None
    assert transition_to(s(1, 4, [1, 2, 3]), PartitionStatus.ONLINE, facts({1, 2, 3}, {2, 3}),
                         Election.RESIGNATION) is None


def test_reconcile_keeps_a_last_isr_member_that_is_shutting_down() -> None:
    assert reconcile_partition(s(1, 4, [1]), facts({1, 2}, {1})) is None
    new, election = reconcile_partition(s(1, 4, [1, 2]), facts({1, 2}, {1})) or (None, None)
    assert new == s(2, 5, [2]) and election is Election.CONTROLLED_SHUTDOWN


brokers = st.sampled_from([1, 2, 3])
states = st.sets(brokers, min_size=1).flatmap(lambda isr: st.builds(
    lambda leader, epoch: s(leader, epoch, sorted(isr)),
    st.sampled_from([-1, *sorted(isr)]), st.integers(0, 50)))


@settings(max_examples=500, deadline=None)
@given(state=states, live=st.sets(brokers), down=st.sets(brokers), unclean=st.booleans(),
       election=st.sampled_from(list(Election)), target=st.lists(brokers, unique=True, min_size=1))
def test_every_transition_keeps_the_invariants(state: PartitionState, live: set[int], down: set[int],
                                               unclean: bool, election: Election,
                                               target: list[int]) -> None:
    f = facts(live, down & live, unclean)
    results = [transition_to(state, PartitionStatus.ONLINE, f, election, target),
               transition_to(state, PartitionStatus.OFFLINE, f)]
    decided = reconcile_partition(state, f)
    results.append(decided[0] if decided else None)
    for new in results:
        if new is None:
            continue
        assert new.isr, "an ISR never becomes empty"
        if new.leader >= 0 and new.leader in state.isr:
            assert set(new.isr) <= set(state.isr), "the controller never adds to the ISR"
            assert new.leader in f.eligible or new.leader == state.leader
        elif new.leader >= 0:
            assert unclean and new.isr == [new.leader], "only an unclean election leaves the ISR"
        assert new.leader_epoch == state.leader_epoch + (new.leader != state.leader)
    resigned = results[0] if election is Election.RESIGNATION else None
    if resigned is not None:
        assert resigned.leader != state.leader and resigned.leader in state.isr
        assert state.leader not in resigned.isr
