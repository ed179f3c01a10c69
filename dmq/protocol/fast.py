"""Hand-written codecs for the hot path: Produce and Fetch (sans-io).

kio's generic serializer walks each entity's dataclass fields and calls a
writer per field; on a replicated partition a leader spent much of its time
there writing Fetch and Produce responses, and followers writing Fetch
requests. These functions write the same bytes with precompiled
``struct.Struct``s, one function per message:

- ``encode_produce_response`` (ProduceResponse v3-v9) and
  ``encode_fetch_response`` (FetchResponse v4-v12): the whole response frame
  as ``codec.encode_response`` writes it (bytes, or a list of parts around
  the ``SpliceRecords`` sources);
- ``encode_fetch_request`` (FetchRequest v4-v12): the request frame as
  ``client.wire.encode_request`` writes it (a follower's fetch).

They write what the broker builds and raise on anything else (a tagged field
set, a null where kio would write a null array, a value of an unexpected
type): the callers then run kio's writer, so the bytes, or the error, are
always kio's.

Reading stays with kio, whose readers are native code; ``NULL_CHECKS`` replace
``codec``'s generic walk for nulls in non-nullable fields on the two hot
requests (see "reading" below).

Versions: ProduceResponse v5 adds log_start_offset, v8 record_errors and
error_message, v9 is flexible (compact strings and arrays, tagged fields).
FetchRequest v5 adds log_start_offset, v7 sessions and forgotten topics, v9
current_leader_epoch, v11 rack_id, v12 is flexible with last_fetched_epoch.
FetchResponse v5 adds log_start_offset, v7 error_code and session_id, v11
preferred_read_replica, v12 is flexible.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields
from datetime import timedelta
from functools import cache
from typing import Any

from kio.index import load_entity_module
from kio.static.constants import EntityType

from dmq.protocol.splice import ByteSource, SpliceRecords

PRODUCE_KEY = 0
FETCH_KEY = 1
PRODUCE_VERSIONS = range(3, 10)
FETCH_VERSIONS = range(4, 13)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">hhi")  # request header: api key, api version, correlation id
_RESPONSE_HEAD = struct.Struct(">ii")  # size, correlation id
_I16_I32 = struct.Struct(">hi")
_I32_I32 = struct.Struct(">ii")
_I64_I64 = struct.Struct(">qq")
_PRODUCE_PARTITION = struct.Struct(">ihqq")  # index, error, base offset, log append time
_PRODUCE_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and log start offset
_FETCH_PARTITION = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_FETCH_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and log start offset
_FETCH_HEAD = struct.Struct(">iiiib")  # replica id, max wait, min bytes, max bytes, isolation


class Unusual(Exception):
    """Off the fast path: the caller uses kio's writer instead."""


@cache
def _module(api_key: int, version: int, kind: EntityType) -> Any:
    name = {PRODUCE_KEY: "produce", FETCH_KEY: "fetch"}[api_key]
    return load_entity_module(name, version, kind)  # type: ignore[arg-type]


# ------------------------------------------------------------------ writing


_VARINTS = [bytes((n,)) for n in range(128)]


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return _VARINTS[n]
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _array_length(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def _string(value: str, flexible: bool) -> bytes:
    if not isinstance(value, str):
        raise Unusual
    data = value.encode()
    if flexible:
        return _uvarint(len(data) + 1) + data
    if len(data) > 0x7FFF:
        raise Unusual
    return _I16.pack(len(data)) + data


def _nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    return _string(value, flexible)


# Values are written as kio writes them: error codes by the enum member's value (``_value_``,
# the plain attribute behind the slower ``.value``; a bare int has neither and goes to kio,
# which refuses it), durations and instants rounded to milliseconds.


def _ms(value: timedelta) -> int:
    return round(value.total_seconds() * 1000)


def _frame(out: bytearray, parts: list[Any], spliced: int) -> bytes | list[bytes | ByteSource]:
    """Size-prefix ``out`` (which starts with 4 bytes kept for the size): bytes, or the
    parts of a spliced frame (bytes between the sources) as ``codec.encode_response``."""
    if not parts:
        _I32.pack_into(out, 0, len(out) - 4)
        return bytes(out)
    parts.append(out)
    size = sum(len(p) for p in parts[0::2]) + spliced - 4
    _I32.pack_into(parts[0], 0, size)
    return [bytes(p) if i % 2 == 0 else p for i, p in enumerate(parts)]


def encode_produce_response(correlation_id: int, response: Any) -> bytes:
    """The frame of a ProduceResponse v3-v9 (size prefix and response header included)."""
    version = type(response).__version__
    flexible = version >= 9
    out = bytearray(_RESPONSE_HEAD.pack(0, correlation_id))
    if flexible:
        out += b"\x00"  # response header v1: no tagged fields
    topics = response.responses
    out += _array_length(len(topics), flexible)
    for topic in topics:
        out += _string(topic.name, flexible)
        partitions = topic.partition_responses
        out += _array_length(len(partitions), flexible)
        for p in partitions:
            appended = p.log_append_time
            append_ms = -1 if appended is None else round(appended.timestamp() * 1000)
            if version >= 5:
                out += _PRODUCE_PARTITION_V5.pack(p.index, p.error_code._value_, p.base_offset,
                                                  append_ms, p.log_start_offset)
            else:
                out += _PRODUCE_PARTITION.pack(p.index, p.error_code._value_, p.base_offset, append_ms)
            if version >= 8:
                errors = p.record_errors
                out += _array_length(len(errors), flexible)
                for e in errors:
                    out += _I32.pack(e.batch_index)
                    out += _nullable_string(e.batch_index_error_message, flexible)
                    if flexible:
                        out += b"\x00"
                out += _nullable_string(p.error_message, flexible)
            if flexible:
                out += b"\x00"
        if flexible:
            out += b"\x00"
    out += _I32.pack(_ms(response.throttle_time))
    if flexible:
        out += b"\x00"
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def _tag_defaults(cls: type[Any]) -> tuple[Any, ...]:
    """The defaults of the tagged fields of ``cls``: kio writes a tagged field unless equal."""
    return tuple(f.default for f in fields(cls) if "tag" in f.metadata)


# PartitionData v12: diverging_epoch, current_leader, snapshot_id
_DIVERGING, _LEADER, _SNAPSHOT = _tag_defaults(
    _module(FETCH_KEY, 12, EntityType.response).PartitionData)


def encode_fetch_response(correlation_id: int, response: Any) -> bytes | list[bytes | ByteSource]:
    """The frame of a FetchResponse v4-v12; with SpliceRecords, its parts around the sources."""
    version = type(response).__version__
    flexible = version >= 12
    out = bytearray(_RESPONSE_HEAD.pack(0, correlation_id))
    if flexible:
        out += b"\x00"
    out += _I32.pack(_ms(response.throttle_time))
    if version >= 7:
        out += _I16_I32.pack(response.error_code._value_, response.session_id)
    parts: list[Any] = []
    spliced = 0
    topics = response.responses
    out += _array_length(len(topics), flexible)
    for topic in topics:
        out += _string(topic.topic, flexible)
        partitions = topic.partitions
        out += _array_length(len(partitions), flexible)
        for p in partitions:
            if version >= 5:
                out += _FETCH_PARTITION_V5.pack(p.partition_index, p.error_code._value_,
                                                p.high_watermark, p.last_stable_offset,
                                                p.log_start_offset)
            else:
                out += _FETCH_PARTITION.pack(p.partition_index, p.error_code._value_,
                                             p.high_watermark, p.last_stable_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                out += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                out += _array_length(len(aborted), flexible)
                for a in aborted:
                    out += _I64_I64.pack(a.producer_id, a.first_offset)
                    if flexible:
                        out += b"\x00"
            if version >= 11:
                out += _I32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                out += b"\x00" if flexible else b"\xff\xff\xff\xff"
            elif type(records) is bytes:
                out += _uvarint(len(records) + 1) if flexible else _I32.pack(len(records))
                out += records
            elif isinstance(records, SpliceRecords):
                source = records.source
                out += _uvarint(source.length + 1) if flexible else _I32.pack(source.length)
                parts.append(out)
                parts.append(source)
                spliced += source.length
                out = bytearray()
            else:
                raise Unusual
            if flexible:
                # kio writes a tagged field unless it equals its default (most often the very
                # default object: the handler leaves these fields out)
                if not (p.diverging_epoch is _DIVERGING and p.current_leader is _LEADER
                        and p.snapshot_id is _SNAPSHOT) and (
                        p.diverging_epoch != _DIVERGING or p.current_leader != _LEADER
                        or p.snapshot_id != _SNAPSHOT):
                    raise Unusual
                out += b"\x00"
        if flexible:
            out += b"\x00"
    if flexible:
        out += b"\x00"
    return _frame(out, parts, spliced)


def encode_fetch_request(request: Any, correlation_id: int, client_id: str) -> bytes:
    """A FetchRequest v4-v12 frame as ``client.wire.encode_request`` writes it."""
    version = type(request).__version__
    flexible = version >= 12
    if flexible and request.cluster_id is not None:
        raise Unusual  # tagged field
    out = bytearray(4)
    out += _HEAD.pack(FETCH_KEY, version, correlation_id)
    out += _nullable_string(client_id, False)  # a legacy string in every header version
    if flexible:
        out += b"\x00"
    out += _FETCH_HEAD.pack(request.replica_id, _ms(request.max_wait), request.min_bytes,
                            request.max_bytes, request.isolation_level)
    if version >= 7:
        out += _I32_I32.pack(request.session_id, request.session_epoch)
    topics = request.topics
    out += _array_length(len(topics), flexible)
    for topic in topics:
        out += _string(topic.topic, flexible)
        partitions = topic.partitions
        out += _array_length(len(partitions), flexible)
        for p in partitions:
            out += _I32.pack(p.partition)
            if version >= 9:
                out += _I32.pack(p.current_leader_epoch)
            out += _I64.pack(p.fetch_offset)
            if version >= 12:
                out += _I32.pack(p.last_fetched_epoch)
            if version >= 5:
                out += _I64.pack(p.log_start_offset)
            out += _I32.pack(p.partition_max_bytes)
            if flexible:
                out += b"\x00"
        if flexible:
            out += b"\x00"
    if version >= 7:
        forgotten = request.forgotten_topics_data
        out += _array_length(len(forgotten), flexible)
        for f in forgotten:
            out += _string(f.topic, flexible)
            out += _array_length(len(f.partitions), flexible)
            out += struct.pack(f">{len(f.partitions)}i", *f.partitions)
            if flexible:
                out += b"\x00"
    if version >= 11:
        out += _string(request.rack_id, flexible)
    if flexible:
        out += b"\x00"
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


_FOLLOWER_PARTITION = struct.Struct(">iiqiqi")  # partition, epoch, offset, last epoch, start, max


def encode_follower_fetch(correlation_id: int, client_id: str, replica_id: int, max_wait_ms: int,
                          min_bytes: int, max_bytes: int,
                          topics: list[tuple[str, list[tuple[int, int, int, int, int]]]],
                          session_id: int = 0, session_epoch: int = -1,
                          forgotten: list[tuple[str, list[int]]] | None = None) -> bytes:
    """A follower's FetchRequest v12 frame, from plain values: ``topics`` holds (topic,
    [(partition, current leader epoch, fetch offset, log start offset, partition max
    bytes)]), ``forgotten`` (topic, [partition]). The bytes of ``encode_fetch_request``
    for the same request with last_fetched_epoch -1, rack "" and read_uncommitted;
    without the kio entities a follower would build for every fetch."""
    out = bytearray(4)
    out += _HEAD.pack(FETCH_KEY, 12, correlation_id)
    out += _nullable_string(client_id, False)
    out += b"\x00"
    out += _FETCH_HEAD.pack(replica_id, max_wait_ms, min_bytes, max_bytes, 0)
    out += _I32_I32.pack(session_id, session_epoch)
    out += _uvarint(len(topics) + 1)
    pack = _FOLLOWER_PARTITION.pack
    for topic, partitions in topics:
        out += _string(topic, True)
        out += _uvarint(len(partitions) + 1)
        for partition, epoch, offset, log_start, partition_max in partitions:
            out += pack(partition, epoch, offset, -1, log_start, partition_max)
            out += b"\x00"
        out += b"\x00"
    if forgotten:
        out += _uvarint(len(forgotten) + 1)
        for topic, indexes in forgotten:
            out += _string(topic, True)
            out += _uvarint(len(indexes) + 1)
            for index in indexes:
                out += _I32.pack(index)
            out += b"\x00"
    else:
        out += b"\x01"  # no forgotten topics
    out += b"\x01\x00"  # rack "", no tagged fields
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


# ------------------------------------------------------------------ reading
#
# kio's readers are native code and read these requests in about a microsecond, several
# times faster than struct-based Python could (docs/benchmarks.md, "Codec"). What cost
# more was the generic walk that rejects null where the schema allows none (kio reads a
# null array as None even for a non-nullable field; a null non-nullable string is already
# an error in kio). These checks look at exactly those fields of the two hot requests.


def produce_request_has_no_nulls(request: Any) -> bool:
    """No null array in a ProduceRequest v3-v9 (transactional_id and records may be null)."""
    topics = request.topic_data
    if topics is None:
        return False
    for topic in topics:
        if topic.name is None or topic.partition_data is None:
            return False
    return True


def fetch_request_has_no_nulls(request: Any) -> bool:
    """No null array or string in a FetchRequest v4-v12 (cluster_id may be null)."""
    topics = request.topics
    if topics is None:
        return False
    for topic in topics:
        if topic.topic is None or topic.partitions is None:
            return False
    if type(request).__version__ >= 7:
        forgotten = request.forgotten_topics_data
        if forgotten is None:
            return False
        for f in forgotten:
            if f.topic is None or f.partitions is None:
                return False
    return type(request).__version__ < 11 or request.rack_id is not None


# --------------------------------------------------------------- dispatch


def _classes(api_key: int, versions: range, kind: EntityType, name: str) -> list[type[Any]]:
    return [getattr(_module(api_key, v, kind), name) for v in versions]


# kio entity class -> fast encoder (exact classes: anything else goes through kio)
RESPONSE_ENCODERS: dict[type[Any], Callable[[int, Any], bytes | list[bytes | ByteSource]]] = {
    **dict.fromkeys(_classes(PRODUCE_KEY, PRODUCE_VERSIONS, EntityType.response, "ProduceResponse"),
                    encode_produce_response),
    **dict.fromkeys(_classes(FETCH_KEY, FETCH_VERSIONS, EntityType.response, "FetchResponse"),
                    encode_fetch_response),
}
REQUEST_ENCODERS: dict[type[Any], Callable[[Any, int, str], bytes]] = dict.fromkeys(
    _classes(FETCH_KEY, FETCH_VERSIONS, EntityType.request, "FetchRequest"), encode_fetch_request)
# kio request class -> True when a request read by kio holds no null where none is allowed
NULL_CHECKS: dict[type[Any], Callable[[Any], bool]] = {
    **dict.fromkeys(_classes(PRODUCE_KEY, PRODUCE_VERSIONS, EntityType.request, "ProduceRequest"),
                    produce_request_has_no_nulls),
    **dict.fromkeys(_classes(FETCH_KEY, FETCH_VERSIONS, EntityType.request, "FetchRequest"),
                    fetch_request_has_no_nulls),
}
