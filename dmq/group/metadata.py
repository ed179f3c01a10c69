"""Consumer group state: members, generation, protocol and the state machine.

States and legal moves (Kafka's classic group protocol)::

    Empty               -> PreparingRebalance, Dead
    PreparingRebalance  -> CompletingRebalance, Empty, Dead
    CompletingRebalance -> PreparingRebalance, Stable, Dead
    Stable              -> PreparingRebalance, Dead
    Dead                -> (none)

``transition_to()`` is the only way to change state and rejects any other
move. Membership is in memory; what must survive a restart (generation,
protocol, leader, members with their assignments, committed offsets) is
written as records to ``__consumer_offsets`` by the group shard. Plain data:
no futures or timers (a member waiting in JoinGroup or SyncGroup is the key
of its parked request, see ``dmq.coordinator.runtime``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import Enum


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.COMPLETING_REBALANCE, GroupState.EMPTY,
                                               GroupState.DEAD}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.STABLE,
                                                GroupState.DEAD}),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset(),
}


class IllegalStateTransition(RuntimeError):
    pass


@dataclass(slots=True)
class OffsetAndMetadata:
    """A committed offset. ``record_offset``: where in ``__consumer_offsets`` the record
    that set it lies (-1: not known), which orders a transaction's offsets against plain
    commits when its marker comes (Kafka's recordOffset): the later record wins, as
    compaction keeps it."""
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    record_offset: int = field(default=-1, compare=False)
    # When it expires, if its commit said (OffsetCommit v2-4's retention time, written as
    # OffsetCommitValue v1); -1: by offsets.retention.minutes.
    expire_timestamp: int = -1


@dataclass(eq=False, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's preference order
    assignment: bytes = b""
    join_waiter: Hashable | None = None  # the parked JoinGroup of this member
    sync_waiter: Hashable | None = None  # the parked SyncGroup of this member

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass(eq=False, slots=True)
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: set[str] = field(default_factory=set)  # ids handed out with MEMBER_ID_REQUIRED
    # Members of the current generation that have not sent SyncGroup yet (Kafka's pending
    # sync set): removed, with a new rebalance, when the rebalance timeout passes first.
    pending_sync: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    state_timestamp: int = -1
    new_member_added: bool = False
    in_initial_delay: bool = False
    initial_delay_remaining_ms: int = 0

    def transition_to(self, target: GroupState) -> None:
        if target not in TRANSITIONS[self.state]:
            raise IllegalStateTransition(
                f"group {self.group_id}: illegal transition {self.state.value} -> {target.value}")
        self.state = target

    @property
    def is_empty(self) -> bool:
        return not self.members

    def add_member(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id

    def remove_member(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """A joining member must share the type and at least one protocol with everyone."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & set(names))

    def candidate_protocols(self) -> set[str]:
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that everyone supports."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(name for name in m.protocol_names() if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda name: votes[name])

    def all_members_joined(self) -> bool:
        return all(m.join_waiter is not None for m in self.members.values()) and not self.pending_members

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), None when unknown."""
        if self.protocol_type != "consumer" or self.protocol is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            decoded = decode_subscription_topics(m.metadata_for(self.protocol))
            if decoded is None:
                return None
            topics |= decoded
        return topics


def decode_subscription_topics(data: bytes) -> set[str] | None:
    """Topic names of a ConsumerProtocolSubscription (all versions start the same way)."""
    import struct

    try:
        pos = 2  # version
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        topics = set()
        for _ in range(count):
            (n,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topics.add(data[pos : pos + n].decode())
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
