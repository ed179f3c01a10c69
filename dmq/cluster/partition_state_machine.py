"""The controller's partition and replica state machines and Kafka's leader elections.

Pure code: given a partition's state and the cluster's facts (live brokers,
brokers shutting down, whether the topic allows unclean elections), it
returns the state the controller should write, or None when nothing changes;
the Controller does the compare-and-set. Kafka's ``PartitionStateMachine``,
``ReplicaStateMachine`` and ``PartitionLeaderElectionAlgorithms``, for the
transitions dmq's controller makes (topic creation and deletion write their
znodes directly, so the New and NonExistent states never reach it).

Partition statuses: ONLINE (its leader is a live broker) and OFFLINE (no live
leader: -1, or a broker that is gone). Every change goes through
``transition_to`` and is checked against ``PARTITION_TRANSITIONS``.

Invariants of every state returned:
- a leader elected cleanly is live, not shutting down, and in the ISR it had;
- the controller never adds a replica to an ISR (only the leader does, once
  the replica caught up), and an ISR never becomes empty;
- the leader epoch moves by one exactly when the leader changes (including
  going offline), which fences the old leader.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dmq.cluster.metadata import PartitionState


class PartitionStatus(enum.Enum):
    ONLINE = "online"
    OFFLINE = "offline"


class ReplicaStatus(enum.Enum):
    ONLINE = "online"  # its broker is registered and not shutting down
    OFFLINE = "offline"  # gone or shutting down: it leaves the ISR (unless it leads)


class Election(enum.Enum):
    """Kafka's leader election algorithms; the value is what the log says."""

    OFFLINE = "leader lost"
    CONTROLLED_SHUTDOWN = "controlled shutdown"
    PREFERRED = "preferred leader election"
    REASSIGNMENT = "reassignment"
    RESIGNATION = "leader lost its followers"


# target status -> the statuses a partition may move to it from
PARTITION_TRANSITIONS: dict[PartitionStatus, frozenset[PartitionStatus]] = {
    PartitionStatus.ONLINE: frozenset({PartitionStatus.ONLINE, PartitionStatus.OFFLINE}),
    PartitionStatus.OFFLINE: frozenset({PartitionStatus.ONLINE, PartitionStatus.OFFLINE}),
}


class IllegalStateTransition(Exception):
    pass


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    live: frozenset[int]
    shutting_down: frozenset[int] = frozenset()
    unclean_allowed: bool = False

    @property
    def eligible(self) -> frozenset[int]:
        """Brokers that may lead or stay in an ISR."""
        return self.live - self.shutting_down

    def replica_status(self, broker_id: int) -> ReplicaStatus:
        return ReplicaStatus.ONLINE if broker_id in self.eligible else ReplicaStatus.OFFLINE


def partition_status(state: PartitionState, facts: ClusterFacts) -> PartitionStatus:
    return PartitionStatus.ONLINE if state.leader in facts.live else PartitionStatus.OFFLINE


# ------------------------------------------------------------------ elections

def elect_leader(election: Election, state: PartitionState, facts: ClusterFacts,
                 target: list[int] | None = None) -> int | None:
    """The replica ``election`` picks, or None when it can pick none."""
    in_isr = [r for r in state.replicas if r in state.isr and r in facts.eligible]
    if election is Election.OFFLINE:
        if in_isr:
            return in_isr[0]
        if facts.unclean_allowed:
            live = [r for r in state.replicas if r in facts.eligible]
            return live[0] if live else None
        return None
    if election is Election.CONTROLLED_SHUTDOWN:
        return in_isr[0] if in_isr else None
    if election is Election.PREFERRED:
        preferred = state.replicas[0] if state.replicas else -1
        return preferred if preferred in in_isr else None
    if election is Election.REASSIGNMENT:
        candidates = [r for r in (target or []) if r in state.isr and r in facts.eligible]
        return candidates[0] if candidates else None
    if election is Election.RESIGNATION:
        # The leader cannot reach its followers: another ISR member takes over.
        others = [r for r in in_isr if r != state.leader]
        return others[0] if others else None
    raise ValueError(election)


# --------------------------------------------------------------- transitions

def transition_to(state: PartitionState, status: PartitionStatus, facts: ClusterFacts,
                  election: Election | None = None,
                  target: list[int] | None = None) -> PartitionState | None:
    """Move the partition to ``status``; returns the state to write, or None when the
    election finds no leader (the caller decides what then) or nothing changes."""
    current = partition_status(state, facts)
    if current not in PARTITION_TRANSITIONS[status]:
        raise IllegalStateTransition(f"{current.name} -> {status.name}")
    if status is PartitionStatus.OFFLINE:
        if state.leader == -1:
            return None
        # No leader; the ISR keeps its last members so that they can lead cleanly later.
        isr = [r for r in state.isr if r in facts.eligible] or state.isr
        return PartitionState(state.replicas, -1, state.leader_epoch + 1, isr)
    assert election is not None, "going online needs an election"
    leader = elect_leader(election, state, facts, target)
    if leader is None:
        return None
    if leader not in state.isr:  # unclean: the ISR starts again from the new leader
        isr = [leader]
    elif election is Election.REASSIGNMENT:
        isr = [r for r in state.isr if r in (target or [])]
    elif election is Election.PREFERRED:
        isr = list(state.isr)
    elif election is Election.RESIGNATION:
        # The resigning leader cannot reach the others: it leaves the ISR (it rejoins once
        # it has caught up), so the new leader's ISR takes writes at once.
        isr = [r for r in state.isr if r in facts.eligible and r != state.leader]
    else:
        isr = [r for r in state.isr if r in facts.eligible]
    if leader == state.leader and isr == state.isr:
        return None
    epoch = state.leader_epoch + 1 if leader != state.leader else state.leader_epoch
    return PartitionState(state.replicas, leader, epoch, isr)


def replicas_offline(state: PartitionState, facts: ClusterFacts) -> PartitionState | None:
    """The replica state machine's OFFLINE transition for every follower whose broker is
    gone or shutting down: it leaves the ISR. The leader stays in it."""
    isr = [r for r in state.isr
           if facts.replica_status(r) is ReplicaStatus.ONLINE or r == state.leader]
    if not isr:
        isr = [state.leader]
    if isr == state.isr:
        return None
    return PartitionState(state.replicas, state.leader, state.leader_epoch, isr)


def reconcile_partition(state: PartitionState, facts: ClusterFacts
                        ) -> tuple[PartitionState, Election | None] | None:
    """What the controller does for one partition after any event: a new leader when
    its leader is gone or shutting down, else the replicas that went offline leave
    the ISR. Returns (state to write, the election that made it) or None."""
    if state.leader in facts.eligible:
        new = replicas_offline(state, facts)
        return (new, None) if new is not None else None
    shutting_down = state.leader in facts.live  # live but not eligible
    election = Election.CONTROLLED_SHUTDOWN if shutting_down else Election.OFFLINE
    new = transition_to(state, PartitionStatus.ONLINE, facts, election)
    if new is not None:
        return new, election
    if shutting_down:
        # The only ISR member is shutting down: it keeps leading until it goes; the
        # replicas that are gone leave the ISR.
        isr = [r for r in state.isr if r in facts.live]
        if isr == state.isr:
            return None
        return PartitionState(state.replicas, state.leader, state.leader_epoch, isr), None
    new = transition_to(state, PartitionStatus.OFFLINE, facts)
    return (new, Election.OFFLINE) if new is not None else None
