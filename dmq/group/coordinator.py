"""GroupCoordinator: Kafka's classic consumer group protocol and committed offsets.

Durable state lives in ``__consumer_offsets``: every offset commit, group
metadata change and deletion is written there as records (``records.py``)
and only then applied, by the same ``replay()`` that loads a partition after a
restart. Membership during a rebalance (who has rejoined, pending syncs,
session timers) is in memory, as in Kafka.

JoinGroup and SyncGroup responses are delayed operations: a joining member
waits on a future until every known member has rejoined or the rebalance
timeout passes (the first rebalance of an empty group also waits
``group.initial.rebalance.delay.ms`` for more members); sync waits for the
leader's assignment. Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.errors import ErrorCode

from dmq.group import records as rec
from dmq.group.metadata import (
    GroupMetadata,
    GroupState,
    MemberMetadata,
    OffsetAndMetadata,
)

log = logging.getLogger("dmq.group")



class GroupLog(Protocol):
    """Where the coordinator writes and reads its records (the internal topic)."""

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> ErrorCode: ...

    def read(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]: ...


@dataclass(frozen=True, slots=True)
class GroupConfig:
    num_partitions: int = 50
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    max_group_size: int = 2**31 - 1


@dataclass(slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol: str | None = None


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    def __init__(self, config: GroupConfig, group_log: GroupLog,
                 partition_exists: Callable[[str, int], bool]) -> None:
        self.config = config
        self.log = group_log
        self.partition_exists = partition_exists
        self.groups: dict[str, GroupMetadata] = {}
        # The __consumer_offsets partitions this broker leads; None: all (a single broker).
        self.owned_partitions: set[int] | None = None

    def owns(self, group_id: str) -> bool:
        return self.owned_partitions is None or self.partition_for(group_id) in self.owned_partitions

    def unload_partition(self, partition: int) -> int:
        """Leadership of ``partition`` moved away: drop its groups; waiting members retry elsewhere."""
        dropped = 0
        for group_id, group in list(self.groups.items()):
            if self.partition_for(group_id) != partition:
                continue
            for member in group.members.values():
                if member.heartbeat_timer is not None:
                    member.heartbeat_timer.cancel()
                if member.join_future is not None and not member.join_future.done():
                    member.join_future.set_result(JoinResult(ErrorCode.not_coordinator, member.member_id))
                if member.sync_future is not None and not member.sync_future.done():
                    member.sync_future.set_result(SyncResult(ErrorCode.not_coordinator))
            del self.groups[group_id]
            dropped += 1
        return dropped

    # ----------------------------------------------------------------- records

    def partition_for(self, group_id: str) -> int:
        return rec.partition_for(group_id, self.config.num_partitions)

    def _write(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        """Append records for a group, then apply them: the one way state changes."""
        error = self.log.append(self.partition_for(group_id), records)
        if error in (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition):
            return ErrorCode.not_coordinator
        if error != ErrorCode.none:
            log.error("writing %d records of group %s failed: %s", len(records), group_id, error.name)
            return ErrorCode.coordinator_not_available
        for key, value in records:
            self.replay(key, value, live=True)
        return ErrorCode.none

    def replay(self, key_bytes: bytes, value: bytes | None, live: bool = False) -> None:
        """Apply one ``__consumer_offsets`` record to the in-memory state."""
        try:
            key = rec.decode_key(key_bytes)
        except rec.RecordFormatError as e:
            log.warning("skipping unreadable __consumer_offsets key: %s", e)
            return
        if isinstance(key, rec.OffsetKey):
            group = self.groups.get(key.group)
            tp = (key.topic, key.partition)
            if value is None:
                if group is not None:
                    group.offsets.pop(tp, None)
                return
            if group is None:
                group = self.groups[key.group] = GroupMetadata(key.group)
            v = rec.decode_offset_value(value)
            group.offsets[tp] = OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp)
            return
        group = self.groups.get(key.group)
        if value is None:
            if group is not None and group.is_empty:
                if group.state != GroupState.DEAD:
                    group.transition_to(GroupState.DEAD)
                del self.groups[key.group]
            return
        if live:
            return  # the live group already holds what this record says
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

    def load_partition(self, partition: int) -> int:
        """Replay one ``__consumer_offsets`` partition (startup); returns records read."""
        count = 0
        for key, value in self.log.read(partition):
            self.replay(key, value)
            count += 1
        for group in self.groups.values():
            if self.partition_for(group.group_id) == partition:
                for member in group.members.values():
                    self._schedule_heartbeat(group, member)
        return count

    def _group_record(self, group: GroupMetadata) -> tuple[bytes, bytes]:
        protocol = group.protocol
        members = tuple(
            rec.MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.rebalance_timeout_ms, m.session_timeout_ms,
                            m.metadata_for(protocol) if protocol else b"", m.assignment)
            for m in group.members.values()
        )
        value = rec.GroupValue(group.protocol_type or "", group.generation, protocol, group.leader,
                               group.state_timestamp, members)
        return rec.encode_group_key(rec.GroupKey(group.group_id)), rec.encode_group_value(value)

    def _store_group(self, group: GroupMetadata) -> ErrorCode:
        group.state_timestamp = now_ms()
        return self._write(group.group_id, [self._group_record(group)])

    # --------------------------------------------------------------- join/sync

    async def join_group(self, group_id: str, member_id: str, instance_id: str | None,
                         client_id: str, client_host: str, session_timeout_ms: int,
                         rebalance_timeout_ms: int, protocol_type: str,
                         protocols: list[tuple[str, bytes]], require_known_member: bool) -> JoinResult:
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id, member_id)
        if not self.owns(group_id):
            return JoinResult(ErrorCode.not_coordinator, member_id)
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            group = self.groups[group_id] = GroupMetadata(group_id)
        if group.state == GroupState.DEAD:
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        names = [name for name, _ in protocols]
        if not group.supports_protocols(protocol_type, names):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        member_args = (instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                       protocol_type, protocols)
        if not member_id:
            if instance_id is not None:
                return await self._join_static_unknown(
                    group, instance_id, client_id, client_host, rebalance_timeout_ms,
                    session_timeout_ms, protocol_type, protocols)
            if len(group.members) >= self.config.max_group_size:
                return JoinResult(ErrorCode.group_max_size_reached)
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member:
                group.pending_members.add(new_id)
                loop = asyncio.get_running_loop()
                loop.call_later(session_timeout_ms / 1000, self._expire_pending, group, new_id)
                return JoinResult(ErrorCode.member_id_required, new_id)
            return await self._add_member_and_rebalance(group, new_id, *member_args)
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            return await self._add_member_and_rebalance(group, member_id, *member_args)
        member = group.members.get(member_id)
        if member is None:
            return JoinResult(ErrorCode.unknown_member_id, member_id)
        if instance_id is not None and group.static_members.get(instance_id) != member_id:
            return JoinResult(ErrorCode.fenced_instance_id, member_id)
        return await self._update_member_and_rebalance(group, member, protocols, session_timeout_ms,
                                                       rebalance_timeout_ms)

    async def _join_static_unknown(self, group: GroupMetadata, instance_id: str, client_id: str,
                                   client_host: str, rebalance_ms: int, session_ms: int,
                                   protocol_type: str, protocols: list[tuple[str, bytes]]) -> JoinResult:
        old_id = group.static_members.get(instance_id)
        new_id = f"{instance_id}-{uuid.uuid4()}"
        if old_id is None:
            return await self._add_member_and_rebalance(group, new_id, instance_id, client_id, client_host,
                                                        rebalance_ms, session_ms, protocol_type, protocols)
        old = group.members[old_id]
        # Replace the old incarnation: it is fenced from now on.
        group.remove_member(old_id)
        if old.join_future is not None and not old.join_future.done():
            old.join_future.set_result(JoinResult(ErrorCode.fenced_instance_id, old_id))
        if old.sync_future is not None and not old.sync_future.done():
            old.sync_future.set_result(SyncResult(ErrorCode.fenced_instance_id))
        was_leader = group.leader is None or group.leader == old_id
        member = MemberMetadata(new_id, instance_id, client_id, client_host, rebalance_ms, session_ms,
                                protocol_type, protocols, old.assignment)
        group.add_member(member)
        if was_leader:
            group.leader = new_id
        self._schedule_heartbeat(group, member)
        if group.state == GroupState.STABLE and old.matches(protocols):
            # A static member restarted: same assignment, no rebalance (KIP-345).
            self._store_group(group)
            return self._join_result(group, member)
        return await self._update_member_and_rebalance(group, member, protocols, session_ms, rebalance_ms,
                                                       force=True)

    async def _add_member_and_rebalance(self, group: GroupMetadata, member_id: str, instance_id: str | None,
                                        client_id: str, client_host: str, rebalance_ms: int,
                                        session_ms: int, protocol_type: str,
                                        protocols: list[tuple[str, bytes]]) -> JoinResult:
        member = MemberMetadata(member_id, instance_id, client_id, client_host, rebalance_ms, session_ms,
                                protocol_type, protocols)
        member.join_future = asyncio.get_running_loop().create_future()
        group.add_member(member)
        group.new_member_added = True
        self._schedule_heartbeat(group, member)
        fut = member.join_future
        self._prepare_rebalance(group, f"member {member_id} joined")
        self._try_complete_join(group)
        result = await fut
        assert isinstance(result, JoinResult)
        return result

    async def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata,
                                           protocols: list[tuple[str, bytes]], session_ms: int,
                                           rebalance_ms: int, force: bool = False) -> JoinResult:
        changed = not member.matches(protocols)
        member.protocols = protocols
        member.session_timeout_ms = session_ms
        member.rebalance_timeout_ms = rebalance_ms
        self._schedule_heartbeat(group, member)
        if not force and not changed and group.state == GroupState.COMPLETING_REBALANCE:
            return self._join_result(group, member)
        if not force and not changed and group.state == GroupState.STABLE and member.member_id != group.leader:
            return self._join_result(group, member)
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinResult(ErrorCode.unknown_member_id, member.member_id))
        member.join_future = asyncio.get_running_loop().create_future()
        fut = member.join_future
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member.member_id} rejoined")
        self._try_complete_join(group)
        result = await fut
        assert isinstance(result, JoinResult)
        return result

    def _join_result(self, group: GroupMetadata, member: MemberMetadata) -> JoinResult:
        members = []
        if member.member_id == group.leader and group.protocol is not None:
            members = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol))
                       for m in group.members.values()]
        return JoinResult(ErrorCode.none, member.member_id, group.generation, group.protocol_type,
                          group.protocol, group.leader or "", members)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.state == GroupState.PREPARING_REBALANCE:
            return
        if group.state == GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result(SyncResult(ErrorCode.rebalance_in_progress))
        initial = group.state == GroupState.EMPTY
        group.transition_to(GroupState.PREPARING_REBALANCE)
        log.info("preparing to rebalance group %s (generation %d): %s", group.group_id,
                 group.generation, reason)
        loop = asyncio.get_running_loop()
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        if initial and self.config.initial_rebalance_delay_ms > 0:
            group.new_member_added = False
            group.in_initial_delay = True
            delay = self.config.initial_rebalance_delay_ms
            budget = max((m.rebalance_timeout_ms for m in group.members.values()), default=delay)
            group.rebalance_timer = loop.call_later(delay / 1000, self._initial_delay_expired, group,
                                                    delay, budget - delay)
        else:
            timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
            group.rebalance_timer = loop.call_later(timeout / 1000, self._complete_join, group)

    def _initial_delay_expired(self, group: GroupMetadata, delay: int, remaining: int) -> None:
        """The first rebalance of an empty group waits while new members keep arriving."""
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            step = min(delay, remaining)
            group.rebalance_timer = asyncio.get_running_loop().call_later(
                step / 1000, self._initial_delay_expired, group, delay, remaining - step)
            return
        group.rebalance_timer = None
        group.in_initial_delay = False
        self._complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        if group.state != GroupState.PREPARING_REBALANCE or not group.all_members_joined():
            return
        if group.in_initial_delay:
            return  # the first rebalance keeps waiting for more members to arrive
        self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        group.in_initial_delay = False
        for m in [m for m in group.members.values() if m.join_future is None]:
            log.info("removing member %s of group %s: it did not rejoin in time", m.member_id, group.group_id)
            group.remove_member(m.member_id)
        group.pending_members.clear()
        group.generation += 1
        if group.is_empty:
            group.protocol = None
            group.protocol_type = None if not group.offsets else group.protocol_type
            group.transition_to(GroupState.EMPTY)
            self._store_group(group)
            log.info("group %s is empty at generation %d", group.group_id, group.generation)
            return
        group.protocol = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.transition_to(GroupState.COMPLETING_REBALANCE)
        log.info("group %s generation %d: %d members, protocol %s, leader %s", group.group_id,
                 group.generation, len(group.members), group.protocol, group.leader)
        for m in group.members.values():
            fut = m.join_future
            m.join_future = None
            self._schedule_heartbeat(group, m)
            if fut is not None and not fut.done():
                fut.set_result(self._join_result(group, m))

    async def sync_group(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                         protocol_type: str | None, protocol: str | None,
                         assignments: dict[str, bytes]) -> SyncResult:
        group = self.groups.get(group_id)
        if not group_id:
            return SyncResult(ErrorCode.invalid_group_id)
        if not self.owns(group_id):
            return SyncResult(ErrorCode.not_coordinator)
        if group is None or member_id not in group.members:
            return SyncResult(ErrorCode.unknown_member_id)
        member = group.members[member_id]
        if instance_id is not None and group.static_members.get(instance_id) != member_id:
            return SyncResult(ErrorCode.fenced_instance_id)
        if generation != group.generation:
            return SyncResult(ErrorCode.illegal_generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol is not None and protocol != group.protocol):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        if group.state == GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.rebalance_in_progress)
        if group.state == GroupState.STABLE:
            self._schedule_heartbeat(group, member)
            return SyncResult(ErrorCode.none, member.assignment, group.protocol_type, group.protocol)
        if group.state != GroupState.COMPLETING_REBALANCE:
            return SyncResult(ErrorCode.unknown_member_id)
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        member.sync_future = fut
        self._schedule_heartbeat(group, member)
        if member_id == group.leader:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            error = self._store_group(group)
            if error != ErrorCode.none:
                for m in group.members.values():
                    m.assignment = b""
                self._resolve_syncs(group, lambda m: SyncResult(error))
                self._prepare_rebalance(group, "storing the assignment failed")
            else:
                group.transition_to(GroupState.STABLE)
                self._resolve_syncs(group, lambda m: SyncResult(ErrorCode.none, m.assignment,
                                                                group.protocol_type, group.protocol))
        result = await fut
        assert isinstance(result, SyncResult)
        return result

    @staticmethod
    def _resolve_syncs(group: GroupMetadata, make: Callable[[MemberMetadata], SyncResult]) -> None:
        for m in group.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result(make(m))
            m.sync_future = None

    # -------------------------------------------------------- heartbeat/leave

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
        if not self.owns(group_id):
            return ErrorCode.not_coordinator
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        member = group.members.get(member_id)
        if instance_id is not None and group.static_members.get(instance_id) not in (None, member_id):
            return ErrorCode.fenced_instance_id
        if member is None:
            return ErrorCode.unknown_member_id
        if group.state == GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation != group.generation:
            return ErrorCode.illegal_generation
        self._schedule_heartbeat(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        member.heartbeat_timer = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._expire_member, group, member)

    def _expire_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        if group.members.get(member.member_id) is not member:
            return
        waiting = (member.join_future is not None and not member.join_future.done()) or \
                  (member.sync_future is not None and not member.sync_future.done())
        if waiting:
            self._schedule_heartbeat(group, member)
            return
        log.info("member %s of group %s missed its session timeout; removing it", member.member_id,
                 group.group_id)
        self._remove_member(group, member)

    def _expire_pending(self, group: GroupMetadata, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._try_complete_join(group)

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        group.remove_member(member.member_id)
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinResult(ErrorCode.unknown_member_id, member.member_id))
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncResult(ErrorCode.unknown_member_id))
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} left")
        if group.state == GroupState.PREPARING_REBALANCE:
            if group.is_empty:
                self._complete_join(group)
            else:
                self._try_complete_join(group)

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        if not self.owns(group_id):
            return ErrorCode.not_coordinator, [ErrorCode.not_coordinator] * len(members)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id, [ErrorCode.unknown_member_id] * len(members)
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
                results.append(ErrorCode.none)
                self._try_complete_join(group)
                continue
            member = group.members.get(member_id)
            if member is None:
                results.append(ErrorCode.unknown_member_id)
                continue
            log.info("member %s left group %s", member_id, group_id)
            self._remove_member(group, member)
            results.append(ErrorCode.none)
        return ErrorCode.none, results

    # ----------------------------------------------------------------- offsets

    def commit_offsets(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                       offsets: list[tuple[str, int, int, int, str | None]]) -> list[ErrorCode]:
        """Commit ``(topic, partition, offset, leader epoch, metadata)``; one error per entry."""
        def all_(error: ErrorCode) -> list[ErrorCode]:
            return [error] * len(offsets)

        if not group_id:
            return all_(ErrorCode.invalid_group_id)
        if not self.owns(group_id):
            return all_(ErrorCode.not_coordinator)
        group = self.groups.get(group_id)
        if generation < 0 and not member_id:
            # A commit from outside the group protocol (manual assignment, admin tools).
            if group is not None and not group.is_empty:
                return all_(ErrorCode.unknown_member_id)
            if group is None:
                group = self.groups[group_id] = GroupMetadata(group_id)
        else:
            if group is None:
                return all_(ErrorCode.illegal_generation)
            if instance_id is not None and group.static_members.get(instance_id) not in (None, member_id):
                return all_(ErrorCode.fenced_instance_id)
            member = group.members.get(member_id)
            if member is None:
                return all_(ErrorCode.unknown_member_id)
            if generation != group.generation:
                return all_(ErrorCode.illegal_generation)
            if group.state == GroupState.COMPLETING_REBALANCE:
                return all_(ErrorCode.rebalance_in_progress)
            self._schedule_heartbeat(group, member)
        errors: list[ErrorCode] = []
        records: list[tuple[bytes, bytes | None]] = []
        ts = now_ms()
        for topic, partition, offset, epoch, metadata in offsets:
            if metadata is not None and len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                errors.append(ErrorCode.offset_metadata_too_large)
            elif not self.partition_exists(topic, partition):
                errors.append(ErrorCode.unknown_topic_or_partition)
            else:
                errors.append(ErrorCode.none)
                records.append((rec.encode_offset_key(rec.OffsetKey(group_id, topic, partition)),
                                rec.encode_offset_value(rec.OffsetValue(offset, epoch, metadata or "", ts))))
        if records:
            error = self._write(group_id, records)
            if error != ErrorCode.none:
                errors = [error if e == ErrorCode.none else e for e in errors]
        return errors

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> tuple[ErrorCode, dict[tuple[str, int], OffsetAndMetadata | None]]:
        if not group_id:
            return ErrorCode.invalid_group_id, {}
        if not self.owns(group_id):
            return ErrorCode.not_coordinator, {}
        group = self.groups.get(group_id)
        committed = group.offsets if group is not None else {}
        if partitions is None:
            return ErrorCode.none, dict(sorted(committed.items()))
        return ErrorCode.none, {tp: committed.get(tp) for tp in partitions}

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                       ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        if not self.owns(group_id):
            return ErrorCode.not_coordinator, {}
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, {}
        subscribed = group.subscribed_topics() if not group.is_empty else set()
        results: dict[tuple[str, int], ErrorCode] = {}
        records: list[tuple[bytes, bytes | None]] = []
        for topic, partition in partitions:
            if subscribed is None or topic in subscribed:
                results[(topic, partition)] = ErrorCode.group_subscribed_to_topic
                continue
            results[(topic, partition)] = ErrorCode.none
            if (topic, partition) in group.offsets:
                records.append((rec.encode_offset_key(rec.OffsetKey(group_id, topic, partition)), None))
        if records:
            error = self._write(group_id, records)
            if error != ErrorCode.none:
                return error, {}
        return ErrorCode.none, results

    def expire_offsets(self, now: int | None = None) -> int:
        """offsets.retention.minutes: drop old offsets of groups without members."""
        now = now_ms() if now is None else now
        expired = 0
        for group in list(self.groups.values()):
            if not group.is_empty or group.state not in (GroupState.EMPTY,):
                continue
            records: list[tuple[bytes, bytes | None]] = []
            for (topic, partition), om in group.offsets.items():
                if now - max(om.commit_timestamp, group.state_timestamp) > self.config.offsets_retention_ms:
                    records.append((rec.encode_offset_key(rec.OffsetKey(group.group_id, topic, partition)), None))
            if records and len(records) == len(group.offsets):
                records.append((rec.encode_group_key(rec.GroupKey(group.group_id)), None))
            if records:
                expired += len(records)
                self._write(group.group_id, records)
        return expired

    # ------------------------------------------------------------------- admin

    def list_groups(self, states: Iterable[str] = ()) -> list[GroupMetadata]:
        wanted = {s.lower() for s in states}
        return [g for g in self.groups.values()
                if g.state != GroupState.DEAD and (not wanted or g.state.value.lower() in wanted)]

    def describe_group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if not group_id:
                results[group_id] = ErrorCode.invalid_group_id
            elif not self.owns(group_id):
                results[group_id] = ErrorCode.not_coordinator
            elif group is None:
                results[group_id] = ErrorCode.group_id_not_found
            elif not group.is_empty:
                results[group_id] = ErrorCode.non_empty_group
            else:
                records: list[tuple[bytes, bytes | None]] = [
                    (rec.encode_offset_key(rec.OffsetKey(group_id, t, p)), None) for t, p in group.offsets]
                records.append((rec.encode_group_key(rec.GroupKey(group_id)), None))
                results[group_id] = self._write(group_id, records)
        return results
