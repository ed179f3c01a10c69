"""GroupShard: the classic consumer group protocol and committed offsets of one
``__consumer_offsets`` partition, as a pure coordinator shard.

Every request is a method ``(args..., now_ms) -> CoordinatorResult`` run by the
CoordinatorRuntime (``dmq.coordinator.runtime``); nothing here awaits, sleeps
or touches a socket, so the whole protocol is testable without an event loop.

What is durable (committed offsets; that a group is gone) changes only in
``replay()``, which the runtime calls once the records are on every in-sync
replica, and when this broker starts leading the partition. Membership during
a rebalance is in memory, as in Kafka; the group record written when a
generation's assignment is stored (or the group becomes empty) is its
snapshot, read back only when the partition is loaded.

Waiting is data: a JoinGroup waiting for the other members is parked under
the key in ``MemberMetadata.join_waiter`` and answered by a later reply; a
SyncGroup waits under ``sync_waiter`` until the leader's assignment is
committed. Timers are keys: ``("heartbeat", group, member)`` (session
timeout), ``("rebalance", group)`` (rebalance timeout or the initial delay),
``("pending", group, member)`` (a member id handed out with
MEMBER_ID_REQUIRED that never joined), ``("sync", group, generation)`` (members
of a generation that never sent SyncGroup within the rebalance timeout).

Share groups (KIP-932) live next to the classic groups, in the same group-id
namespace: ``ShareGroups`` (``dmq.group.share_group``) holds them and this
shard routes to it. A group id names a classic group or a share group, never
both: the share APIs answer GROUP_ID_NOT_FOUND for a classic group's id, and
the classic ones answer a share group's id as Kafka does (JoinGroup
INCONSISTENT_GROUP_PROTOCOL, the offset APIs GROUP_ID_NOT_FOUND).
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Collection, Hashable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from dmq.coordinator.runtime import Cancel, CoordinatorResult, Deferred, EndMarker, Record, Schedule
from dmq.group import records as rec
from dmq.group.metadata import GroupMetadata, GroupState, MemberMetadata, OffsetAndMetadata
from dmq.group.share_group import (
    SESSION_TIMER,
    DescribedShareGroup,
    InitializedTopic,
    ShareConfig,
    ShareGroup,
    ShareGroups,
    ShareHeartbeatResult,
    ShareMember,
    TopicLookup,
    validate_heartbeat,
)

log = logging.getLogger("dmq.group")


@dataclass(frozen=True, slots=True)
class GroupConfig:
    num_partitions: int = 50
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    max_group_size: int = 2**31 - 1
    share: ShareConfig = ShareConfig()


@dataclass(slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    # A static leader rejoining a stable group (KIP-345): it must not assign again. JoinGroup
    # v9+ says so (SkipAssignment); older versions are told the previous leader's id instead.
    skip_assignment: bool = False
    previous_leader: str = ""


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol: str | None = None


@dataclass(frozen=True, slots=True)
class ListedGroup:
    """A group as ListGroups shows it."""
    group_id: str
    protocol_type: str
    state: str
    group_type: str  # "classic" or "share"


class _Out:
    """What one operation produces besides its response."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.replies: list[tuple[Hashable, object]] = []
        self.timers: list[Schedule | Cancel] = []

    def result(self, response: object, **more: object) -> CoordinatorResult:
        return CoordinatorResult(response, self.records, self.replies, self.timers, **more)  # type: ignore[arg-type]


def _offset_commit_error(group: GroupMetadata, generation: int, member_id: str, instance_id: str | None,
                         transactional: bool) -> ErrorCode | None:
    """Whether a (transactional) offset commit to an existing group is refused (Kafka's
    ClassicGroup.validateOffsetCommit). Generation -1 commits to an Empty group whatever
    member id it names: the admin client, a consumer assigning partitions itself, or one
    that kept its member id after leaving the group (the Java consumer does)."""
    if group.state == GroupState.DEAD:
        return ErrorCode.coordinator_not_available
    if generation < 0 and group.state == GroupState.EMPTY:
        return None
    if generation >= 0 or member_id or instance_id is not None:
        if instance_id is not None:
            static = group.static_members.get(instance_id)
            if static is None:
                return ErrorCode.unknown_member_id
            if static != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
    elif not transactional:
        return ErrorCode.unknown_member_id  # the group has members: only they commit
    if not transactional and group.state == GroupState.COMPLETING_REBALANCE:
        return ErrorCode.rebalance_in_progress
    return None


def _heartbeat_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("heartbeat", group_id, member_id)


class GroupShard:
    """The groups of one ``__consumer_offsets`` partition.

    Invariants: ``groups`` holds every group with members or committed offsets
    whose records this partition replayed; a member in ``members`` has a
    heartbeat timer; ``join_waiter``/``sync_waiter`` are set exactly while that
    member has a parked request. Called by the runtime only, one operation at a
    time on the event loop.
    """

    _waiter_ids = itertools.count(1)

    def __init__(self, partition: int, config: GroupConfig,
                 partition_exists: Callable[[str, int], bool],
                 topics: TopicLookup = lambda name: None) -> None:
        """``partition_exists`` and ``topics`` (name -> id and partition count) read the
        cluster's topic metadata."""
        self.partition = partition
        self.config = config
        self.partition_exists = partition_exists
        self.groups: dict[str, GroupMetadata] = {}
        self.share = ShareGroups(config.share, topics)
        # Offsets committed inside transactions, by producer id, until their marker replays.
        self.txn_offsets: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}

    # ------------------------------------------------------------------ replay

    def replay(self, key_bytes: bytes, value: bytes | None, *, loading: bool, producer_id: int = -1,
               offset: int = -1) -> None:
        """Apply one committed ``__consumer_offsets`` record (of a transaction when
        ``producer_id`` is set: held until the transaction's marker). A record that cannot
        be read (a version or record type dmq does not know, or corrupt) is logged and
        skipped, leaving the state as it was: one such record must not keep the partition's
        other groups from loading."""
        try:
            self._replay(key_bytes, value, loading=loading, producer_id=producer_id, offset=offset)
        except rec.RecordFormatError as e:
            log.warning("skipping unreadable record at offset %d of __consumer_offsets-%d: %s",
                        offset, self.partition, e)

    def _replay(self, key_bytes: bytes, value: bytes | None, *, loading: bool, producer_id: int,
                offset: int) -> None:
        """``replay``; every value is decoded before anything changes."""
        key = rec.decode_key(key_bytes)
        if isinstance(key, rec.OtherKey):
            return  # a consumer- or streams-group record of a Kafka-written log
        if isinstance(key, rec.ShareKey):
            if not loading:
                return  # written by this shard: the live share group already holds it
            if key.group in self.groups:
                log.warning("skipping a share-group record of classic group %s", key.group)
                return
            self.share.replay(key, value)
            return
        if isinstance(key, rec.OffsetKey) and producer_id >= 0:
            if value is not None:
                v = rec.decode_offset_value(value)
                self.txn_offsets.setdefault(producer_id, {}).setdefault(key.group, {})[
                    (key.topic, key.partition)] = OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata,
                                                                    v.commit_timestamp, offset,
                                                                    v.expire_timestamp)
            return
        if isinstance(key, rec.OffsetKey):
            group = self.groups.get(key.group)
            tp = (key.topic, key.partition)
            if value is None:
                if group is not None:
                    group.offsets.pop(tp, None)
                # As Kafka's coordinator: a tombstone also drops what open transactions
                # would commit for the partition (a deleted topic's offsets stay gone).
                for pending in self.txn_offsets.values():
                    pending.get(key.group, {}).pop(tp, None)
                return
            v = rec.decode_offset_value(value)
            if group is None:
                group = self.groups[key.group] = GroupMetadata(key.group)
            group.offsets[tp] = OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, offset,
                                                  v.expire_timestamp)
            return
        group = self.groups.get(key.group)
        if value is None:
            if group is not None and group.is_empty:
                if group.state != GroupState.DEAD:
                    group.transition_to(GroupState.DEAD)
                del self.groups[key.group]
            return
        if not loading:
            return  # written by this shard: the live group already holds what it says
        gv = rec.decode_group_value(value)
        if group is None:
            group = self.groups[key.group] = GroupMetadata(key.group)
        for old_id in list(group.members):
            group.remove_member(old_id)
        group.generation = gv.generation
        group.protocol_type = gv.protocol_type
        group.protocol = gv.protocol
        group.state_timestamp = gv.state_timestamp
        for mv in gv.members:
            member = MemberMetadata(mv.member_id, mv.group_instance_id, mv.client_id, mv.client_host,
                                    mv.rebalance_timeout_ms, mv.session_timeout_ms, gv.protocol_type,
                                    [(gv.protocol or "", mv.subscription)], mv.assignment)
            group.add_member(member)
        group.leader = gv.leader if gv.leader in group.members else next(iter(group.members), None)
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY

    def replay_marker(self, producer_id: int, commit: bool, *, loading: bool) -> None:
        """A transaction ended: its offsets become the groups' committed offsets, or go."""
        pending = self.txn_offsets.pop(producer_id, {})
        if not commit:
            return
        for group_id, offsets in pending.items():
            group = self.groups.get(group_id)
            if group is None:
                group = self.groups[group_id] = GroupMetadata(group_id)
            for tp, pending_offset in offsets.items():
                # A plain commit written after the transaction's record stays (Kafka's
                # replayEndTransactionMarker): compaction keeps the later record, so a
                # coordinator loading the log later serves it too.
                current = group.offsets.get(tp)
                if current is None or current.record_offset < 0 or pending_offset.record_offset < 0 \
                        or current.record_offset < pending_offset.record_offset:
                    group.offsets[tp] = pending_offset

    def on_loaded(self, now_ms: int) -> CoordinatorResult:
        """Loaded members get a full session to heartbeat to their new coordinator."""
        out = _Out()
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_heartbeat(out, group, member)
        out.timers.extend(self.share.on_loaded())
        return out.result(None)

    def on_timer(self, key: Hashable, now_ms: int) -> CoordinatorResult:
        out = _Out()
        assert isinstance(key, tuple)
        if key[0] == SESSION_TIMER:
            return self.share.on_timer(key, now_ms)
        kind, group_id = key[0], key[1]
        group = self.groups.get(group_id)
        if group is not None:
            if kind == "heartbeat":
                member = group.members.get(key[2])
                if member is not None:
                    self._expire_member(out, group, member, now_ms)
            elif kind == "rebalance":
                self._rebalance_timer(out, group, now_ms)
            elif kind == "pending":
                if key[2] in group.pending_members:
                    group.pending_members.discard(key[2])
                    self._try_complete_join(out, group, now_ms)
            elif kind == "sync":
                self._expire_pending_sync(out, group, key[2], now_ms)
        return out.result(None)

    def _expire_pending_sync(self, out: _Out, group: GroupMetadata, generation: int, now_ms: int) -> None:
        """The rebalance timeout passed since the join completed: members of that generation
        that never sent SyncGroup (a static member away when the rebalance ended, a client
        that died between its join and its sync) go, and the group rebalances without them
        (Kafka's expirePendingSync); else they would hold partitions nobody reads."""
        if group.generation != generation or group.state not in (GroupState.COMPLETING_REBALANCE,
                                                                 GroupState.STABLE):
            return
        gone = [group.members[m] for m in sorted(group.pending_sync) if m in group.members]
        group.pending_sync.clear()
        if not gone:
            return
        for m in gone:
            log.info("removing member %s of group %s: no SyncGroup within the rebalance timeout",
                     m.member_id, group.group_id)
            self._drop_member(out, group, m, ErrorCode.unknown_member_id)
        self._prepare_rebalance(out, group, "members did not sync in time")
        if group.is_empty:
            self._complete_join(out, group, now_ms)
        else:
            self._try_complete_join(out, group, now_ms)

    # ----------------------------------------------------------------- records

    def _group_record(self, group: GroupMetadata, now_ms: int,
                      assignments: dict[str, bytes] | None = None) -> Record:
        protocol = group.protocol
        members = tuple(
            rec.MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.rebalance_timeout_ms, m.session_timeout_ms,
                            m.metadata_for(protocol) if protocol else b"",
                            assignments.get(m.member_id, b"") if assignments is not None else m.assignment)
            for m in group.members.values()
        )
        group.state_timestamp = now_ms
        value = rec.GroupValue(group.protocol_type or "", group.generation, protocol, group.leader,
                               group.state_timestamp, members)
        return rec.encode_group_key(rec.GroupKey(group.group_id)), rec.encode_group_value(value)

    def _new_waiter(self, kind: str, group_id: str, member_id: str) -> Hashable:
        return (kind, group_id, member_id, next(self._waiter_ids))

    # --------------------------------------------------------------- join/sync

    def join_group(self, group_id: str, member_id: str, instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                   protocol_type: str, protocols: list[tuple[str, bytes]], require_known_member: bool,
                   now_ms: int) -> CoordinatorResult:
        out = _Out()
        response = self._join(out, group_id, member_id, instance_id, client_id, client_host,
                              session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols,
                              require_known_member, now_ms)
        return out.result(response)

    def _join(self, out: _Out, group_id: str, member_id: str, instance_id: str | None, client_id: str,
              client_host: str, session_ms: int, rebalance_ms: int, protocol_type: str,
              protocols: list[tuple[str, bytes]], require_known_member: bool,
              now_ms: int) -> JoinResult | Deferred:
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id, member_id)
        if group_id in self.share.groups:
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        if not self.config.min_session_timeout_ms <= session_ms <= self.config.max_session_timeout_ms:
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            group = self.groups[group_id] = GroupMetadata(group_id)
        if group.state == GroupState.DEAD:
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        member_args = (instance_id, client_id, client_host, rebalance_ms, session_ms, protocol_type,
                       protocols)
        if not self._accepts(group, member_id, instance_id):
            refused = group.members.get(member_id)
            if refused is not None:
                self._drop_member(out, group, refused, ErrorCode.group_max_size_reached)
                self._try_complete_join(out, group, now_ms)
            return JoinResult(ErrorCode.group_max_size_reached)
        if not member_id:
            if instance_id is not None:
                return self._join_static_unknown(out, group, *member_args, now_ms)
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member:
                group.pending_members.add(new_id)
                out.timers.append(Schedule(("pending", group_id, new_id), session_ms))
                return JoinResult(ErrorCode.member_id_required, new_id)
            return self._add_member_and_rebalance(out, group, new_id, *member_args, now_ms)
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            out.timers.append(Cancel(("pending", group_id, member_id)))
            return self._add_member_and_rebalance(out, group, member_id, *member_args, now_ms)
        # Kafka's validateMember: a static member's instance id first (FENCED_INSTANCE_ID when
        # another member id holds it: the Java client stops, a zombie must not rejoin and
        # displace the live one), then the member id.
        if instance_id is not None and group.static_members.get(instance_id) not in (None, member_id):
            return JoinResult(ErrorCode.fenced_instance_id, member_id)
        member = group.members.get(member_id)
        if member is None or (instance_id is not None and instance_id not in group.static_members):
            return JoinResult(ErrorCode.unknown_member_id, member_id)
        return self._update_member_and_rebalance(out, group, member, protocols, session_ms, rebalance_ms,
                                                 now_ms)

    def _accepts(self, group: GroupMetadata, member_id: str, instance_id: str | None) -> bool:
        """group.max.size for any join, new member or not (Kafka's acceptJoiningMember): while
        preparing a rebalance a member already waiting is in and others count against the
        members waiting (the group may be above a lowered limit); else a member is in and a
        new one counts against the members. Pending member ids (MEMBER_ID_REQUIRED) and
        static members are new until they are members."""
        limit = self.config.max_group_size
        member = group.members.get(member_id) if member_id else None
        if group.state in (GroupState.EMPTY, GroupState.DEAD) or instance_id in group.static_members:
            return True  # (a static member restarting takes its own place: KAFKA-20601)
        if group.state == GroupState.PREPARING_REBALANCE:
            return (member is not None and member.join_waiter is not None) or \
                sum(1 for m in group.members.values() if m.join_waiter is not None) < limit
        return member is not None or len(group.members) < limit

    def _join_static_unknown(self, out: _Out, group: GroupMetadata, instance_id: str | None,
                             client_id: str, client_host: str, rebalance_ms: int, session_ms: int,
                             protocol_type: str, protocols: list[tuple[str, bytes]],
                             now_ms: int) -> JoinResult | Deferred:
        assert instance_id is not None
        old_id = group.static_members.get(instance_id)
        new_id = f"{instance_id}-{uuid.uuid4()}"
        if old_id is None:
            return self._add_member_and_rebalance(out, group, new_id, instance_id, client_id, client_host,
                                                  rebalance_ms, session_ms, protocol_type, protocols,
                                                  now_ms)
        old = group.members[old_id]
        was_leader = group.leader is None or group.leader == old_id
        previous_leader = group.leader or ""
        # Replace the old incarnation: it is fenced from now on.
        self._drop_member(out, group, old, ErrorCode.fenced_instance_id)
        member = MemberMetadata(new_id, instance_id, client_id, client_host, rebalance_ms, session_ms,
                                protocol_type, protocols, old.assignment)
        group.add_member(member)
        if was_leader:
            group.leader = new_id
        self._schedule_heartbeat(out, group, member)
        if group.state == GroupState.STABLE and group.select_protocol() == group.protocol:
            # A static member restarted: same assignment, no rebalance (KIP-345), whatever its
            # subscription bytes (a restarted consumer's name no owned partitions and
            # generation -1), unless the group's protocol would change (Kafka's
            # replaceStaticMember); answered once the group record naming its new member
            # id is committed.
            out.records.append(self._group_record(group, now_ms))
            result = self._join_result(group, member)
            if was_leader:
                result.skip_assignment, result.previous_leader = True, previous_leader
            return result
        return self._update_member_and_rebalance(out, group, member, protocols, session_ms, rebalance_ms,
                                                 now_ms, force=True)

    def _add_member_and_rebalance(self, out: _Out, group: GroupMetadata, member_id: str,
                                  instance_id: str | None, client_id: str, client_host: str,
                                  rebalance_ms: int, session_ms: int, protocol_type: str,
                                  protocols: list[tuple[str, bytes]], now_ms: int) -> Deferred:
        member = MemberMetadata(member_id, instance_id, client_id, client_host, rebalance_ms, session_ms,
                                protocol_type, protocols)
        waiter = member.join_waiter = self._new_waiter("join", group.group_id, member_id)
        group.add_member(member)
        group.new_member_added = True
        self._schedule_heartbeat(out, group, member)
        self._prepare_rebalance(out, group, f"member {member_id} joined")
        self._try_complete_join(out, group, now_ms)
        return Deferred(waiter)

    def _update_member_and_rebalance(self, out: _Out, group: GroupMetadata, member: MemberMetadata,
                                     protocols: list[tuple[str, bytes]], session_ms: int,
                                     rebalance_ms: int, now_ms: int,
                                     force: bool = False) -> JoinResult | Deferred:
        changed = not member.matches(protocols)
        member.protocols = protocols
        member.session_timeout_ms = session_ms
        member.rebalance_timeout_ms = rebalance_ms
        self._schedule_heartbeat(out, group, member)
        if not force and not changed and group.state == GroupState.COMPLETING_REBALANCE:
            return self._join_result(group, member)
        if not force and not changed and group.state == GroupState.STABLE and member.member_id != group.leader:
            return self._join_result(group, member)
        if member.join_waiter is not None:
            out.replies.append((member.join_waiter, JoinResult(ErrorCode.unknown_member_id, member.member_id)))
        waiter = member.join_waiter = self._new_waiter("join", group.group_id, member.member_id)
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(out, group, f"member {member.member_id} rejoined")
        self._try_complete_join(out, group, now_ms)
        return Deferred(waiter)

    def _join_result(self, group: GroupMetadata, member: MemberMetadata) -> JoinResult:
        members = []
        if member.member_id == group.leader and group.protocol is not None:
            members = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol))
                       for m in group.members.values()]
        return JoinResult(ErrorCode.none, member.member_id, group.generation, group.protocol_type,
                          group.protocol, group.leader or "", members)

    def _prepare_rebalance(self, out: _Out, group: GroupMetadata, reason: str) -> None:
        if group.state == GroupState.PREPARING_REBALANCE:
            return
        if group.state == GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
            self._answer_syncs(out, group, lambda m: SyncResult(ErrorCode.rebalance_in_progress))
        initial = group.state == GroupState.EMPTY
        group.pending_sync.clear()  # the next generation's join starts over
        group.transition_to(GroupState.PREPARING_REBALANCE)
        log.info("preparing to rebalance group %s (generation %d): %s", group.group_id,
                 group.generation, reason)
        if initial and self.config.initial_rebalance_delay_ms > 0:
            delay = self.config.initial_rebalance_delay_ms
            budget = max((m.rebalance_timeout_ms for m in group.members.values()), default=delay)
            group.new_member_added = False
            group.in_initial_delay = True
            group.initial_delay_remaining_ms = budget - delay
            out.timers.append(Schedule(("rebalance", group.group_id), delay))
        else:
            group.in_initial_delay = False
            timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
            out.timers.append(Schedule(("rebalance", group.group_id), timeout))

    def _rebalance_timer(self, out: _Out, group: GroupMetadata, now_ms: int) -> None:
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        if group.in_initial_delay:
            # The first rebalance of an empty group waits while new members keep arriving.
            remaining = group.initial_delay_remaining_ms
            if group.new_member_added and remaining > 0:
                group.new_member_added = False
                step = min(self.config.initial_rebalance_delay_ms, remaining)
                group.initial_delay_remaining_ms = remaining - step
                out.timers.append(Schedule(("rebalance", group.group_id), step))
                return
            group.in_initial_delay = False
        self._complete_join(out, group, now_ms)

    def _try_complete_join(self, out: _Out, group: GroupMetadata, now_ms: int) -> None:
        if group.state != GroupState.PREPARING_REBALANCE or not group.all_members_joined():
            return
        if group.in_initial_delay:
            return  # the first rebalance keeps waiting for more members to arrive
        self._complete_join(out, group, now_ms)

    def _complete_join(self, out: _Out, group: GroupMetadata, now_ms: int) -> None:
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        out.timers.append(Cancel(("rebalance", group.group_id)))
        group.in_initial_delay = False
        # Dynamic members that did not rejoin go; static ones keep their place until their
        # session times out (KIP-345, Kafka's completeClassicGroupJoin).
        for m in [m for m in group.members.values() if m.join_waiter is None and m.group_instance_id is None]:
            log.info("removing member %s of group %s: it did not rejoin in time", m.member_id, group.group_id)
            self._drop_member(out, group, m, ErrorCode.unknown_member_id)
        if group.members and not any(m.join_waiter is not None for m in group.members.values()):
            # Nobody rejoined (static members only, all away): wait another rebalance timeout
            # for them or for their sessions to end.
            log.info("group %s: no member rejoined; waiting another rebalance timeout", group.group_id)
            timeout = max(m.rebalance_timeout_ms for m in group.members.values())
            out.timers.append(Schedule(("rebalance", group.group_id), timeout))
            return
        leader = group.members.get(group.leader) if group.leader is not None else None
        if leader is not None and leader.join_waiter is None:
            # The leader is a static member that did not rejoin: one that did leads
            # (Kafka's maybeElectNewJoinedLeader).
            group.leader = next(m.member_id for m in group.members.values() if m.join_waiter is not None)
        for pending in group.pending_members:
            out.timers.append(Cancel(("pending", group.group_id, pending)))
        group.pending_members.clear()
        group.generation += 1
        if group.is_empty:
            group.protocol = None
            group.protocol_type = None if not group.offsets else group.protocol_type
            group.transition_to(GroupState.EMPTY)
            out.records.append(self._group_record(group, now_ms))
            log.info("group %s is empty at generation %d", group.group_id, group.generation)
            return
        group.protocol = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.transition_to(GroupState.COMPLETING_REBALANCE)
        log.info("group %s generation %d: %d members, protocol %s, leader %s", group.group_id,
                 group.generation, len(group.members), group.protocol, group.leader)
        group.pending_sync = set(group.members)
        out.timers.append(Schedule(("sync", group.group_id, group.generation),
                                   max(m.rebalance_timeout_ms for m in group.members.values())))
        for m in group.members.values():
            waiter, m.join_waiter = m.join_waiter, None
            self._schedule_heartbeat(out, group, m)
            if waiter is not None:
                out.replies.append((waiter, self._join_result(group, m)))

    def sync_group(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol: str | None, assignments: dict[str, bytes],
                   now_ms: int) -> CoordinatorResult:
        out = _Out()
        if not group_id:
            return out.result(SyncResult(ErrorCode.invalid_group_id))
        group = self.groups.get(group_id)
        if group is None:
            return out.result(SyncResult(ErrorCode.unknown_member_id))
        if instance_id is not None and group.static_members.get(instance_id) not in (None, member_id):
            return out.result(SyncResult(ErrorCode.fenced_instance_id))  # before the member id, as Kafka
        if member_id not in group.members or (instance_id is not None and instance_id not in group.static_members):
            return out.result(SyncResult(ErrorCode.unknown_member_id))
        member = group.members[member_id]
        if generation != group.generation:
            return out.result(SyncResult(ErrorCode.illegal_generation))
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol is not None and protocol != group.protocol):
            return out.result(SyncResult(ErrorCode.inconsistent_group_protocol))
        if group.state == GroupState.PREPARING_REBALANCE:
            return out.result(SyncResult(ErrorCode.rebalance_in_progress))
        self._schedule_heartbeat(out, group, member)
        group.pending_sync.discard(member_id)
        if group.state == GroupState.STABLE:
            return out.result(SyncResult(ErrorCode.none, member.assignment, group.protocol_type,
                                         group.protocol))
        if group.state != GroupState.COMPLETING_REBALANCE:
            return out.result(SyncResult(ErrorCode.unknown_member_id))
        if member.sync_waiter is not None:
            out.replies.append((member.sync_waiter, SyncResult(ErrorCode.unknown_member_id)))
        waiter = member.sync_waiter = self._new_waiter("sync", group_id, member_id)
        if member_id != group.leader:
            return out.result(Deferred(waiter))
        # The leader's assignment: every member learns it once the group record holding it
        # is committed, so a new coordinator after a failover knows the same generation.
        wanted = {m: assignments.get(m, b"") for m in group.members}
        out.records.append(self._group_record(group, now_ms, wanted))
        gen = group.generation

        def committed(shard: GroupShard, now: int) -> CoordinatorResult:
            done = _Out()
            g = shard.groups.get(group_id)
            if g is not None and g.generation == gen and g.state == GroupState.COMPLETING_REBALANCE:
                for m in g.members.values():
                    m.assignment = wanted.get(m.member_id, b"")
                g.transition_to(GroupState.STABLE)
                shard._answer_syncs(done, g, lambda m: SyncResult(ErrorCode.none, m.assignment,
                                                                  g.protocol_type, g.protocol))
            return done.result(None)

        def failed(shard: GroupShard, error: ErrorCode, now: int) -> CoordinatorResult:
            done = _Out()
            g = shard.groups.get(group_id)
            if g is not None and g.generation == gen and g.state == GroupState.COMPLETING_REBALANCE:
                for m in g.members.values():
                    m.assignment = b""
                shard._answer_syncs(done, g, lambda m: SyncResult(error))
                shard._prepare_rebalance(done, g, "storing the assignment failed")
            return done.result(None)

        return out.result(Deferred(waiter), committed=committed, failed=failed)

    @staticmethod
    def _answer_syncs(out: _Out, group: GroupMetadata, make: Callable[[MemberMetadata], SyncResult]) -> None:
        for m in group.members.values():
            if m.sync_waiter is not None:
                out.replies.append((m.sync_waiter, make(m)))
            m.sync_waiter = None

    # -------------------------------------------------------- heartbeat/leave

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                  now_ms: int) -> CoordinatorResult:
        out = _Out()
        group = self.groups.get(group_id)
        if group is None:
            return out.result(ErrorCode.unknown_member_id)
        member = group.members.get(member_id)
        if instance_id is not None and group.static_members.get(instance_id) not in (None, member_id):
            return out.result(ErrorCode.fenced_instance_id)
        if member is None:
            return out.result(ErrorCode.unknown_member_id)
        if group.state == GroupState.DEAD:
            return out.result(ErrorCode.coordinator_not_available)
        if generation != group.generation:
            return out.result(ErrorCode.illegal_generation)
        self._schedule_heartbeat(out, group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            return out.result(ErrorCode.rebalance_in_progress)
        return out.result(ErrorCode.none)

    def _schedule_heartbeat(self, out: _Out, group: GroupMetadata, member: MemberMetadata) -> None:
        out.timers.append(Schedule(_heartbeat_key(group.group_id, member.member_id),
                                   member.session_timeout_ms))

    def _expire_member(self, out: _Out, group: GroupMetadata, member: MemberMetadata, now_ms: int) -> None:
        if member.join_waiter is not None or member.sync_waiter is not None:
            self._schedule_heartbeat(out, group, member)  # a parked request counts as alive
            return
        log.info("member %s of group %s missed its session timeout; removing it", member.member_id,
                 group.group_id)
        self._remove_member(out, group, member, now_ms)

    def _drop_member(self, out: _Out, group: GroupMetadata, member: MemberMetadata,
                     error: ErrorCode) -> None:
        """Take a member out of the group; its parked requests are answered ``error``."""
        group.remove_member(member.member_id)
        group.pending_sync.discard(member.member_id)
        out.timers.append(Cancel(_heartbeat_key(group.group_id, member.member_id)))
        if member.join_waiter is not None:
            out.replies.append((member.join_waiter, JoinResult(error, member.member_id)))
            member.join_waiter = None
        if member.sync_waiter is not None:
            out.replies.append((member.sync_waiter, SyncResult(error)))
            member.sync_waiter = None

    def _remove_member(self, out: _Out, group: GroupMetadata, member: MemberMetadata, now_ms: int) -> None:
        self._drop_member(out, group, member, ErrorCode.unknown_member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(out, group, f"member {member.member_id} left")
        if group.state == GroupState.PREPARING_REBALANCE:
            if group.is_empty:
                self._complete_join(out, group, now_ms)
            else:
                self._try_complete_join(out, group, now_ms)

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]],
                    now_ms: int) -> CoordinatorResult:
        out = _Out()
        group = self.groups.get(group_id)
        if group is None:
            return out.result((ErrorCode.unknown_member_id, [ErrorCode.unknown_member_id] * len(members)))
        results = []
        for member_id, instance_id in members:
            if instance_id is not None:
                current = group.static_members.get(instance_id)
                if current is None:
                    results.append(ErrorCode.unknown_member_id)
                    continue
                if member_id and member_id != current:
                    results.append(ErrorCode.fenced_instance_id)
                    continue
                member_id = current
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                out.timers.append(Cancel(("pending", group_id, member_id)))
                results.append(ErrorCode.none)
                self._try_complete_join(out, group, now_ms)
                continue
            member = group.members.get(member_id)
            if member is None:
                results.append(ErrorCode.unknown_member_id)
                continue
            log.info("member %s left group %s", member_id, group_id)
            self._remove_member(out, group, member, now_ms)
            results.append(ErrorCode.none)
        return out.result((ErrorCode.none, results))

    # ----------------------------------------------------------------- offsets

    def commit_offsets(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                       offsets: list[tuple[str, int, int, int, str | None]],
                       now_ms: int, *, unknown_group: ErrorCode = ErrorCode.illegal_generation,
                       retention_ms: int = -1) -> CoordinatorResult:
        """Commit ``(topic, partition, offset, leader epoch, metadata)``; one error per entry.
        ``unknown_group``: the answer to a commit of a generation to a group that does not
        exist (OffsetCommit v9+ says GROUP_ID_NOT_FOUND, earlier versions ILLEGAL_GENERATION).
        ``retention_ms`` (OffsetCommit v2-4; -1: none): the offsets expire that long after
        the commit rather than by offsets.retention.minutes (Kafka's expireTimestampMs).

        The offsets are readable once their records are committed (replayed)."""
        out = _Out()

        def all_(error: ErrorCode) -> CoordinatorResult:
            return out.result([error] * len(offsets))

        if group_id in self.share.groups:
            return all_(ErrorCode.group_id_not_found)  # "not a consumer group"
        group = self.groups.get(group_id)
        if group is None:
            # A commit from outside the group protocol (manual assignment, admin tools)
            # makes a simple group, whatever member id it names (Kafka's validateOffsetCommit).
            if generation >= 0:
                return all_(unknown_group)
        else:
            error = _offset_commit_error(group, generation, member_id, instance_id, transactional=False)
            if error is not None:
                return all_(error)
            member = group.members.get(member_id)
            if member is not None and generation == group.generation:
                self._schedule_heartbeat(out, group, member)
        result = self._offset_records(group_id, offsets, now_ms,
                                      now_ms + retention_ms if retention_ms >= 0 else -1)
        result.timers.extend(out.timers)
        return result

    def txn_offset_commit(self, transactional_id: str, group_id: str, producer_id: int, producer_epoch: int,
                          generation: int, member_id: str, instance_id: str | None,
                          offsets: list[tuple[str, int, int, int, str | None]], now_ms: int) -> CoordinatorResult:
        """TxnOffsetCommit: offsets written in the producer's transaction, the groups'
        committed offsets only when its COMMIT marker replays (Kafka's pending offsets)."""
        def all_(error: ErrorCode) -> CoordinatorResult:
            return CoordinatorResult([error] * len(offsets))

        if not group_id:
            return all_(ErrorCode.invalid_group_id)
        if group_id in self.share.groups:
            return all_(ErrorCode.group_id_not_found)
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                return all_(ErrorCode.illegal_generation)
        else:
            # A member of the group commits: fenced like a plain commit (KIP-447).
            error = _offset_commit_error(group, generation, member_id, instance_id, transactional=True)
            if error is not None:
                return all_(error)
        result = self._offset_records(group_id, offsets, now_ms)
        result.producer = (producer_id, producer_epoch)
        return result

    def _offset_records(self, group_id: str, offsets: list[tuple[str, int, int, int, str | None]],
                        now_ms: int, expire_ms: int = -1) -> CoordinatorResult:
        out = _Out()
        errors: list[ErrorCode] = []
        for topic, partition, offset, epoch, metadata in offsets:
            if metadata is not None and len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                errors.append(ErrorCode.offset_metadata_too_large)
            elif not self.partition_exists(topic, partition):
                errors.append(ErrorCode.unknown_topic_or_partition)
            else:
                errors.append(ErrorCode.none)
                out.records.append((rec.encode_offset_key(rec.OffsetKey(group_id, topic, partition)),
                                    rec.encode_offset_value(rec.OffsetValue(offset, epoch, metadata or "",
                                                                            now_ms, expire_ms))))
        return out.result(errors)

    def complete_transaction(self, producer_id: int, producer_epoch: int, commit: bool,
                             coordinator_epoch: int, now_ms: int) -> CoordinatorResult:
        """WriteTxnMarkers for this partition: the marker goes through the runtime, so it
        replays in order with the transaction's offsets."""
        return CoordinatorResult(ErrorCode.none, marker=EndMarker(producer_id, producer_epoch, commit,
                                                                  coordinator_epoch))

    def unstable_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions of the group with offsets in open transactions (require_stable)."""
        return {tp for pending in self.txn_offsets.values() for tp in pending.get(group_id, {})}

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> tuple[ErrorCode, dict[tuple[str, int], OffsetAndMetadata | None]]:
        if group_id in self.share.groups:
            return ErrorCode.group_id_not_found, {}
        group = self.groups.get(group_id)
        committed = group.offsets if group is not None else {}
        if partitions is None:
            return ErrorCode.none, dict(sorted(committed.items()))
        return ErrorCode.none, {tp: committed.get(tp) for tp in partitions}

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]],
                       now_ms: int) -> CoordinatorResult:
        out = _Out()
        group = self.groups.get(group_id)
        if group is None:  # a share group's id too: it has no offsets to delete
            return out.result((ErrorCode.group_id_not_found, {}))
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE) \
                and group.protocol_type != "consumer":
            # Kafka's validateOffsetDelete: which topics a group of another protocol type
            # (Connect's, say) reads is unknown; only an empty one loses offsets.
            return out.result((ErrorCode.non_empty_group, {}))
        subscribed = group.subscribed_topics() if not group.is_empty else set()
        results: dict[tuple[str, int], ErrorCode] = {}
        for topic, partition in partitions:
            if subscribed is None or topic in subscribed:
                results[(topic, partition)] = ErrorCode.group_subscribed_to_topic
                continue
            results[(topic, partition)] = ErrorCode.none
            if (topic, partition) in group.offsets or (topic, partition) in self.unstable_offsets(group_id):
                out.records.append((rec.encode_offset_key(rec.OffsetKey(group_id, topic, partition)), None))
        return out.result((ErrorCode.none, results))

    def delete_group(self, group_id: str, now_ms: int) -> CoordinatorResult:
        out = _Out()
        group = self.groups.get(group_id)
        if group_id in self.share.groups:
            return self.share.delete(group_id)
        if group is None:
            return out.result(ErrorCode.group_id_not_found)
        if not group.is_empty:
            return out.result(ErrorCode.non_empty_group)
        # Offsets open transactions would commit go too (Kafka's deleteAllOffsets).
        out.records.extend((rec.encode_offset_key(rec.OffsetKey(group_id, t, p)), None)
                           for t, p in sorted(set(group.offsets) | self.unstable_offsets(group_id)))
        out.records.append((rec.encode_group_key(rec.GroupKey(group_id)), None))
        return out.result(ErrorCode.none)

    def expire_offsets(self, now_ms: int) -> CoordinatorResult:
        """offsets.retention.minutes (Kafka's offsetExpirationCondition): of a group without
        members, every offset once the retention has passed since it became empty (and
        since its commit), then the group; of a Stable consumer group whose subscriptions
        are known, the offsets of topics it no longer subscribes to, by commit time."""
        out = _Out()
        for group in self.groups.values():
            if group.pending_members:
                continue  # a JoinGroup v4+ between its two requests
            empty = group.is_empty and group.state == GroupState.EMPTY
            subscribed: set[str] = set()
            if not empty:
                known = group.subscribed_topics() if group.state == GroupState.STABLE else None
                if known is None:
                    continue  # rebalancing, another protocol type, or subscriptions unknown
                subscribed = known
            # As Kafka: an offset an open transaction will replace does not expire (its
            # tombstone would drop the pending one too), nor does the group meanwhile.
            unstable = self.unstable_offsets(group.group_id)
            since = group.state_timestamp if empty else -1
            expired = [(rec.encode_offset_key(rec.OffsetKey(group.group_id, topic, partition)), None)
                       for (topic, partition), om in group.offsets.items()
                       if topic not in subscribed and (topic, partition) not in unstable
                       and self._expired(om, since, now_ms)]
            out.records.extend(expired)
            if empty and len(expired) == len(group.offsets) and not unstable:
                out.records.append((rec.encode_group_key(rec.GroupKey(group.group_id)), None))
        return out.result(len(out.records))

    def _expired(self, om: OffsetAndMetadata, since: int, now_ms: int) -> bool:
        """Kafka's isOffsetExpired: at the commit's own expire timestamp if it set one, else
        once offsets.retention.minutes have passed since the later of its commit and
        ``since`` (when its group became empty)."""
        if om.expire_timestamp >= 0:
            return now_ms >= om.expire_timestamp
        return now_ms - max(om.commit_timestamp, since) > self.config.offsets_retention_ms

    def delete_topic_offsets(self, topics: Collection[str], noticed_ms: int, limit: int,
                             now_ms: int) -> CoordinatorResult:
        """Topics were deleted (Kafka's ``onPartitionsDeleted``): tombstones for every
        group's committed offsets of their partitions, and for those open transactions
        would commit, committed no later than ``noticed_ms`` (when this broker saw the
        deletion: a topic created again under the same name since keeps its own); an
        empty group left without offsets goes too. At most about ``limit`` records (whole
        groups), so a large deletion is written in bounded batches. The result is
        (records, whether more remain)."""
        out = _Out()
        doomed = set(topics)
        more = False
        for group in self.groups.values():
            pending = {tp: om for txn in self.txn_offsets.values()
                       for tp, om in txn.get(group.group_id, {}).items()}
            gone = {tp for offsets in (group.offsets, pending) for tp, om in offsets.items()
                    if tp[0] in doomed and om.commit_timestamp <= noticed_ms}
            if not gone:
                continue
            if out.records and len(out.records) + len(gone) > limit:
                more = True
                break
            out.records.extend((rec.encode_offset_key(rec.OffsetKey(group.group_id, *tp)), None)
                               for tp in sorted(gone))
            if (group.state == GroupState.EMPTY and group.is_empty and set(group.offsets) <= gone
                    and set(pending) <= gone):
                out.records.append((rec.encode_group_key(rec.GroupKey(group.group_id)), None))
        return out.result((len(out.records), more))

    # ------------------------------------------------------------------- admin

    def list_groups(self, states: Iterable[str] = ()) -> list[GroupMetadata]:
        wanted = {s.lower() for s in states}
        return [g for g in self.groups.values()
                if g.state != GroupState.DEAD and (not wanted or g.state.value.lower() in wanted)]

    def listed_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[ListedGroup]:
        """ListGroups: classic and share groups, filtered by state and by type (both
        case-insensitive; an unknown type matches nothing, as in Kafka)."""
        wanted_types = {t.strip().lower() for t in types}
        listed: list[ListedGroup] = []
        if not wanted_types or "classic" in wanted_types:
            listed.extend(ListedGroup(g.group_id, g.protocol_type or "", g.state.value, "classic")
                          for g in self.list_groups(states))
        if not wanted_types or "share" in wanted_types:
            wanted_states = {s.strip().lower() for s in states}
            listed.extend(ListedGroup(g.group_id, "share", g.state, "share")
                          for g in self.share.groups.values()
                          if not wanted_states or g.state.lower() in wanted_states)
        return listed

    # ------------------------------------------------------------ share groups

    def share_group_heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                              subscribed_topic_names: list[str] | None, client_id: str, client_host: str,
                              now_ms: int) -> CoordinatorResult:
        """ShareGroupHeartbeat (KIP-932): join (epoch 0), heartbeat, leave (epoch -1).
        The response is a ``ShareHeartbeatResult``."""
        invalid = validate_heartbeat(group_id, member_id, member_epoch, rack_id, subscribed_topic_names)
        if invalid is not None:
            return CoordinatorResult(ShareHeartbeatResult(ErrorCode.invalid_request, invalid))
        if group_id in self.groups:
            return CoordinatorResult(ShareHeartbeatResult(ErrorCode.group_id_not_found,
                                                          f"Group {group_id} is not a share group."))
        return self.share.heartbeat(group_id, member_id, member_epoch, rack_id, subscribed_topic_names,
                                    client_id, client_host, now_ms)

    def share_group_describe(self, group_ids: Iterable[str]) -> list[DescribedShareGroup]:
        """ShareGroupDescribe: a snapshot of each group; GROUP_ID_NOT_FOUND for an id that
        names no group, or a classic group."""
        described = []
        for group_id in group_ids:
            if group_id in self.groups:
                described.append(DescribedShareGroup(group_id, ErrorCode.group_id_not_found,
                                                     f"Group {group_id} is not a share group."))
            else:
                described.append(self.share.describe(group_id))
        return described

    def share_offsets_target(self, group_id: str) -> tuple[ErrorCode, dict[uuid.UUID, InitializedTopic]]:
        """The share group's initialized partitions (DescribeShareGroupOffsets of all);
        GROUP_ID_NOT_FOUND for an unknown id or a classic group."""
        if group_id in self.groups:
            return ErrorCode.group_id_not_found, {}
        return self.share.offsets_target(group_id)

    def share_offsets_changed(self, group_id: str, add: dict[uuid.UUID, InitializedTopic],
                              remove: frozenset[uuid.UUID], now_ms: int) -> CoordinatorResult:
        """Alter/DeleteShareGroupOffsets' part on the group (``ShareGroups.offsets_changed``)."""
        if group_id in self.groups:
            return CoordinatorResult(ErrorCode.group_id_not_found)
        return self.share.offsets_changed(group_id, add, remove)

    def share_group(self, group_id: str) -> ShareGroup | None:
        """The live share group (read only: it changes only through this shard's operations)."""
        return self.share.groups.get(group_id)

    def share_initialized_partitions(self, group_id: str) -> frozenset[tuple[str, int]]:
        """The ``(topic, partition)`` pairs whose share state the group initialized (record 15)."""
        group = self.share.groups.get(group_id)
        return group.initialized_partitions() if group is not None else frozenset()

    def share_group_members(self, group_id: str) -> dict[str, ShareMember]:
        """The group's members by id (a copy of the map; the members are live)."""
        group = self.share.groups.get(group_id)
        return dict(group.members) if group is not None else {}
