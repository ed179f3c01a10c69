"""OffsetFetch (9): a group's committed offsets (several groups per request in v8).

With ``require_stable`` (v7+, KIP-447) a partition whose offset an open transaction will
replace answers UNSTABLE_OFFSET_COMMIT and offset -1, as Kafka's: a read_committed
consumer taking the partition over asks again rather than start from the offset the
transaction is about to replace (and process those records a second time)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 8


def _partitions(cls: Any, committed: dict, refused: frozenset[str] = frozenset(),
                unstable: frozenset[tuple[str, int]] = frozenset()) -> dict[str, list[Any]]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), om in committed.items():
        error = ErrorCode.none
        if topic in refused:  # Kafka's UNAUTHORIZED_PARTITION
            om, error = None, ErrorCode.topic_authorization_failed
        elif (topic, partition) in unstable:
            om, error = None, ErrorCode.unstable_offset_commit
        by_topic.setdefault(topic, []).append(make(
            cls, partition_index=partition,
            committed_offset=om.offset if om is not None else -1,
            committed_leader_epoch=om.leader_epoch if om is not None else -1,
            metadata=om.metadata if om is not None else "",
            error_code=error))
    return by_topic


async def _fetch(services: BrokerServices, ctx: RequestContext, group_id: str, topics: Any,
                 require_stable: bool) -> tuple[ErrorCode, dict, frozenset[str], frozenset[tuple[str, int]]]:
    """Kafka's rules: DESCRIBE on the group; of the topics, those without DESCRIBE are
    refused when named, left out when the request asks for all. With ``require_stable``,
    also the partitions an open transaction will commit (read after every write the
    coordinator has appended: see ``GroupCoordinator.fetch_stable_offsets``)."""
    if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, {}, frozenset(), frozenset()
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    unstable: frozenset[tuple[str, int]] = frozenset()
    if require_stable:
        error, committed, pending = await services.coordinators.group.fetch_stable_offsets(group_id, wanted)
        unstable = frozenset(pending)
    else:
        error, committed = services.coordinators.group.fetch_offsets(group_id, wanted)
    if services.authorizer is None:
        return error, committed, frozenset(), unstable
    refused = frozenset(topic for topic, _ in committed
                        if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic))
    if wanted is None:
        return error, {tp: om for tp, om in committed.items() if tp[0] not in refused}, frozenset(), unstable
    return error, committed, refused, unstable


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    require_stable = bool(getattr(request, "require_stable", False))
    if ctx.api_version >= 8:
        groups = []
        for g in request.groups:
            error, committed, refused, unstable = await _fetch(services, ctx, g.group_id, g.topics,
                                                               require_stable)
            by_topic = _partitions(schema.OffsetFetchResponsePartitions, committed, refused, unstable)
            groups.append(make(schema.OffsetFetchResponseGroup, group_id=g.group_id, error_code=error,
                               topics=tuple(make(schema.OffsetFetchResponseTopics, name=name,
                                                 partitions=tuple(parts))
                                            for name, parts in by_topic.items())))
        return make(schema.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))
    error, committed, refused, unstable = await _fetch(services, ctx, request.group_id, request.topics,
                                                       require_stable)
    by_topic = _partitions(schema.OffsetFetchResponsePartition, committed, refused, unstable)
    topics = tuple(make(schema.OffsetFetchResponseTopic, name=name, partitions=tuple(parts))
                   for name, parts in by_topic.items())
    return make(schema.OffsetFetchResponse, throttle_time=NO_THROTTLE, topics=topics, error_code=error)
