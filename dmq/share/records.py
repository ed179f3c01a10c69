"""Records of the internal ``__share_group_state`` topic (Kafka 4.2's formats), sans-io.

Kafka's coordinator record framing (CoordinatorRecordSerde): the key is an int16
record type followed by the key struct at version 0; the value is an int16 value
version followed by the value struct; a null value is a tombstone (the share-partition's
state was deleted).

Record types (share-coordinator ``Share*.json``):

- 0 ShareSnapshot: the whole state of a share-partition.
- 1 ShareUpdate: batches to merge into the last snapshot.

Both keys are ``{GroupId string, TopicId uuid, Partition int32}``, not flexible:
an int16-length string, 16 raw bytes, an int32.

The values (version 0) are flexible: arrays are compact (uvarint length + 1) and every
struct, each array element included, ends with a tagged-field section (uvarint count,
then per field uvarint tag, uvarint size, data)::

    ShareSnapshotValue: SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32,
        StartOffset int64, CreateTimestamp int64, WriteTimestamp int64,
        StateBatches [StateBatch], tag 0 DeliveryCompleteCount int32
    ShareUpdateValue: SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64
        (-1: unchanged), StateBatches [StateBatch], tag 0 DeliveryCompleteCount int32
    StateBatch: FirstOffset int64, LastOffset int64, DeliveryState int8
        (0 Available, 2 Acknowledged, 4 Archived), DeliveryCount int16

DeliveryCompleteCount (KIP-1226, Kafka 4.2) defaults to -1 (unknown) and is written
only when it is not -1. Unknown tagged fields are skipped when reading.

The ``__share_group_state`` partition of a key is Kafka's
``Utils.abs("<group>:<topic id>:<partition>".hashCode()) % numPartitions``, the topic id
written as Kafka's ``Uuid.toString()`` (base64url of the 16 bytes, no padding).
"""

from __future__ import annotations

import base64
import struct
import uuid
from dataclasses import dataclass

from dmq.coordinator.hashing import java_string_hash, kafka_abs

TOPIC = "__share_group_state"
SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1
VALUE_VERSION = 0
# DeliveryCompleteCount's default: not known (a record written before Kafka 4.2).
UNKNOWN_DELIVERY_COMPLETE_COUNT = -1
DELIVERY_COMPLETE_COUNT_TAG = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_BATCH = struct.Struct(">qqbh")
_SNAPSHOT_HEAD = struct.Struct(">iiiqqq")
_UPDATE_HEAD = struct.Struct(">iiq")


class RecordFormatError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    """The key of both record types: one share-partition."""
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """Offsets ``first_offset..last_offset`` (inclusive) in one delivery state
    (0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED) with one delivery count."""
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT


# ----------------------------------------------------------------------------- writing


def _uvarint(out: bytearray, n: int) -> None:
    if n < 0:
        raise ValueError(f"negative unsigned varint {n}")
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _string(out: bytearray, s: str) -> None:
    data = s.encode()
    if len(data) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    out += _I16.pack(len(data))
    out += data


def _batches(out: bytearray, batches: tuple[StateBatch, ...]) -> None:
    _uvarint(out, len(batches) + 1)
    for b in batches:
        out += _BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        out.append(0)  # the element's (empty) tagged fields


def _tagged_fields(out: bytearray, delivery_complete_count: int) -> None:
    if delivery_complete_count == UNKNOWN_DELIVERY_COMPLETE_COUNT:
        out.append(0)
        return
    _uvarint(out, 1)
    _uvarint(out, DELIVERY_COMPLETE_COUNT_TAG)
    _uvarint(out, _I32.size)
    out += _I32.pack(delivery_complete_count)


def encode_key(record_type: int, key: ShareStateKey) -> bytes:
    if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        raise ValueError(f"unknown __share_group_state record type {record_type}")
    out = bytearray(_I16.pack(record_type))
    _string(out, key.group_id)
    out += key.topic_id.bytes
    out += _I32.pack(key.partition)
    return bytes(out)


def encode_snapshot_value(v: ShareSnapshotValue) -> bytes:
    out = bytearray(_I16.pack(VALUE_VERSION))
    out += _SNAPSHOT_HEAD.pack(v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset,
                               v.create_timestamp, v.write_timestamp)
    _batches(out, v.state_batches)
    _tagged_fields(out, v.delivery_complete_count)
    return bytes(out)


def encode_update_value(v: ShareUpdateValue) -> bytes:
    out = bytearray(_I16.pack(VALUE_VERSION))
    out += _UPDATE_HEAD.pack(v.snapshot_epoch, v.leader_epoch, v.start_offset)
    _batches(out, v.state_batches)
    _tagged_fields(out, v.delivery_complete_count)
    return bytes(out)


# ----------------------------------------------------------------------------- reading


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("truncated __share_group_state record")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, s: struct.Struct) -> tuple[int, ...]:
        return tuple(int(x) for x in s.unpack(self.take(s.size)))

    def uvarint(self) -> int:
        n = shift = 0
        while True:
            (b,) = self.take(1)
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7
            if shift > 28:
                raise RecordFormatError("unsigned varint longer than 5 bytes")

    def string(self) -> str:
        (n,) = self.unpack(_I16)
        if n < 0:
            raise RecordFormatError("null string in a __share_group_state key")
        try:
            return self.take(n).decode()
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"bad string in __share_group_state key: {e}") from None

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def batches(self) -> tuple[StateBatch, ...]:
        n = self.uvarint()
        if n == 0:
            raise RecordFormatError("null StateBatches")
        out = []
        for _ in range(n - 1):
            first, last, state, count = self.unpack(_BATCH)
            out.append(StateBatch(first, last, state, count))
            self.skip_tagged_fields()
        return tuple(out)

    def delivery_complete_count(self) -> int:
        """The value's tagged fields: DeliveryCompleteCount (tag 0); others are skipped."""
        count = UNKNOWN_DELIVERY_COMPLETE_COUNT
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            data = self.take(size)
            if tag == DELIVERY_COMPLETE_COUNT_TAG:
                if size != _I32.size:
                    raise RecordFormatError(f"DeliveryCompleteCount of {size} bytes")
                (count,) = _I32.unpack(data)
        return int(count)


def decode_key(data: bytes) -> tuple[int, ShareStateKey]:
    """(record type, key)."""
    r = _Reader(data)
    (record_type,) = r.unpack(_I16)
    if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        raise RecordFormatError(f"unknown __share_group_state record type {record_type}")
    group_id = r.string()
    topic_id = uuid.UUID(bytes=r.take(16))
    (partition,) = r.unpack(_I32)
    return record_type, ShareStateKey(group_id, topic_id, partition)


def _version(r: _Reader) -> None:
    (version,) = r.unpack(_I16)
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unsupported __share_group_state value version {version}")


def decode_snapshot_value(data: bytes) -> ShareSnapshotValue:
    r = _Reader(data)
    _version(r)
    snapshot_epoch, state_epoch, leader_epoch, start, created, written = r.unpack(_SNAPSHOT_HEAD)
    batches = r.batches()
    return ShareSnapshotValue(snapshot_epoch, state_epoch, leader_epoch, start, created, written,
                              batches, r.delivery_complete_count())


def decode_update_value(data: bytes) -> ShareUpdateValue:
    r = _Reader(data)
    _version(r)
    snapshot_epoch, leader_epoch, start = r.unpack(_UPDATE_HEAD)
    batches = r.batches()
    return ShareUpdateValue(snapshot_epoch, leader_epoch, start, batches, r.delivery_complete_count())


def decode_value(record_type: int, data: bytes | None) -> ShareSnapshotValue | ShareUpdateValue | None:
    """The value of a record of ``record_type``; None for a tombstone."""
    if data is None:
        return None
    if record_type == SHARE_SNAPSHOT:
        return decode_snapshot_value(data)
    if record_type == SHARE_UPDATE:
        return decode_update_value(data)
    raise RecordFormatError(f"unknown __share_group_state record type {record_type}")


# ------------------------------------------------------------------------ partitioning


def topic_id_string(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: base64url of the 16 bytes without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's ``SharePartitionKey.asCoordinatorKey()``: ``group:topicId:partition``; also
    the key FindCoordinator (key type SHARE) looks up."""
    return f"{group_id}:{topic_id_string(topic_id)}:{partition}"


def parse_coordinator_key(key: str) -> tuple[str, uuid.UUID, int]:
    """``coordinator_key``'s inverse: (group, topic id, partition); ValueError if malformed."""
    group_id, topic, partition = key.rsplit(":", 2)
    raw = base64.urlsafe_b64decode(topic + "=" * (-len(topic) % 4))
    if not group_id or len(raw) != 16 or not partition.isdigit():
        raise ValueError(f"not a share-partition key: {key!r}")
    return group_id, uuid.UUID(bytes=raw), int(partition)


def partition_for(group_id: str, topic_id: uuid.UUID, partition: int, num_partitions: int) -> int:
    """The ``__share_group_state`` partition holding a share-partition's state."""
    return kafka_abs(java_string_hash(coordinator_key(group_id, topic_id, partition))) % num_partitions
