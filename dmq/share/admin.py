"""ShareGroupAdmin: the admin side of share groups' offsets (KIP-932):
DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92).

A share group's "offset" on a partition is its share-partition start offset (SPSO), kept
by the share coordinator (``__share_group_state``); which partitions the group has
initialized is the group coordinator's (record 15 of ``__consumer_offsets``). These
operations join the two, as Kafka's GroupCoordinatorService does:

- Describe: the group's initialized partitions (or the named ones), each with the state's
  start offset, the leader epoch that last wrote it and (v1) the lag: the partition's
  latest offset less the start offset less the records already done past it (KIP-1226's
  delivery complete count); -1 where the state does not know that count yet. A topic
  that does not exist answers start offset -1 (no data, not an error), as does a
  partition whose state cannot be read.
- Alter: on an empty group only (NON_EMPTY_GROUP), each named partition's state is
  initialized again at the given start offset with the next state epoch, which fences
  the share-partition's leader (its next write answers FENCED_STATE_EPOCH, and it reloads).
  The partitions become initialized for the group.
- Delete: on an empty group only, the named topics' states are deleted and the topics
  are no longer initialized for the group: the next member to fetch starts where
  ``share.auto.offset.reset`` says.
- DeleteGroups of a share group deletes its share-partitions' states first, as Kafka
  does (a group created again under the name starts afresh); a state that cannot be
  deleted keeps the group (its error is the group's).

The group coordinator's part goes through ``ShareGroupOps`` (the broker passes its
GroupCoordinator), the state through the ``SharePersister``. Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7 import request as list_offsets_req

from dmq.client.channels import BrokerChannels, BrokerUnreachable
from dmq.cluster.metadata import MetadataStore
from dmq.protocol.codec import make
from dmq.share.persister import SharePartitionKey, SharePersister, StateSummary
from dmq.share.records import UNKNOWN_DELIVERY_COMPLETE_COUNT

UNINITIALIZED = -1

# (topic, partition) -> the partition's latest offset (its high watermark), or an error
LatestOffsets = Callable[[list[tuple[str, int]]], Awaitable[dict[tuple[str, int], int | ErrorCode]]]


class ShareGroupOps(Protocol):
    """What the group coordinator does for these APIs (``GroupCoordinator`` has it)."""

    def owns(self, group_id: str) -> bool: ...

    def absent_error(self, group_id: str) -> ErrorCode: ...

    def share_offsets_target(self, group_id: str) -> tuple[ErrorCode, dict[uuid.UUID, tuple[str, frozenset[int]]]]:
        ...

    async def share_offsets_changed(self, group_id: str, add: dict[uuid.UUID, tuple[str, frozenset[int]]],
                                    remove: frozenset[uuid.UUID] = frozenset()) -> ErrorCode:
        ...

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]: ...


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    partition: int
    start_offset: int = UNINITIALIZED
    leader_epoch: int = 0
    lag: int = -1
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class TopicOffsets:
    name: str
    topic_id: uuid.UUID | None
    partitions: tuple[PartitionOffset, ...]


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    group_id: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    topics: tuple[TopicOffsets, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionResult:
    partition: int
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class TopicResult:
    name: str
    topic_id: uuid.UUID | None
    error: ErrorCode = ErrorCode.none  # Delete: per topic
    message: str | None = None
    partitions: tuple[PartitionResult, ...] = ()  # Alter: per partition


@dataclass(frozen=True, slots=True)
class ChangeResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    topics: tuple[TopicResult, ...] = field(default_factory=tuple)


class ShareGroupAdmin:
    def __init__(self, groups: ShareGroupOps, persister: SharePersister, store: MetadataStore,
                 latest_offsets: LatestOffsets) -> None:
        self.groups = groups
        self.persister = persister
        self.store = store
        self.latest_offsets = latest_offsets

    # ------------------------------------------------------------------ describe

    async def describe_offsets(self, group_id: str,
                               topics: Sequence[tuple[str, Sequence[int]]] | None) -> GroupOffsets:
        """One group of DescribeShareGroupOffsets; ``topics`` None: every partition the
        group has initialized."""
        if not group_id:
            return GroupOffsets(group_id, ErrorCode.invalid_group_id, "The group id must not be empty.")
        if not self.groups.owns(group_id):
            return GroupOffsets(group_id, self.groups.absent_error(group_id))
        wanted: list[tuple[str, uuid.UUID | None, list[int]]] = []
        if topics is None:
            error, initialized = self.groups.share_offsets_target(group_id)
            if error is not ErrorCode.none:
                message = f"Group {group_id} is not a share group." if error is ErrorCode.group_id_not_found else None
                return GroupOffsets(group_id, error, message)
            for tid, (_, initialized_partitions) in sorted(initialized.items(), key=lambda kv: kv[1][0]):
                found = self.store.topic_by_id(tid)
                if found is not None:
                    wanted.append((found.name, tid, sorted(initialized_partitions)))
        else:
            for topic_name, named in topics:
                meta = self.store.topic(topic_name)
                wanted.append((topic_name, meta.uuid if meta is not None else None, list(named)))
        summaries = await self._summaries(group_id, wanted)
        latest = await self.latest_offsets(sorted(
            (name, p) for (name, p), s in summaries.items() if _lag_known(s)))
        out: list[TopicOffsets] = []
        for name, topic_id, partitions in wanted:
            if topic_id is None:
                out.append(TopicOffsets(name, None, tuple(PartitionOffset(p) for p in partitions)))
                continue
            parts = []
            for p in partitions:
                s = summaries[(name, p)]
                if s.error is not ErrorCode.none:
                    parts.append(PartitionOffset(p))
                    continue
                lag = -1
                if _lag_known(s):
                    end = latest.get((name, p), ErrorCode.unknown_server_error)
                    if isinstance(end, ErrorCode):
                        parts.append(PartitionOffset(p, error=end, message=f"the latest offset of "
                                                     f"{name}-{p} is unknown ({end.name})"))
                        continue
                    lag = max(0, end - s.start_offset - s.delivery_complete_count)
                parts.append(PartitionOffset(p, s.start_offset, s.leader_epoch, lag))
            out.append(TopicOffsets(name, topic_id, tuple(parts)))
        return GroupOffsets(group_id, topics=tuple(out))

    async def _summaries(self, group_id: str, wanted: list[tuple[str, uuid.UUID | None, list[int]]]
                         ) -> dict[tuple[str, int], StateSummary]:
        keys = [(name, p, SharePartitionKey(group_id, topic_id, p))
                for name, topic_id, partitions in wanted if topic_id is not None for p in partitions]
        results = await asyncio.gather(*(self.persister.read_state_summary(k, -1) for _, _, k in keys))
        return {(name, p): r for (name, p, _), r in zip(keys, results, strict=True)}

    # ------------------------------------------------------------------- alter

    async def alter_offsets(self, group_id: str,
                            topics: Sequence[tuple[str, Sequence[tuple[int, int]]]]) -> ChangeResult:
        """AlterShareGroupOffsets: ``topics`` names (partition, start offset) pairs."""
        if not group_id:
            return ChangeResult(ErrorCode.invalid_group_id, "The group id must not be empty.")
        if not self.groups.owns(group_id):
            return ChangeResult(self.groups.absent_error(group_id))
        results: dict[str, dict[int, PartitionResult]] = {}
        valid: dict[uuid.UUID, tuple[str, dict[int, int]]] = {}
        for name, partitions in topics:
            meta = self.store.topic(name)
            for p, start in partitions:
                if meta is None or p not in meta.partitions:
                    results.setdefault(name, {})[p] = PartitionResult(
                        p, ErrorCode.unknown_topic_or_partition, f"{name}-{p} does not exist.")
                elif start < 0:
                    results.setdefault(name, {})[p] = PartitionResult(
                        p, ErrorCode.invalid_request, f"The start offset {start} of {name}-{p} is negative.")
                else:
                    valid.setdefault(meta.uuid, (name, {}))[1][p] = start
        if valid:
            error = await self.groups.share_offsets_changed(
                group_id, {t: (name, frozenset(starts)) for t, (name, starts) in valid.items()})
            if error is not ErrorCode.none:
                return ChangeResult(error, _group_message(group_id, error))
            keys = [(name, p, start, SharePartitionKey(group_id, topic_id, p))
                    for topic_id, (name, starts) in valid.items() for p, start in starts.items()]
            errors = await asyncio.gather(*(self._reset(k, start) for _, _, start, k in keys))
            for (name, p, _, _), e in zip(keys, errors, strict=True):
                results.setdefault(name, {})[p] = PartitionResult(
                    p, e, None if e is ErrorCode.none else f"resetting {name}-{p} failed: {e.name}")
        out = []
        for name, partitions in topics:
            meta = self.store.topic(name)
            out.append(TopicResult(name, meta.uuid if meta is not None else None,
                                   partitions=tuple(results[name][p] for p, _ in partitions)))
        return ChangeResult(topics=tuple(out))

    async def _reset(self, key: SharePartitionKey, start_offset: int) -> ErrorCode:
        """Initialize the state again at ``start_offset`` with the next state epoch."""
        summary = await self.persister.read_state_summary(key, -1)
        if summary.error is not ErrorCode.none:
            return summary.error
        return await self.persister.initialize_state(key, summary.state_epoch + 1, start_offset)

    # ------------------------------------------------------------------ delete

    async def delete_offsets(self, group_id: str, topic_names: Sequence[str]) -> ChangeResult:
        """DeleteShareGroupOffsets: the named topics' share states."""
        if not group_id:
            return ChangeResult(ErrorCode.invalid_group_id, "The group id must not be empty.")
        if not self.groups.owns(group_id):
            return ChangeResult(self.groups.absent_error(group_id))
        error, initialized = self.groups.share_offsets_target(group_id)
        if error is not ErrorCode.none:
            return ChangeResult(error, _group_message(group_id, error))
        # The group must be empty before anything is deleted (a no-op change says so).
        error = await self.groups.share_offsets_changed(group_id, {})
        if error is not ErrorCode.none:
            return ChangeResult(error, _group_message(group_id, error))
        results: dict[str, TopicResult] = {}
        deleting: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
        for name in topic_names:
            meta = self.store.topic(name)
            if meta is None or meta.uuid not in initialized:
                results[name] = TopicResult(name, meta.uuid if meta is not None else None,
                                            ErrorCode.unknown_topic_or_partition,
                                            f"The group has no offsets for topic {name}.")
            else:
                deleting[meta.uuid] = (name, initialized[meta.uuid][1])
        deleted: set[uuid.UUID] = set()
        for topic_id, (name, partitions) in deleting.items():
            errors = await asyncio.gather(*(self.persister.delete_state(SharePartitionKey(group_id, topic_id, p))
                                            for p in sorted(partitions)))
            failed = next((e for e in errors if e is not ErrorCode.none), None)
            if failed is None:
                deleted.add(topic_id)
                results[name] = TopicResult(name, topic_id)
            else:
                results[name] = TopicResult(name, topic_id, failed, f"deleting the state of {name} failed: "
                                                                    f"{failed.name}")
        if deleted:
            error = await self.groups.share_offsets_changed(group_id, {}, frozenset(deleted))
            if error is not ErrorCode.none:
                return ChangeResult(error, _group_message(group_id, error))
        return ChangeResult(topics=tuple(results[name] for name in dict.fromkeys(topic_names)))

    # ----------------------------------------------------------- delete groups

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: classic and share groups; a share group's states go first."""
        refused: dict[str, ErrorCode] = {}
        for group_id in dict.fromkeys(group_ids):
            if not group_id or not self.groups.owns(group_id):
                continue
            error, initialized = self.groups.share_offsets_target(group_id)
            if error is not ErrorCode.none:
                continue  # no share group of that id: the group coordinator answers
            error = await self.groups.share_offsets_changed(group_id, {})  # empty?
            if error is ErrorCode.none:
                keys = [SharePartitionKey(group_id, t, p) for t, (_, ps) in initialized.items() for p in sorted(ps)]
                errors = await asyncio.gather(*(self.persister.delete_state(k) for k in keys))
                error = next((e for e in errors if e is not ErrorCode.none), ErrorCode.none)
            if error is not ErrorCode.none:
                refused[group_id] = error
        deleted = await self.groups.delete_groups([g for g in group_ids if g not in refused])
        return {g: refused.get(g) or deleted[g] for g in group_ids}


def _lag_known(s: StateSummary) -> bool:
    return (s.error is ErrorCode.none and s.start_offset != UNINITIALIZED
            and s.delivery_complete_count != UNKNOWN_DELIVERY_COMPLETE_COUNT)


def _group_message(group_id: str, error: ErrorCode) -> str | None:
    if error is ErrorCode.group_id_not_found:
        return f"Group {group_id} is not a share group."
    if error is ErrorCode.non_empty_group:
        return f"Share group {group_id} has members: stop them first."
    return None


class LatestOffsetReader:
    """The latest offsets (high watermarks) of partitions: read locally where this broker
    leads them, else asked of their leaders with ListOffsets (v7, LATEST). A partition
    without a leader, or whose leader does not answer, gets an error instead."""

    def __init__(self, store: MetadataStore, local_high_watermark: Callable[[str, int], int | None],
                 channels: BrokerChannels, request_timeout_s: float = 10.0) -> None:
        self.store = store
        self.local_high_watermark = local_high_watermark
        self.channels = channels
        self.request_timeout_s = request_timeout_s

    async def __call__(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int | ErrorCode]:
        out: dict[tuple[str, int], int | ErrorCode] = {}
        remote: dict[int, list[tuple[str, int]]] = {}
        for topic, p in partitions:
            hw = self.local_high_watermark(topic, p)
            if hw is not None:
                out[(topic, p)] = hw
                continue
            meta = self.store.topic(topic)
            state = meta.partitions.get(p) if meta is not None else None
            if state is None or state.leader < 0:
                out[(topic, p)] = ErrorCode.leader_not_available
            else:
                remote.setdefault(state.leader, []).append((topic, p))
        answers = await asyncio.gather(*(self._ask(broker, tps) for broker, tps in remote.items()))
        for answer in answers:
            out.update(answer)
        return out

    async def _ask(self, broker_id: int, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int | ErrorCode]:
        topics: dict[str, list[int]] = {}
        for topic, p in partitions:
            topics.setdefault(topic, []).append(p)
        request = make(list_offsets_req.ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=tuple(
            make(list_offsets_req.ListOffsetsTopic, name=t, partitions=tuple(
                make(list_offsets_req.ListOffsetsPartition, partition_index=p, current_leader_epoch=-1,
                     timestamp=-1) for p in ps)) for t, ps in topics.items()))
        try:
            response = await self.channels.request(broker_id, request, self.request_timeout_s)
        except BrokerUnreachable:
            return dict.fromkeys(partitions, ErrorCode.leader_not_available)
        out: dict[tuple[str, int], int | ErrorCode] = {}
        for t in response.topics:
            for p in t.partitions:
                error = ErrorCode(p.error_code)
                out[(t.name, p.partition_index)] = p.offset if error is ErrorCode.none else error
        return {tp: out.get(tp, ErrorCode.unknown_server_error) for tp in partitions}
