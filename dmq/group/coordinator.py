"""GroupCoordinator: the consumer groups this broker coordinates.

One ``GroupShard`` per ``__consumer_offsets`` partition this broker leads, run
by the ``CoordinatorRuntime``: every request is a pure operation on the shard
of its group's partition; its records are appended, answered only once every
in-sync replica has them, and then replayed into the shard. A JoinGroup or
SyncGroup that has to wait is parked by the runtime and answered by a later
operation. This class only routes a request to its shard and says what to
answer when the shard is not here (NOT_COORDINATOR). Share groups (KIP-932)
live in the same shards, next to the classic groups (``dmq.group.share_group``).
Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable

from kio.schema.errors import ErrorCode

from dmq.coordinator.runtime import CoordinatorResult, CoordinatorRuntime, PartitionWriter
from dmq.group import records as rec
from dmq.group.metadata import GroupMetadata, OffsetAndMetadata
from dmq.group.shard import GroupConfig, GroupShard, JoinResult, ListedGroup, SyncResult
from dmq.group.share_group import (
    DescribedShareGroup,
    InitializedTopic,
    ShareConfig,
    ShareGroup,
    ShareHeartbeatResult,
    ShareMember,
    ShareTopic,
    TopicLookup,
    validate_heartbeat,
)
from dmq.storage.producer_state import SKIP_VERIFICATION, VerificationGuard

log = logging.getLogger("dmq.group")
DELETED_TOPIC_BATCH = 500  # tombstones per write when a topic is deleted
DELETED_TOPIC_ATTEMPTS = 5
DELETED_TOPIC_BACKOFF_S = 0.5

__all__ = ["GroupConfig", "GroupCoordinator", "InitializedTopic", "JoinResult", "ListedGroup", "ShareConfig",
           "ShareTopic", "SyncResult"]


def offset_commit_error(error: ErrorCode) -> ErrorCode:
    """A transaction verification's error as a TxnOffsetCommit answers it (Kafka's
    maybeConvertOffsetCommitError): what the client retries without looking up the
    coordinator again, or the error it handles as it is."""
    if error == ErrorCode.network_exception:
        return ErrorCode.coordinator_load_in_progress
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                 ErrorCode.not_enough_replicas_after_append):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    return error


class GroupCoordinator:
    def __init__(self, config: GroupConfig, writer: PartitionWriter,
                 partition_exists: Callable[[str, int], bool], commit_timeout_ms: int = 5000,
                 topics: TopicLookup = lambda name: None) -> None:
        """``topics``: a topic's id and partition count by name, from the cluster metadata
        (share groups assign partitions of the topics their members subscribe to)."""
        self.config = config
        # (transactional id, producer id, epoch, partition of __consumer_offsets) -> the guard
        # and the error of the transaction's verification (ReplicaManager.verify_transaction);
        # None: TxnOffsetCommit is not verified. Set by the broker.
        self.verify_transaction: Callable[[str, int, int, int],
                                          Awaitable[tuple[VerificationGuard | None, ErrorCode]]] | None = None
        self.runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime(
            writer, lambda p, epoch: GroupShard(p, config, partition_exists, topics), commit_timeout_ms,
            name="group coordinator")

    def partition_for(self, group_id: str) -> int:
        return rec.partition_for(group_id, self.config.num_partitions)

    def owns(self, group_id: str) -> bool:
        return self.runtime.shard(self.partition_for(group_id)) is not None

    def absent_error(self, group_id: str) -> ErrorCode:
        """The answer for a group not owned here (COORDINATOR_LOAD_IN_PROGRESS while its
        partition is about to load here, else NOT_COORDINATOR)."""
        return self.runtime.absent_error(self.partition_for(group_id))

    def set_led(self, led: dict[int, int]) -> None:
        """The ``__consumer_offsets`` partitions this broker leads, with their leader epochs."""
        self.runtime.set_led(led)

    async def close(self) -> None:
        await self.runtime.close()

    # --------------------------------------------------------------- protocol

    async def join_group(self, group_id: str, member_id: str, instance_id: str | None,
                         client_id: str, client_host: str, session_timeout_ms: int,
                         rebalance_timeout_ms: int, protocol_type: str,
                         protocols: list[tuple[str, bytes]], require_known_member: bool) -> JoinResult:
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id, member_id)
        result = await self.runtime.write(
            self.partition_for(group_id),
            lambda shard, now: shard.join_group(group_id, member_id, instance_id, client_id, client_host,
                                                session_timeout_ms, rebalance_timeout_ms, protocol_type,
                                                protocols, require_known_member, now),
            lambda error: JoinResult(error, member_id))
        assert isinstance(result, JoinResult)
        return result

    async def sync_group(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                         protocol_type: str | None, protocol: str | None,
                         assignments: dict[str, bytes]) -> SyncResult:
        if not group_id:
            return SyncResult(ErrorCode.invalid_group_id)
        result = await self.runtime.write(
            self.partition_for(group_id),
            lambda shard, now: shard.sync_group(group_id, generation, member_id, instance_id,
                                                protocol_type, protocol, assignments, now),
            SyncResult)
        assert isinstance(result, SyncResult)
        return result

    async def heartbeat(self, group_id: str, generation: int, member_id: str,
                        instance_id: str | None) -> ErrorCode:
        result = await self.runtime.write(
            self.partition_for(group_id),
            lambda shard, now: shard.heartbeat(group_id, generation, member_id, instance_id, now),
            lambda error: error)
        assert isinstance(result, ErrorCode)
        return result

    async def leave_group(self, group_id: str, members: list[tuple[str, str | None]]
                          ) -> tuple[ErrorCode, list[ErrorCode]]:
        result = await self.runtime.write(
            self.partition_for(group_id),
            lambda shard, now: shard.leave_group(group_id, members, now),
            lambda error: (error, [error] * len(members)))
        assert isinstance(result, tuple)
        return result

    # ---------------------------------------------------------------- offsets

    async def commit_offsets(self, group_id: str, generation: int, member_id: str,
                             instance_id: str | None,
                             offsets: list[tuple[str, int, int, int, str | None]], *,
                             unknown_group: ErrorCode = ErrorCode.illegal_generation,
                             retention_ms: int = -1) -> list[ErrorCode]:
        """Commit ``(topic, partition, offset, leader epoch, metadata)``; one error per entry,
        answered once the commit is on every in-sync replica of the group's partition.
        ``unknown_group``, ``retention_ms``: see ``GroupShard.commit_offsets``. The empty
        group id is a group like any (Kafka keeps it for old clients), as for OffsetFetch
        and DeleteGroups."""
        return await self._write_offsets(group_id, len(offsets), lambda shard, now: shard.commit_offsets(
            group_id, generation, member_id, instance_id, offsets, now, unknown_group=unknown_group,
            retention_ms=retention_ms))

    async def txn_offset_commit(self, transactional_id: str, group_id: str, producer_id: int,
                                producer_epoch: int, generation: int, member_id: str,
                                instance_id: str | None,
                                offsets: list[tuple[str, int, int, int, str | None]]) -> list[ErrorCode]:
        """TxnOffsetCommit: offsets that count once the producer's transaction commits.

        First, as Kafka's handleTxnCommitOffsets, the transaction coordinator is asked
        whether the group's ``__consumer_offsets`` partition is in the producer's ongoing
        transaction (KIP-890): a late commit of an ended transaction would otherwise leave
        its offsets pending for ever, and a read_committed consumer taking over those
        partitions would get UNSTABLE_OFFSET_COMMIT for ever."""
        if not group_id:
            return [ErrorCode.invalid_group_id] * len(offsets)
        verification: VerificationGuard | None = SKIP_VERIFICATION
        if self.verify_transaction is not None and self.owns(group_id):
            verification, error = await self.verify_transaction(transactional_id, producer_id, producer_epoch,
                                                                self.partition_for(group_id))
            if error != ErrorCode.none:
                return [offset_commit_error(error)] * len(offsets)
        return await self._write_offsets(group_id, len(offsets), lambda shard, now: shard.txn_offset_commit(
            transactional_id, group_id, producer_id, producer_epoch, generation, member_id, instance_id,
            offsets, now), verification)

    async def _write_offsets(self, group_id: str, count: int,
                             op: Callable[[GroupShard, int], CoordinatorResult],
                             verification: VerificationGuard | None = SKIP_VERIFICATION) -> list[ErrorCode]:
        """An offset write whose answer is an error per entry: a failed write fails the
        entries it held; the others keep their own errors."""
        validated: list[ErrorCode] = []

        def write(shard: GroupShard, now: int) -> CoordinatorResult:
            result = op(shard, now)
            validated.extend(result.response)
            result.verification = verification
            return result

        def on_error(error: ErrorCode) -> list[ErrorCode]:
            if not validated:
                return [error] * count
            return [error if e == ErrorCode.none else e for e in validated]

        result = await self.runtime.write(self.partition_for(group_id), write, on_error)
        assert isinstance(result, list)
        return result

    async def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                                   coordinator_epoch: int) -> ErrorCode:
        """A transaction marker for one of this coordinator's partitions (WriteTxnMarkers)."""
        result = await self.runtime.write(
            partition,
            lambda shard, now: shard.complete_transaction(producer_id, producer_epoch, commit,
                                                          coordinator_epoch, now),
            lambda error: error)
        assert isinstance(result, ErrorCode)
        return result

    async def fetch_stable_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                                   ) -> tuple[ErrorCode, dict[tuple[str, int], OffsetAndMetadata | None],
                                              set[tuple[str, int]]]:
        """OffsetFetch with require_stable (KIP-447): ``fetch_offsets`` and the partitions
        whose offset an open transaction will replace, read once every write appended before
        is committed and replayed, as Kafka's fetchOffsets runs it as a write operation: a
        TxnOffsetCommit appended but not yet on every in-sync replica counts (its partitions
        are unstable) where a plain read would answer the offset it is about to replace."""
        def read(shard: GroupShard) -> tuple[ErrorCode, dict[tuple[str, int], OffsetAndMetadata | None],
                                             set[tuple[str, int]]]:
            error, committed = shard.fetch_offsets(group_id, partitions)
            return error, committed, shard.unstable_offsets(group_id) if error == ErrorCode.none else set()

        result = await self.runtime.read_after_writes(self.partition_for(group_id), read,
                                                      lambda error: (error, {}, set()))
        assert isinstance(result, tuple)
        return result

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> tuple[ErrorCode, dict[tuple[str, int], OffsetAndMetadata | None]]:
        result = self.runtime.read(self.partition_for(group_id),
                                   lambda shard: shard.fetch_offsets(group_id, partitions),
                                   lambda error: (error, {}))
        assert isinstance(result, tuple)
        return result

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                             ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        if not group_id:
            return ErrorCode.invalid_group_id, {}  # unlike OffsetCommit's, as Kafka's
        result = await self.runtime.write(
            self.partition_for(group_id),
            lambda shard, now: shard.delete_offsets(group_id, partitions, now),
            lambda error: (error, {}), exclusive=True)
        assert isinstance(result, tuple)
        return result

    async def expire_offsets(self) -> int:
        """offsets.retention.minutes, on every partition this broker coordinates."""
        total = 0
        for partition in sorted(self.runtime.loaded_partitions()):
            expired = await self.runtime.write(partition, GroupShard.expire_offsets, lambda error: 0,
                                               exclusive=True)
            total += int(expired)
        return total

    async def on_topics_deleted(self, topics: frozenset[str]) -> int:
        """Topics deleted from the cluster: their committed offsets leave every group of
        every partition coordinated here (Kafka's ``onPartitionsDeleted``), those committed
        until now. Every partition at once, each in batches of at most about
        ``DELETED_TOPIC_BATCH`` records, a failed write tried again (a few times, while the
        partition stays here). Returns the records written."""
        noticed_ms = self.runtime.clock()
        counts = await asyncio.gather(*(self._delete_topic_offsets(partition, topics, noticed_ms)
                                        for partition in sorted(self.runtime.loaded_partitions())))
        return sum(counts)

    async def _delete_topic_offsets(self, partition: int, topics: frozenset[str], noticed_ms: int) -> int:
        written, failures = 0, 0
        while self.runtime.shard(partition) is not None:
            result = await self.runtime.write(
                partition, lambda shard, now: shard.delete_topic_offsets(topics, noticed_ms, DELETED_TOPIC_BATCH, now),
                lambda error: error, exclusive=True)
            if isinstance(result, ErrorCode):
                failures += 1
                if failures >= DELETED_TOPIC_ATTEMPTS:
                    log.warning("could not remove the offsets of deleted topics %s from __consumer_offsets-%d: "
                                "%s", ", ".join(sorted(topics)), partition, result.name)
                    break
                await asyncio.sleep(DELETED_TOPIC_BACKOFF_S * failures)
                continue
            count, more = result
            written += count
            if not more:
                break
        return written

    # ------------------------------------------------------------------ admin

    @property
    def active(self) -> bool:
        """False once closed (the broker is shutting down): listings answer
        COORDINATOR_NOT_AVAILABLE, as Kafka's inactive coordinator does."""
        return not self.runtime.closed

    def loading(self) -> bool:
        """A ``__consumer_offsets`` partition led here is not loaded yet (``list_groups`` would
        miss its groups: ListGroups answers COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        return self.runtime.any_loading(self.config.num_partitions)

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[ListedGroup]:
        """Classic and share groups of every partition coordinated here, filtered by state
        and type ("classic", "share"; case-insensitive); not those of a partition still
        ``loading``."""
        wanted, kinds = list(states), list(types)
        groups: list[ListedGroup] = []
        for partition in sorted(self.runtime.loaded_partitions()):
            shard = self.runtime.shard(partition)
            if shard is not None:
                groups.extend(shard.listed_groups(wanted, kinds))
        return groups

    def loaded_groups(self) -> list[GroupMetadata]:
        """The classic groups of every partition coordinated here (read only: metrics read
        their committed offsets, members and state at scrape time)."""
        groups: list[GroupMetadata] = []
        for partition in sorted(self.runtime.loaded_partitions()):
            shard = self.runtime.shard(partition)
            if shard is not None:
                groups.extend(shard.groups.values())
        return groups

    def describe_group(self, group_id: str) -> GroupMetadata | None:
        shard = self.runtime.shard(self.partition_for(group_id))
        return shard.groups.get(group_id) if shard is not None else None

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        async def delete(group_id: str) -> ErrorCode:
            result = await self.runtime.write(
                self.partition_for(group_id),
                lambda shard, now: shard.delete_group(group_id, now),
                lambda error: error, exclusive=True)
            assert isinstance(result, ErrorCode)
            return result

        errors = await asyncio.gather(*(delete(g) for g in group_ids))
        return dict(zip(group_ids, errors, strict=True))

    # ----------------------------------------------------------- share groups

    async def share_group_heartbeat(self, group_id: str, member_id: str, member_epoch: int,
                                    rack_id: str | None, subscribed_topic_names: list[str] | None,
                                    client_id: str, client_host: str) -> ShareHeartbeatResult:
        """ShareGroupHeartbeat (KIP-932): answered once its records are on every in-sync
        replica of the group's partition."""
        invalid = validate_heartbeat(group_id, member_id, member_epoch, rack_id, subscribed_topic_names)
        if invalid is not None:
            return ShareHeartbeatResult(ErrorCode.invalid_request, invalid)
        result = await self.runtime.write(
            self.partition_for(group_id),
            lambda shard, now: shard.share_group_heartbeat(group_id, member_id, member_epoch, rack_id,
                                                           subscribed_topic_names, client_id, client_host, now),
            lambda error: ShareHeartbeatResult(error))
        assert isinstance(result, ShareHeartbeatResult)
        return result

    def share_group_describe(self, group_ids: list[str]) -> list[DescribedShareGroup]:
        """ShareGroupDescribe: one entry per id, in order (NOT_COORDINATOR for a group
        coordinated elsewhere, INVALID_GROUP_ID for an empty id)."""
        described: list[DescribedShareGroup] = []
        for group_id in group_ids:
            if not group_id:
                described.append(DescribedShareGroup(group_id, ErrorCode.invalid_group_id))
                continue
            described.extend(self._describe_share_group(group_id))
        return described

    def _describe_share_group(self, group_id: str) -> list[DescribedShareGroup]:
        result = self.runtime.read(self.partition_for(group_id),
                                   lambda shard: shard.share_group_describe([group_id]),
                                   lambda error: [DescribedShareGroup(group_id, error)])
        assert isinstance(result, list)
        return result

    def share_group(self, group_id: str) -> ShareGroup | None:
        """The live share group, if this broker coordinates it (read only)."""
        shard = self.runtime.shard(self.partition_for(group_id))
        return shard.share_group(group_id) if shard is not None else None

    def share_group_members(self, group_id: str) -> dict[str, ShareMember] | None:
        """The share group's members by id; None if another broker coordinates the group."""
        shard = self.runtime.shard(self.partition_for(group_id))
        return shard.share_group_members(group_id) if shard is not None else None

    def share_initialized_partitions(self, group_id: str) -> frozenset[tuple[str, int]] | None:
        """``(topic, partition)`` pairs whose share state the group initialized (record 15);
        None if another broker coordinates the group."""
        shard = self.runtime.shard(self.partition_for(group_id))
        return shard.share_initialized_partitions(group_id) if shard is not None else None

    def share_offsets_target(self, group_id: str) -> tuple[ErrorCode, dict[uuid.UUID, tuple[str, frozenset[int]]]]:
        """A share group's initialized partitions, ``{topic id: (name, partitions)}`` (what
        DescribeShareGroupOffsets describes when no topics are named): NOT_COORDINATOR if
        coordinated elsewhere, GROUP_ID_NOT_FOUND for no share group of that id."""
        if not group_id:
            return ErrorCode.invalid_group_id, {}
        result = self.runtime.read(self.partition_for(group_id),
                                   lambda shard: shard.share_offsets_target(group_id),
                                   lambda error: (error, {}))
        assert isinstance(result, tuple)
        error, topics = result
        return error, {t: (v.name, v.partitions) for t, v in topics.items()}

    async def share_offsets_changed(self, group_id: str, add: dict[uuid.UUID, tuple[str, frozenset[int]]],
                                    remove: frozenset[uuid.UUID] = frozenset()) -> ErrorCode:
        """Alter/DeleteShareGroupOffsets on the group: only an empty share group; its
        initialized partitions gain ``add`` and lose the topics in ``remove`` (record 15)."""
        if not group_id:
            return ErrorCode.invalid_group_id
        added = {t: InitializedTopic(name, partitions) for t, (name, partitions) in add.items()}
        result = await self.runtime.write(
            self.partition_for(group_id),
            lambda shard, now: shard.share_offsets_changed(group_id, added, remove, now),
            lambda error: error)
        assert isinstance(result, ErrorCode)
        return result
