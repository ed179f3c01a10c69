"""Share groups (KIP-932), the group-coordinator side: membership, assignment, describe.

A share group's members heartbeat (ShareGroupHeartbeat) with a member id they
made themselves and an epoch: 0 joins, -1 leaves, anything else must be the
member's current epoch (or the one before it: a lost response is forgiven).
Every change of the subscriptions or of the subscribed topics' metadata bumps
the *group epoch*; the next heartbeat then computes a new *target assignment*
with the SimpleAssignor (``dmq.group.share_assignor``) and stamps it with that
epoch (the *assignment epoch*). A member whose epoch is behind jumps straight to
its target and the assignment epoch: share groups have no revocation
handshake, since members share partitions anyway (Kafka's
``ShareGroupAssignmentBuilder``).

Partitions become assignable once *initialized* for the group (record 15).
Kafka initializes them asynchronously on the share coordinator; dmq marks every
partition of a subscribed topic initialized in the very heartbeat that first
sees it (the brief's "synchronous initialization"), so a joining member's
first answer already carries its assignment. What initialization means for
the share-partition state (``share.auto.offset.reset``) is the share side's.

Durability: each change writes Kafka's records 10-15 (``dmq.group.records``).
As for classic groups, an operation applies its change to the live groups at
once and the records are the change's durable copy: ``ShareGroups.replay``
rebuilds groups only while a partition loads (``loading=True``); records
replayed after a write of this shard are already reflected. A change whose
records could not be written is undone unless the group changed again since,
so that a member retrying after the error writes its join again rather than
finding it done. Members survive a coordinator failover: the new coordinator
loads them with their epochs and assignments and gives each a full session to
heartbeat, so a client resumes where it was instead of rejoining (and is
never told GROUP_ID_NOT_FOUND).

Timers: ``("share-session", group, member)``, the member's session
(the group's ``share.session.timeout.ms``, else ``group.share.session.timeout.ms``); on
expiry it is fenced as if it had left.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from dmq.coordinator.runtime import Cancel, CoordinatorResult, Record, Schedule
from dmq.group import records as rec
from dmq.group.share_assignor import ASSIGNOR_NAME, MemberAssignment, assign

log = logging.getLogger("dmq.group")

LEAVE_EPOCH = -1
MAX_MEMBER_ID_LENGTH = 36
STABLE_MEMBER_STATE = 0  # Kafka's MemberState.STABLE, the only state of a share member
SESSION_TIMER = "share-session"


@dataclass(frozen=True, slots=True)
class ShareConfig:
    """Broker settings of share groups (``group.share.*``). ``per_group(group_id)``, when
    given, is a group's (share.session.timeout.ms, share.heartbeat.interval.ms): its
    group configs over these."""
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    per_group: Callable[[str], tuple[int, int]] | None = None

    def session_timeout(self, group_id: str) -> int:
        return self.per_group(group_id)[0] if self.per_group is not None else self.session_timeout_ms

    def heartbeat_interval(self, group_id: str) -> int:
        return self.per_group(group_id)[1] if self.per_group is not None else self.heartbeat_interval_ms


@dataclass(frozen=True, slots=True)
class ShareTopic:
    """What the coordinator needs of a topic from the cluster metadata."""
    topic_id: uuid.UUID
    partitions: int


TopicLookup = Callable[[str], ShareTopic | None]


@dataclass(frozen=True, slots=True)
class InitializedTopic:
    """A topic's partitions whose share-group state is initialized (record 15)."""
    name: str
    partitions: frozenset[int]


@dataclass(eq=False, slots=True)
class ShareMember:
    """One member. ``assigned`` is what it was last told it has (record 14), always a
    subset of its target restricted to the topics it subscribes to."""
    member_id: str
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    subscribed_topic_names: frozenset[str] = frozenset()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: MemberAssignment = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class ShareGroup:
    """One share group.

    Invariants: ``assignment_epoch <= group_epoch``; every member's epoch is at
    most ``assignment_epoch``; ``target`` has an entry exactly for the members
    present when the target was last computed, less those that left since;
    every partition in a target or an assignment is in ``initialized``. Members
    and assignments are replaced, never changed in place, once the group is
    live (``copy`` shares them). ``version`` counts changes, in memory only.
    """
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, MemberAssignment] = field(default_factory=dict)
    initialized: dict[uuid.UUID, InitializedTopic] = field(default_factory=dict)
    # Kept as read from a Kafka-written record 15; dmq itself initializes at once.
    initializing: dict[uuid.UUID, InitializedTopic] = field(default_factory=dict)
    deleting: dict[uuid.UUID, str] = field(default_factory=dict)
    version: int = 0

    def copy(self) -> ShareGroup:
        """A copy to go back to (the maps are new, the members and assignments shared)."""
        return ShareGroup(self.group_id, self.group_epoch, self.metadata_hash, self.assignment_epoch,
                          dict(self.members), dict(self.target), dict(self.initialized),
                          dict(self.initializing), dict(self.deleting), self.version)

    @property
    def state(self) -> str:
        """Kafka's ShareGroupState name: Empty without members, else Stable."""
        return "Stable" if self.members else "Empty"

    def subscribed_topic_names(self) -> set[str]:
        return {name for m in self.members.values() for name in m.subscribed_topic_names}

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self.initialized.get(topic_id)
        return topic.name if topic is not None else None

    def initialized_partitions(self) -> frozenset[tuple[str, int]]:
        """Every ``(topic, partition)`` whose share state this group initialized."""
        return frozenset((t.name, p) for t in self.initialized.values() for p in t.partitions)


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    """A ShareGroupHeartbeat answer. ``assignment`` (topic id -> partitions) is None
    when the member is not told its assignment (unchanged)."""
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict[uuid.UUID, tuple[int, ...]] | None = None


@dataclass(frozen=True, slots=True)
class DescribedShareMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]  # (topic id, name, partitions)


@dataclass(frozen=True, slots=True)
class DescribedShareGroup:
    """ShareGroupDescribe's view of one group (a snapshot, not the live group). An
    error leaves the other fields at the schema's defaults, as in Kafka."""
    group_id: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedShareMember, ...] = ()


_COORDINATOR_ERRORS = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                       ErrorCode.coordinator_load_in_progress)


def state_initialization_error(group: DescribedShareGroup, member_id: str, topic_id: uuid.UUID,
                               partition: int) -> ErrorCode:
    """Whether a share-partition's leader may initialize the durable state of
    ``topic_id``-``partition`` for a request of ``member_id`` in ``group`` (as the
    group's coordinator describes it): NONE when it is a share group, the member one of
    its members and the partition assigned to one of them (an assigned partition is
    initialized for the group: record 15). Otherwise the error the request gets: the
    describe's (GROUP_ID_NOT_FOUND for no group of that id or a classic one; a
    coordinator that cannot answer now as COORDINATOR_NOT_AVAILABLE, retriable),
    UNKNOWN_MEMBER_ID, or INVALID_REQUEST for a partition the group never initialized
    (what Kafka's share coordinator answers a read of such a state)."""
    if group.error in _COORDINATOR_ERRORS:
        return ErrorCode.coordinator_not_available
    if group.error is not ErrorCode.none:
        return group.error
    if not any(m.member_id == member_id for m in group.members):
        return ErrorCode.unknown_member_id
    assigned = any(t == topic_id and partition in ps for m in group.members for t, _, ps in m.assignment)
    return ErrorCode.none if assigned else ErrorCode.invalid_request


def validate_heartbeat(group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                       subscribed_topic_names: Iterable[str] | None) -> str | None:
    """Why the request is INVALID_REQUEST, or None (KafkaApis and GroupCoordinatorService)."""
    if not member_id or len(member_id) > MAX_MEMBER_ID_LENGTH:
        return "Invalid member id in the request."
    if not group_id:
        return "GroupId can't be empty."
    if rack_id is not None and not rack_id:
        return "RackId can't be empty."
    if member_epoch == 0:
        if subscribed_topic_names is None or not list(subscribed_topic_names):
            return "SubscribedTopicNames must be set in first request."
    elif member_epoch < LEAVE_EPOCH:
        return "MemberEpoch is invalid."
    return None


def metadata_hash(topics: dict[str, ShareTopic]) -> int:
    """A signed 64-bit digest of the subscribed topics' ids and partition counts; 0 for
    none. (Kafka hashes more, and differently: a Kafka coordinator reading these
    records only bumps the group epoch once.)"""
    if not topics:
        return 0
    text = ";".join(f"{name}:{t.topic_id.hex}:{t.partitions}" for name, t in sorted(topics.items()))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


def session_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return (SESSION_TIMER, group_id, member_id)


def _topic_partitions(assignment: MemberAssignment) -> tuple[rec.TopicPartitions, ...]:
    return tuple(rec.TopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(assignment.items()) if ps)


def _assignment(items: tuple[rec.TopicPartitions, ...]) -> MemberAssignment:
    return {tp.topic_id: frozenset(tp.partitions) for tp in items if tp.partitions}


def _record(key: rec.ShareKey, value: rec.ShareValue | None) -> Record:
    return rec.encode_share_key(key), rec.encode_share_value(value) if value is not None else None


class ShareGroups:
    """The share groups of one ``__consumer_offsets`` partition.

    Invariants: every group in ``groups`` has had its ShareGroupMetadata (11)
    written (or loaded); every member has a session timer; the records of
    every change are in the operation's result, in Kafka's order, so replaying
    the partition rebuilds exactly these groups. One operation at a time, on
    the event loop (the owning ``GroupShard`` is the runtime's shard).
    """

    def __init__(self, config: ShareConfig, topics: TopicLookup) -> None:
        self.config = config
        self.topics = topics
        self.groups: dict[str, ShareGroup] = {}

    # ------------------------------------------------------------- heartbeat

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed_topic_names: list[str] | None, client_id: str, client_host: str,
                  now_ms: int) -> CoordinatorResult:
        """A validated ShareGroupHeartbeat of a group id that is no classic group."""
        if member_epoch == LEAVE_EPOCH:
            return self._leave(group_id, member_id)
        group = self.groups.get(group_id)
        before = group.copy() if group is not None else None
        if group is None:
            if member_epoch != 0:
                return _error(ErrorCode.group_id_not_found, f"Share group {group_id} not found.")
            group = ShareGroup(group_id)
        member = group.members.get(member_id)
        if member is None and len(group.members) >= self.config.max_size:
            return _error(ErrorCode.group_max_size_reached,
                          f"The share group has reached its maximum capacity of {self.config.max_size} members.")
        if member is None:
            if member_epoch != 0:
                return _error(ErrorCode.unknown_member_id,
                              f"Member {member_id} is not a member of group {group_id}.")
            log.info("member %s joins share group %s", member_id, group_id)
            member = ShareMember(member_id)
        elif member_epoch != 0 and member_epoch != member.member_epoch and \
                (member_epoch > member.member_epoch or member_epoch != member.previous_member_epoch):
            return _error(ErrorCode.fenced_member_epoch,
                          f"The share group member has epoch {member_epoch}, the coordinator knows "
                          f"{member.member_epoch}. The member must abandon all its partitions and rejoin.")
        records: list[Record] = []
        updated = ShareMember(
            member_id, client_id, client_host, rack_id if rack_id is not None else member.rack_id,
            frozenset(subscribed_topic_names) if subscribed_topic_names is not None
            else member.subscribed_topic_names,
            member.member_epoch, member.previous_member_epoch, member.assigned)
        is_new = member_id not in group.members
        subscription_changed = updated.subscribed_topic_names != member.subscribed_topic_names or is_new
        if is_new or (updated.client_id, updated.client_host, updated.rack_id, updated.subscribed_topic_names) \
                != (member.client_id, member.client_host, member.rack_id, member.subscribed_topic_names):
            records.append(_record(rec.ShareKey(rec.SHARE_MEMBER_METADATA, group_id, member_id),
                                   rec.ShareMemberMetadataValue(updated.rack_id, client_id, client_host,
                                                                tuple(sorted(updated.subscribed_topic_names)))))
        members = dict(group.members)
        members[member_id] = updated
        topics = self._subscribed_topics(members.values())
        initialized = self._initialize(group, topics, records)
        new_hash = metadata_hash(topics)
        group_epoch = group.group_epoch
        if subscription_changed or initialized or new_hash != group.metadata_hash:
            group_epoch += 1
            records.append(_record(rec.ShareKey(rec.SHARE_GROUP_METADATA, group_id),
                                   rec.ShareGroupMetadataValue(group_epoch, new_hash)))
            log.info("share group %s: epoch %d", group_id, group_epoch)
        target = group.target
        assignment_epoch = group.assignment_epoch
        if group_epoch > assignment_epoch:
            target = self._target(group, members, topics, initialized or group.initialized, records)
            assignment_epoch = group_epoch
            records.append(_record(rec.ShareKey(rec.SHARE_TARGET_ASSIGNMENT_METADATA, group_id),
                                   rec.ShareTargetAssignmentMetadataValue(assignment_epoch)))
        if updated.member_epoch != assignment_epoch or subscription_changed:
            subscribed_ids = {topics[name].topic_id for name in updated.subscribed_topic_names if name in topics}
            updated.assigned = {t: ps for t, ps in target.get(member_id, {}).items() if t in subscribed_ids}
            if updated.member_epoch != assignment_epoch:
                updated.previous_member_epoch = updated.member_epoch
                updated.member_epoch = assignment_epoch
            if (is_new or updated.assigned != member.assigned or updated.member_epoch != member.member_epoch
                    or updated.previous_member_epoch != member.previous_member_epoch):
                records.append(_record(
                    rec.ShareKey(rec.SHARE_CURRENT_MEMBER_ASSIGNMENT, group_id, member_id),
                    rec.ShareCurrentMemberAssignmentValue(updated.member_epoch, updated.previous_member_epoch,
                                                          STABLE_MEMBER_STATE, _topic_partitions(updated.assigned))))
        # Apply: the records above are this change's durable copy.
        self.groups[group_id] = group
        group.members[member_id] = updated
        group.group_epoch, group.metadata_hash = group_epoch, new_hash
        group.target, group.assignment_epoch = target, assignment_epoch
        if initialized:
            group.initialized = initialized
        if records:
            group.version += 1
        tell = member_epoch == 0 or subscribed_topic_names is not None or updated.assigned != member.assigned
        response = ShareHeartbeatResult(
            ErrorCode.none, None, member_id, updated.member_epoch, self.config.heartbeat_interval(group_id),
            {t: tuple(sorted(ps)) for t, ps in sorted(updated.assigned.items())} if tell else None)
        return self._undone_if_lost(group_id, before, CoordinatorResult(
            response, records, timers=[Schedule(session_key(group_id, member_id),
                                                self.config.session_timeout(group_id))]))

    def _undone_if_lost(self, group_id: str, before: ShareGroup | None,
                        result: CoordinatorResult) -> CoordinatorResult:
        """Go back to ``before`` if the change's records cannot be written, unless a later
        operation changed the group meanwhile (its records follow these in the log).

        The change was applied at once; were it kept after a failed write, a member
        retrying its join would find nothing left to write, and a new coordinator
        would not know the group its client was told it had joined."""
        after = self.groups.get(group_id)
        version = after.version if after is not None else -1

        def failed(shard: object, error: ErrorCode, now_ms: int) -> CoordinatorResult:
            # The runtime runs this on the same shard (an unloaded one is never called).
            current = self.groups.get(group_id)
            if current is not after or (current is not None and current.version != version):
                return CoordinatorResult()
            log.info("share group %s: the change could not be written (%s); undone", group_id, error.name)
            if before is None:
                del self.groups[group_id]
                return CoordinatorResult()
            self.groups[group_id] = before
            # Members put back get a session again (a fenced member's timer was cancelled).
            return CoordinatorResult(timers=[Schedule(session_key(group_id, m), self.config.session_timeout(group_id))
                                             for m in before.members])

        result.failed = failed
        return result

    def _subscribed_topics(self, members: Iterable[ShareMember]) -> dict[str, ShareTopic]:
        """The subscribed topics that exist, by name."""
        topics: dict[str, ShareTopic] = {}
        for name in sorted({n for m in members for n in m.subscribed_topic_names}):
            topic = self.topics(name)
            if topic is not None:
                topics[name] = topic
        return topics

    def _initialize(self, group: ShareGroup, topics: dict[str, ShareTopic],
                    records: list[Record]) -> dict[uuid.UUID, InitializedTopic] | None:
        """Initialize every partition of the subscribed topics not initialized yet: the
        new record 15 (and the initialized map to install), or None if nothing is new.
        Entries of topics that no longer exist under their name (deleted, or deleted
        and created again with a new id) are dropped when the record is rewritten."""
        fresh = False
        initialized = dict(group.initialized)
        for name, topic in topics.items():
            have = initialized.get(topic.topic_id)
            wanted = frozenset(range(topic.partitions))
            if have is None or not wanted <= have.partitions:
                already = have.partitions if have is not None else frozenset()
                initialized[topic.topic_id] = InitializedTopic(name, wanted | already)
                fresh = True
        if not fresh:
            return None
        for topic_id, done in list(initialized.items()):
            now = topics.get(done.name) or self.topics(done.name)
            if now is None or now.topic_id != topic_id:
                del initialized[topic_id]
        records.append(_record(rec.ShareKey(rec.SHARE_STATE_PARTITION_METADATA, group.group_id),
                               _partition_metadata(initialized, group)))
        return initialized

    @staticmethod
    def _target(group: ShareGroup, members: dict[str, ShareMember], topics: dict[str, ShareTopic],
                initialized: dict[uuid.UUID, InitializedTopic], records: list[Record]) -> dict[str, MemberAssignment]:
        """A new target assignment over the initialized partitions of the subscribed
        topics; record 13 for every member whose target changed."""
        assignable = {t.topic_id: sorted(p for p in initialized[t.topic_id].partitions if p < t.partitions)
                      for t in topics.values() if t.topic_id in initialized}
        subscriptions = {m.member_id: [topics[n].topic_id for n in m.subscribed_topic_names if n in topics]
                         for m in members.values()}
        homogeneous = len({m.subscribed_topic_names for m in members.values()}) == 1
        target = assign(subscriptions, assignable, group.target, homogeneous)
        for member_id, assignment in sorted(target.items()):
            if group.target.get(member_id) != assignment:
                records.append(_record(rec.ShareKey(rec.SHARE_TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id),
                                       rec.ShareTargetAssignmentMemberValue(_topic_partitions(assignment))))
        return target

    # ----------------------------------------------------------- leave/fence

    def _leave(self, group_id: str, member_id: str) -> CoordinatorResult:
        group = self.groups.get(group_id)
        if group is None:
            return _error(ErrorCode.group_id_not_found, f"Share group {group_id} not found.")
        member = group.members.get(member_id)
        if member is None:
            return _error(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
        log.info("member %s left share group %s", member_id, group_id)
        result = self._fence(group, member)
        result.response = ShareHeartbeatResult(ErrorCode.none, None, member_id, LEAVE_EPOCH, 0, None)
        return result

    def _fence(self, group: ShareGroup, member: ShareMember) -> CoordinatorResult:
        """Remove a member: tombstones for its records, and a group epoch bump so the next
        heartbeat of another member reassigns its partitions."""
        group_id, member_id = group.group_id, member.member_id
        before = group.copy()
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.version += 1
        group.group_epoch += 1
        group.metadata_hash = metadata_hash(self._subscribed_topics(group.members.values()))
        records = [
            _record(rec.ShareKey(rec.SHARE_CURRENT_MEMBER_ASSIGNMENT, group_id, member_id), None),
            _record(rec.ShareKey(rec.SHARE_TARGET_ASSIGNMENT_MEMBER, group_id, member_id), None),
            _record(rec.ShareKey(rec.SHARE_MEMBER_METADATA, group_id, member_id), None),
            _record(rec.ShareKey(rec.SHARE_GROUP_METADATA, group_id),
                    rec.ShareGroupMetadataValue(group.group_epoch, group.metadata_hash)),
        ]
        return self._undone_if_lost(group_id, before, CoordinatorResult(
            None, records, timers=[Cancel(session_key(group_id, member_id))]))

    def on_timer(self, key: Hashable, now_ms: int) -> CoordinatorResult:
        """A member's session ran out: it is fenced as if it had left."""
        assert isinstance(key, tuple) and key[0] == SESSION_TIMER
        group = self.groups.get(key[1])
        member = group.members.get(key[2]) if group is not None else None
        if group is None or member is None:
            return CoordinatorResult()
        log.info("member %s of share group %s missed its session timeout; fencing it", key[2], key[1])
        return self._fence(group, member)

    def on_loaded(self) -> list[Schedule]:
        """Loaded members get a full session to heartbeat to their new coordinator."""
        return [Schedule(session_key(g.group_id, m), self.config.session_timeout(g.group_id))
                for g in self.groups.values() for m in g.members]

    # ---------------------------------------------------------------- admin

    def describe(self, group_id: str) -> DescribedShareGroup:
        group = self.groups.get(group_id)
        if group is None:
            return DescribedShareGroup(group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        members = tuple(
            DescribedShareMember(
                m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                tuple(sorted(m.subscribed_topic_names)),
                tuple((t, group.topic_name(t) or "", tuple(sorted(ps))) for t, ps in sorted(m.assigned.items())))
            for m in group.members.values())
        return DescribedShareGroup(group_id, ErrorCode.none, None, group.state, group.group_epoch,
                                   group.assignment_epoch, ASSIGNOR_NAME, members)

    def offsets_target(self, group_id: str) -> tuple[ErrorCode, dict[uuid.UUID, InitializedTopic]]:
        """DescribeShareGroupOffsets of all the group's partitions: the initialized ones."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, {}
        return ErrorCode.none, dict(group.initialized)

    def offsets_changed(self, group_id: str, add: dict[uuid.UUID, InitializedTopic],
                        remove: frozenset[uuid.UUID] = frozenset()) -> CoordinatorResult:
        """AlterShareGroupOffsets (``add``: the partitions whose state is reset, initialized
        from now on) and DeleteShareGroupOffsets (``remove``: topics whose state is
        deleted): only on a group without members (NON_EMPTY_GROUP otherwise), answered with
        an ErrorCode once record 15 is written. Nothing to change writes nothing."""
        group = self.groups.get(group_id)
        if group is None:
            return CoordinatorResult(ErrorCode.group_id_not_found)
        if group.members:
            return CoordinatorResult(ErrorCode.non_empty_group)
        initialized = {t: v for t, v in group.initialized.items() if t not in remove}
        for topic_id, topic in add.items():
            have = initialized.get(topic_id)
            initialized[topic_id] = InitializedTopic(topic.name, topic.partitions | (
                have.partitions if have is not None and have.name == topic.name else frozenset()))
        if initialized == group.initialized:
            return CoordinatorResult(ErrorCode.none)
        before = group.copy()
        group.initialized = initialized
        group.version += 1
        records = [_record(rec.ShareKey(rec.SHARE_STATE_PARTITION_METADATA, group_id),
                           _partition_metadata(initialized, group))]
        return self._undone_if_lost(group_id, before, CoordinatorResult(ErrorCode.none, records))

    def delete(self, group_id: str) -> CoordinatorResult:
        """DeleteGroups of a share group: only an empty one; tombstones for all its records."""
        group = self.groups[group_id]
        if group.members:
            return CoordinatorResult(ErrorCode.non_empty_group)
        records = [_record(rec.ShareKey(rec.SHARE_TARGET_ASSIGNMENT_MEMBER, group_id, m), None)
                   for m in sorted(group.target)]
        records.append(_record(rec.ShareKey(rec.SHARE_TARGET_ASSIGNMENT_METADATA, group_id), None))
        records.append(_record(rec.ShareKey(rec.SHARE_STATE_PARTITION_METADATA, group_id), None))
        records.append(_record(rec.ShareKey(rec.SHARE_GROUP_METADATA, group_id), None))
        del self.groups[group_id]
        log.info("share group %s deleted", group_id)
        return self._undone_if_lost(group_id, group, CoordinatorResult(ErrorCode.none, records))

    # --------------------------------------------------------------- replay

    def replay(self, key: rec.ShareKey, value: bytes | None) -> None:
        """Rebuild from one record of a loading partition (Kafka's replay of records 10-15)."""
        group = self.groups.get(key.group)
        if value is None:
            self._replay_tombstone(group, key)
            return
        v = rec.decode_share_value(key.record_type, value)
        if group is None:
            group = self.groups[key.group] = ShareGroup(key.group)
        member = None
        if key.member is not None and not isinstance(v, rec.ShareTargetAssignmentMemberValue):
            member = group.members.get(key.member)
            if member is None:
                member = group.members[key.member] = ShareMember(key.member)
        if isinstance(v, rec.ShareMemberMetadataValue):
            assert member is not None
            member.rack_id, member.client_id, member.client_host = v.rack_id, v.client_id, v.client_host
            member.subscribed_topic_names = frozenset(v.subscribed_topic_names)
        elif isinstance(v, rec.ShareGroupMetadataValue):
            group.group_epoch, group.metadata_hash = v.epoch, v.metadata_hash
        elif isinstance(v, rec.ShareTargetAssignmentMetadataValue):
            group.assignment_epoch = v.assignment_epoch
        elif isinstance(v, rec.ShareTargetAssignmentMemberValue):
            assert key.member is not None
            group.target[key.member] = _assignment(v.topic_partitions)
        elif isinstance(v, rec.ShareCurrentMemberAssignmentValue):
            assert member is not None
            member.member_epoch, member.previous_member_epoch = v.member_epoch, v.previous_member_epoch
            member.assigned = _assignment(v.assigned_partitions)
        else:
            group.initialized = {t.topic_id: InitializedTopic(t.topic_name, frozenset(t.partitions))
                                 for t in v.initialized_topics}
            group.initializing = {t.topic_id: InitializedTopic(t.topic_name, frozenset(t.partitions))
                                  for t in v.initializing_topics}
            group.deleting = {t.topic_id: t.topic_name for t in v.deleting_topics}

    def _replay_tombstone(self, group: ShareGroup | None, key: rec.ShareKey) -> None:
        if group is None:
            return
        kind = key.record_type
        if kind == rec.SHARE_GROUP_METADATA:
            del self.groups[key.group]
        elif kind == rec.SHARE_MEMBER_METADATA:
            group.members.pop(key.member or "", None)
        elif kind == rec.SHARE_CURRENT_MEMBER_ASSIGNMENT:
            member = group.members.get(key.member or "")
            if member is not None:
                member.member_epoch = member.previous_member_epoch = LEAVE_EPOCH
                member.assigned = {}
        elif kind == rec.SHARE_TARGET_ASSIGNMENT_MEMBER:
            group.target.pop(key.member or "", None)
        elif kind == rec.SHARE_TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = -1
        elif kind == rec.SHARE_STATE_PARTITION_METADATA:
            group.initialized, group.initializing, group.deleting = {}, {}, {}


def _partition_metadata(initialized: dict[uuid.UUID, InitializedTopic],
                        group: ShareGroup) -> rec.ShareStatePartitionMetadataValue:
    def info(topics: dict[uuid.UUID, InitializedTopic]) -> tuple[rec.TopicPartitionsInfo, ...]:
        return tuple(rec.TopicPartitionsInfo(t, topic.name, tuple(sorted(topic.partitions)))
                     for t, topic in sorted(topics.items()))

    initializing = {t: v for t, v in group.initializing.items() if t not in initialized}
    return rec.ShareStatePartitionMetadataValue(
        info(initializing), info(initialized),
        tuple(rec.TopicInfo(t, name) for t, name in sorted(group.deleting.items())))


def _error(error: ErrorCode, message: str) -> CoordinatorResult:
    return CoordinatorResult(ShareHeartbeatResult(error, message))
