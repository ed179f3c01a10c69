"""Produce (0): append record batches; acks 0 (no response), 1 and -1 (all in-sync replicas)."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import INTERNAL_TOPICS
from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, CloseConnection, RequestContext
from dmq.protocol.codec import constructor, make
from dmq.replication.replica_manager import ProduceResult, TopicPartition

API_KEY = 0
MIN_VERSION = 3
MAX_VERSION = 9
# Kafka's AdminUtils.AdminClientId: the one client id that may append to internal topics.
ADMIN_CLIENT_ID = "__admin_client"


def _timestamp(ms: int) -> datetime | None:
    return None if ms < 0 else datetime.fromtimestamp(ms / 1000, tz=UTC)


def _invalid_acks(services: BrokerServices, request: Any, entries: dict[TopicPartition, bytes | None],
                  denied: dict[TopicPartition, ProduceResult] | None,
                  invalid: dict[TopicPartition, ProduceResult]) -> dict[TopicPartition, ProduceResult]:
    """The answer to a request whose acks is not 0, 1 or -1, in Kafka's order: a partition
    refused by the request's transactional id (all of them) or its topic's ACL keeps that
    error, one the cluster lacks is UNKNOWN_TOPIC_OR_PARTITION, one whose records
    validateRecords refuses keeps that error, and the rest are INVALID_REQUIRED_ACKS (Kafka's
    ReplicaManager.appendRecords, before any append: internal topics included)."""
    refused = ProduceResult(ErrorCode.invalid_required_acks,
                            error_message=f"acks={request.acks} is not 0, 1 or -1")
    unknown = ProduceResult(ErrorCode.unknown_topic_or_partition)
    results: dict[TopicPartition, ProduceResult] = {}
    for tp in entries:
        if denied and tp in denied:
            results[tp] = denied[tp]
            continue
        meta = services.metadata.topic(tp[0])
        if meta is None or tp[1] not in meta.partitions:
            results[tp] = unknown
        else:
            results[tp] = invalid.get(tp, refused)
    return results


_BATCH_LENGTH = struct.Struct(">i")
_ZSTD = 4  # codec id in a batch's attributes (bits 0-2, byte 22)


def _invalid_records(services: BrokerServices, version: int, entries: dict[TopicPartition, bytes | None]
                     ) -> dict[TopicPartition, ProduceResult]:
    """The partitions whose records Kafka's ProduceRequest.validateRecords refuses (v3 on,
    every version dmq serves), by their first batch: a magic other than 2 is INVALID_RECORD,
    ZSTD below v7 UNSUPPORTED_COMPRESSION_TYPE, and more than one batch INVALID_RECORD. The
    checks on transactional records read the first batch only, so a second batch must not
    reach the log: a producer with WRITE on the topic could otherwise slip a batch into
    another producer's transaction. (A partition of an unknown topic is left to the append,
    which answers UNKNOWN_TOPIC_OR_PARTITION as Kafka does before it validates.)"""
    bad: dict[TopicPartition, ProduceResult] | None = None
    for tp, r in entries.items():
        # batchLength (bytes 8-12) counts the bytes after it; a set shorter than it says (or
        # than a batch header) is left to the append's validation, which answers
        # CORRUPT_MESSAGE for it.
        if r is None or len(r) <= 12:
            continue
        end = _BATCH_LENGTH.unpack_from(r, 8)[0] + 12
        if end > len(r):
            continue
        if len(r) > 22 and r[16] != 2:  # magic (at byte 16 in every format)
            error, message = ErrorCode.invalid_record, (
                f"Produce requests with version {version} are only allowed to contain record batches "
                "with magic version 2")
        elif version < 7 and len(r) > 22 and r[22] & 0x07 == _ZSTD:
            error, message = ErrorCode.unsupported_compression_type, (
                f"Produce requests with version {version} are not allowed to use ZStandard compression")
        elif end < len(r):
            error, message = ErrorCode.invalid_record, (
                f"Produce requests with version {version} are only allowed to contain exactly one "
                "record batch per partition")
        else:
            continue
        if services.metadata.topic(tp[0]) is not None:
            if bad is None:
                bad = {}
            bad[tp] = ProduceResult(error, error_message=message)
    return bad or {}


def _transactional(records: bytes | None) -> bool:
    """Whether a partition's first batch is transactional (attributes bit 4, byte 22)."""
    return records is not None and len(records) > 22 and records[22] & 0x10 != 0


def _without_transactional_id(request: Any, entries: dict[TopicPartition, bytes | None]
                              ) -> dict[TopicPartition, ProduceResult]:
    """Transactional records in a request without a transactional id: every partition is
    refused TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka's handleProduceRequest does
    (with or without an authorizer). Such records belong to no transaction a coordinator
    could end or verify."""
    if request.transactional_id is not None:
        return {}
    for r in entries.values():  # (inlined _transactional: this runs for every idempotent produce)
        if r is not None and len(r) > 22 and r[22] & 0x10:
            break
    else:
        return {}
    return dict.fromkeys(entries, ProduceResult(
        ErrorCode.transactional_id_authorization_failed,
        error_message="transactional records need the request's transactional id"))


def _unauthorized(services: BrokerServices, ctx: RequestContext, request: Any,
                  entries: dict[TopicPartition, bytes | None]) -> dict[TopicPartition, ProduceResult]:
    """The partitions ACLs refuse (Kafka's handleProduceRequest): transactional records
    need WRITE on the request's transactional id (else every partition is refused), and
    every topic WRITE."""
    txn_id = request.transactional_id
    if txn_id is not None and any(_transactional(r) for r in entries.values()) and \
            not authorize(services, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return dict.fromkeys(entries, ProduceResult(ErrorCode.transactional_id_authorization_failed))
    refused = ProduceResult(ErrorCode.topic_authorization_failed)
    denied = {topic for topic in {tp[0] for tp in entries}
              if not authorize(services, ctx, AclOperation.WRITE, ResourceType.TOPIC, topic)}
    return {tp: refused for tp in entries if tp[0] in denied} if denied else {}


def _internal(services: BrokerServices, ctx: RequestContext, request: Any,
              entries: dict[TopicPartition, bytes | None]) -> dict[TopicPartition, ProduceResult]:
    """The partitions of internal topics, which clients may not append to (Kafka's
    ReplicaManager: INVALID_TOPIC_EXCEPTION unless the client id is ``__admin_client``).
    Their coordinators write them; a record appended behind a coordinator's back is not in
    its state, yet the next coordinator to load the log replays it. (One not created yet
    is an unknown topic, as in Kafka.)"""
    if ctx.client_id == ADMIN_CLIENT_ID or not any(t.name in INTERNAL_TOPICS for t in request.topic_data):
        return {}
    return {tp: ProduceResult(ErrorCode.invalid_topic_exception,
                              error_message=f"Cannot append to internal topic {tp[0]}")
            for tp in entries if tp[0] in INTERNAL_TOPICS and services.metadata.topic(tp[0]) is not None}


def _record_errors(schema: Any, errors: tuple[tuple[int, str], ...]) -> tuple[Any, ...]:
    """Produce v8+'s record_errors (dropped by older versions, which have none)."""
    if not errors or not hasattr(schema, "BatchIndexAndErrorMessage"):
        return ()
    return tuple(make(schema.BatchIndexAndErrorMessage, batch_index=i, batch_index_error_message=m)
                 for i, m in errors)


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    entries: dict[TopicPartition, bytes | None] = {
        (t.name, p.index): p.records for t in request.topic_data for p in t.partition_data}
    denied = _without_transactional_id(request, entries) or (
        _unauthorized(services, ctx, request, entries) if services.authorizer is not None else None)
    invalid = _invalid_records(services, ctx.api_version, entries)
    if request.acks not in (0, 1, -1):
        results = _invalid_acks(services, request, entries, denied, invalid)
    else:
        internal = _internal(services, ctx, request, entries)
        if internal:
            denied = {**internal, **(denied or {})}
        if invalid:
            denied = {**invalid, **(denied or {})}  # an ACL's refusal comes first, as in Kafka
        if denied:
            allowed = {tp: r for tp, r in entries.items() if tp not in denied}
            results = await services.replica_manager.append_records(
                allowed, request.acks, max(request.timeout.total_seconds(), 0.0),
                appended=ctx.dispatched, transactional_id=request.transactional_id) if allowed else {}
            results = {tp: denied[tp] if tp in denied else results[tp] for tp in entries}
        else:
            # ReplicaManager decides whether the answer waits for replication (acks=all).
            results = await services.replica_manager.append_records(
                entries, request.acks, max(request.timeout.total_seconds(), 0.0), appended=ctx.dispatched,
                transactional_id=request.transactional_id)
    if request.acks == 0:
        failed = [r for r in results.values() if r.error != ErrorCode.none]
        if failed:
            # An acks=0 client reads no response; as in Kafka, closing the connection is
            # the signal that makes it refresh metadata and notice the failure.
            raise CloseConnection(f"acks=0 produce failed with {failed[0].error.name}")
        return None
    partition_response = constructor(
        schema.PartitionProduceResponse, "index", "error_code", "base_offset", "log_append_time",
        "log_start_offset", "record_errors", "error_message")
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), r in results.items():
        parts = by_topic.get(topic)
        if parts is None:
            parts = by_topic[topic] = []
        parts.append(partition_response(index, r.error, r.base_offset, _timestamp(r.log_append_time),
                                        r.log_start_offset, _record_errors(schema, r.record_errors),
                                        r.error_message))
    topic_response = constructor(schema.TopicProduceResponse, "name", "partition_responses")
    return constructor(schema.ProduceResponse, "responses", "throttle_time")(
        tuple(topic_response(name, tuple(parts)) for name, parts in by_topic.items()), NO_THROTTLE)
