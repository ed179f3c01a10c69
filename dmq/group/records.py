"""Records of the internal ``__consumer_offsets`` topic (Kafka's formats), sans-io.

Keys start with an int16 version (Kafka 4 calls it the record type): 0 or 1 is
an offset commit key ``(group, topic, partition)``, 2 a group metadata key
``(group)``, 10-15 the share-group records below. Values start with their own
version; a null value is a tombstone (compaction drops the key). In the
classic records strings are int16-length prefixed, bytes int32-length prefixed.

- OffsetCommitValue v3: offset int64, leader epoch int32, metadata string,
  commit timestamp int64.
- GroupMetadataValue v3: protocol type, generation int32, protocol (nullable),
  leader (nullable), current state timestamp int64, members: int32 count of
  (member id, group instance id (nullable), client id, client host,
  rebalance timeout int32, session timeout int32, subscription bytes,
  assignment bytes).

dmq writes v3 of both; it reads every version Kafka has written (0-4 of each,
Kafka's ``OffsetCommitValue.json`` and ``GroupMetadataValue.json``): offset
values v0-2 have no leader epoch, v1 alone an expire timestamp after the
commit timestamp; group values v0 have no rebalance timeout (the session
timeout stands for it, as Kafka reads it), state timestamp (v2+) or group
instance id (v3+); v4 of both is v3 in the flexible encoding (compact strings,
bytes and arrays, tagged fields closing every struct).

Share groups (KIP-932; Kafka 4.2's ``ShareGroup*.json``): the key is the int16
record type and then a non-flexible version-0 struct (int16-length strings);
the value is an int16 version 0 and then a *flexible* struct: compact strings
and arrays (unsigned varint length + 1, 0 = null), UUIDs as 16 bytes, and a
tagged-field section (unsigned varint count, then tag, size, data) closing
every struct, array elements included. Unknown tagged fields are skipped.

====  ====================================  ==================  =========================================
type  record                                key                 value v0
====  ====================================  ==================  =========================================
10    ShareGroupMemberMetadata              group, member       rack (nullable), client id, client host,
                                                                subscribed topic names
11    ShareGroupMetadata                    group               epoch int32, metadata hash int64
12    ShareGroupTargetAssignmentMetadata    group               assignment epoch int32
13    ShareGroupTargetAssignmentMember      group, member       [topic id, [partition int32]]
14    ShareGroupCurrentMemberAssignment     group, member       member epoch int32, previous epoch int32,
                                                                state int8, [topic id, [partition int32]]
15    ShareGroupStatePartitionMetadata      group               initializing [id, name, [partition]],
                                                                initialized [id, name, [partition]],
                                                                deleting [id, name]
====  ====================================  ==================  =========================================

Types 3-9 (consumer groups of KIP-848; 9 is 4.0's ShareGroupPartitionMetadata)
and 16-23 (consumer-group regular expressions, streams groups) may be in a
``__consumer_offsets`` that Kafka wrote: ``decode_key`` returns them as an
``OtherKey`` so that replay skips them, as Kafka skips record types it does
not know.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from dmq.coordinator.hashing import java_string_hash

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

SHARE_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_TARGET_ASSIGNMENT_METADATA = 12
SHARE_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_STATE_PARTITION_METADATA = 15
SHARE_GROUP_RECORD_TYPES = frozenset(range(SHARE_MEMBER_METADATA, SHARE_STATE_PARTITION_METADATA + 1))
_SHARE_MEMBER_KEYED = frozenset({SHARE_MEMBER_METADATA, SHARE_TARGET_ASSIGNMENT_MEMBER,
                                 SHARE_CURRENT_MEMBER_ASSIGNMENT})


class RecordFormatError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # v1 only: when the commit asked it to expire (-1: none)


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[MemberValue, ...]


@dataclass(frozen=True, slots=True)
class ShareKey:
    """The key of a share-group record: ``member`` is set exactly for types 10, 13 and 14."""
    record_type: int
    group: str
    member: str | None = None


@dataclass(frozen=True, slots=True)
class OtherKey:
    """A record type dmq does not keep (consumer or streams groups of a Kafka-written log)."""
    record_type: int


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """One topic's partitions in a share assignment (records 13 and 14)."""
    topic_id: uuid.UUID
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicPartitionsInfo:
    """One topic's partitions in record 15, with the topic's name."""
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: uuid.UUID
    topic_name: str


@dataclass(frozen=True, slots=True)
class ShareMemberMetadataValue:
    """Record 10."""
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    """Record 11."""
    epoch: int
    metadata_hash: int


@dataclass(frozen=True, slots=True)
class ShareTargetAssignmentMetadataValue:
    """Record 12."""
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareTargetAssignmentMemberValue:
    """Record 13."""
    topic_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ShareCurrentMemberAssignmentValue:
    """Record 14. ``state`` is Kafka's MemberState: 0 STABLE (the only one share members use)."""
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ShareStatePartitionMetadataValue:
    """Record 15."""
    initializing_topics: tuple[TopicPartitionsInfo, ...]
    initialized_topics: tuple[TopicPartitionsInfo, ...]
    deleting_topics: tuple[TopicInfo, ...]


ShareValue = (ShareMemberMetadataValue | ShareGroupMetadataValue | ShareTargetAssignmentMetadataValue
              | ShareTargetAssignmentMemberValue | ShareCurrentMemberAssignmentValue
              | ShareStatePartitionMetadataValue)


class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def i16(self, v: int) -> _Writer:
        self.buf += struct.pack(">h", v)
        return self

    def i32(self, v: int) -> _Writer:
        self.buf += struct.pack(">i", v)
        return self

    def i64(self, v: int) -> _Writer:
        self.buf += struct.pack(">q", v)
        return self

    def string(self, v: str | None) -> _Writer:
        if v is None:
            return self.i16(-1)
        data = v.encode()
        self.i16(len(data))
        self.buf += data
        return self

    def blob(self, v: bytes) -> _Writer:
        self.i32(len(v))
        self.buf += v
        return self

    def i8(self, v: int) -> _Writer:
        self.buf += struct.pack(">b", v)
        return self

    def uvarint(self, v: int) -> _Writer:
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)
        return self

    def compact_string(self, v: str | None) -> _Writer:
        if v is None:
            return self.uvarint(0)
        data = v.encode()
        self.uvarint(len(data) + 1)
        self.buf += data
        return self

    def compact_count(self, n: int) -> _Writer:
        return self.uvarint(n + 1)

    def uuid(self, v: uuid.UUID) -> _Writer:
        self.buf += v.bytes
        return self

    def no_tags(self) -> _Writer:
        return self.uvarint(0)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("truncated __consumer_offsets record")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def i32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def i64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else _utf8(self._take(n))

    def blob(self) -> bytes:
        return self._take(self.i32())

    def compact_blob(self) -> bytes:
        n = self.uvarint()
        if n == 0:
            raise RecordFormatError("null in non-nullable bytes")
        return self._take(n - 1)

    def i8(self) -> int:
        return int(struct.unpack(">b", self._take(1))[0])

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError("varint too long in __consumer_offsets record")

    def compact_string(self) -> str | None:
        n = self.uvarint()
        if n == 0:
            return None
        return _utf8(self._take(n - 1))

    def compact_str(self) -> str:
        value = self.compact_string()
        if value is None:
            raise RecordFormatError("null in a non-nullable string")
        return value

    def compact_count(self) -> int:
        n = self.uvarint()
        if n == 0:
            raise RecordFormatError("null in a non-nullable array")
        if n - 1 > len(self.data) - self.pos:
            raise RecordFormatError("array longer than the record")
        return n - 1

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise RecordFormatError(f"{len(self.data) - self.pos} bytes after the record")


def _utf8(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise RecordFormatError(f"string is not UTF-8: {e}") from None


def encode_offset_key(key: OffsetKey) -> bytes:
    return bytes(_Writer().i16(OFFSET_KEY_VERSION).string(key.group).string(key.topic)
                 .i32(key.partition).buf)


def encode_group_key(key: GroupKey) -> bytes:
    return bytes(_Writer().i16(GROUP_KEY_VERSION).string(key.group).buf)


def encode_offset_value(v: OffsetValue) -> bytes:
    """Version 3; version 1, which has no leader epoch, when the commit set an expire
    timestamp (Kafka writes it so)."""
    if v.expire_timestamp >= 0:
        return bytes(_Writer().i16(1).i64(v.offset).string(v.metadata).i64(v.commit_timestamp)
                     .i64(v.expire_timestamp).buf)
    return bytes(_Writer().i16(OFFSET_VALUE_VERSION).i64(v.offset).i32(v.leader_epoch)
                 .string(v.metadata).i64(v.commit_timestamp).buf)


def encode_group_value(v: GroupValue) -> bytes:
    w = (_Writer().i16(GROUP_VALUE_VERSION).string(v.protocol_type).i32(v.generation)
         .string(v.protocol).string(v.leader).i64(v.state_timestamp).i32(len(v.members)))
    for m in v.members:
        (w.string(m.member_id).string(m.group_instance_id).string(m.client_id)
         .string(m.client_host).i32(m.rebalance_timeout_ms).i32(m.session_timeout_ms)
         .blob(m.subscription).blob(m.assignment))
    return bytes(w.buf)


def decode_key(data: bytes) -> OffsetKey | GroupKey | ShareKey | OtherKey:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        group, topic, partition = r.string(), r.string(), r.i32()
        if group is None or topic is None:
            raise RecordFormatError("null group or topic in offset key")
        return OffsetKey(group, topic, partition)
    if version == 2:
        group = r.string()
        if group is None:
            raise RecordFormatError("null group in group metadata key")
        return GroupKey(group)
    if version in SHARE_GROUP_RECORD_TYPES:
        group = r.string()
        member = r.string() if version in _SHARE_MEMBER_KEYED else None
        if group is None or (member is None and version in _SHARE_MEMBER_KEYED):
            raise RecordFormatError(f"null group or member in a record {version} key")
        return ShareKey(version, group, member)
    if version >= 3:
        return OtherKey(version)
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    """An OffsetCommitValue of any version Kafka has written (0-4)."""
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1, 2):
        offset, metadata, ts = r.i64(), r.string() or "", r.i64()
        expire = r.i64() if version == 1 else -1
        return OffsetValue(offset, -1, metadata, ts, expire)
    if version == 3:
        return OffsetValue(r.i64(), r.i32(), r.string() or "", r.i64())
    if version == 4:
        offset, epoch, metadata, ts = r.i64(), r.i32(), r.compact_string() or "", r.i64()
        r.skip_tags()
        return OffsetValue(offset, epoch, metadata, ts)
    raise RecordFormatError(f"unsupported offset value version {version}")


def decode_group_value(data: bytes) -> GroupValue:
    """A GroupMetadataValue of any version Kafka has written (0-4)."""
    r = _Reader(data)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unsupported group metadata value version {version}")
    flexible = version >= 4
    text = r.compact_string if flexible else r.string
    blob = r.compact_blob if flexible else r.blob
    protocol_type = text() or ""
    generation = r.i32()
    protocol, leader = text(), text()
    ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.compact_count() if flexible else r.i32()):
        member_id = text() or ""
        instance_id = text() if version >= 3 else None
        client_id, client_host = text() or "", text() or ""
        rebalance_timeout = r.i32() if version >= 1 else None
        session_timeout = r.i32()
        subscription, assignment = blob(), blob()
        if flexible:
            r.skip_tags()
        members.append(MemberValue(member_id, instance_id, client_id, client_host,
                                   session_timeout if rebalance_timeout is None else rebalance_timeout,
                                   session_timeout, subscription, assignment))
    if flexible:
        r.skip_tags()
    return GroupValue(protocol_type, generation, protocol, leader, ts, tuple(members))


def partition_for(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group, as Kafka computes it."""
    return (java_string_hash(group) & 0x7FFFFFFF) % partitions


# ------------------------------------------------------------------ share groups


def encode_share_key(key: ShareKey) -> bytes:
    if key.record_type not in SHARE_GROUP_RECORD_TYPES:
        raise ValueError(f"not a share-group record type: {key.record_type}")
    if (key.member is not None) != (key.record_type in _SHARE_MEMBER_KEYED):
        raise ValueError(f"record {key.record_type} key {'needs' if key.member is None else 'has no'} a member")
    w = _Writer().i16(key.record_type).string(key.group)
    if key.member is not None:
        w.string(key.member)
    return bytes(w.buf)


def _write_topic_partitions(w: _Writer, items: tuple[TopicPartitions, ...]) -> None:
    w.compact_count(len(items))
    for tp in items:
        w.uuid(tp.topic_id).compact_count(len(tp.partitions))
        for p in tp.partitions:
            w.i32(p)
        w.no_tags()


def _write_partitions_info(w: _Writer, items: tuple[TopicPartitionsInfo, ...]) -> None:
    w.compact_count(len(items))
    for info in items:
        w.uuid(info.topic_id).compact_string(info.topic_name).compact_count(len(info.partitions))
        for p in info.partitions:
            w.i32(p)
        w.no_tags()


def share_value_type(value: ShareValue) -> int:
    """The record type whose value ``value`` is."""
    return _SHARE_VALUE_TYPES[type(value)]


def encode_share_value(value: ShareValue) -> bytes:
    w = _Writer().i16(0)
    if isinstance(value, ShareMemberMetadataValue):
        w.compact_string(value.rack_id).compact_string(value.client_id).compact_string(value.client_host)
        w.compact_count(len(value.subscribed_topic_names))
        for name in value.subscribed_topic_names:
            w.compact_string(name)
    elif isinstance(value, ShareGroupMetadataValue):
        w.i32(value.epoch).i64(value.metadata_hash)
    elif isinstance(value, ShareTargetAssignmentMetadataValue):
        w.i32(value.assignment_epoch)
    elif isinstance(value, ShareTargetAssignmentMemberValue):
        _write_topic_partitions(w, value.topic_partitions)
    elif isinstance(value, ShareCurrentMemberAssignmentValue):
        w.i32(value.member_epoch).i32(value.previous_member_epoch).i8(value.state)
        _write_topic_partitions(w, value.assigned_partitions)
    else:
        _write_partitions_info(w, value.initializing_topics)
        _write_partitions_info(w, value.initialized_topics)
        w.compact_count(len(value.deleting_topics))
        for t in value.deleting_topics:
            w.uuid(t.topic_id).compact_string(t.topic_name).no_tags()
    w.no_tags()
    return bytes(w.buf)


def _read_int32s(r: _Reader) -> tuple[int, ...]:
    return tuple(r.i32() for _ in range(r.compact_count()))


def _read_topic_partitions(r: _Reader) -> tuple[TopicPartitions, ...]:
    out = []
    for _ in range(r.compact_count()):
        topic_id, partitions = r.uuid(), _read_int32s(r)
        r.skip_tags()
        out.append(TopicPartitions(topic_id, partitions))
    return tuple(out)


def _read_partitions_info(r: _Reader) -> tuple[TopicPartitionsInfo, ...]:
    out = []
    for _ in range(r.compact_count()):
        topic_id, name, partitions = r.uuid(), r.compact_str(), _read_int32s(r)
        r.skip_tags()
        out.append(TopicPartitionsInfo(topic_id, name, partitions))
    return tuple(out)


def decode_share_value(record_type: int, data: bytes) -> ShareValue:
    """The value of a share-group record of ``record_type`` (10-15)."""
    r = _Reader(data)
    version = r.i16()
    if version != 0:
        raise RecordFormatError(f"unsupported record {record_type} value version {version}")
    value: ShareValue
    if record_type == SHARE_MEMBER_METADATA:
        rack, client_id, host = r.compact_string(), r.compact_str(), r.compact_str()
        value = ShareMemberMetadataValue(rack, client_id, host,
                                         tuple(r.compact_str() for _ in range(r.compact_count())))
    elif record_type == SHARE_GROUP_METADATA:
        value = ShareGroupMetadataValue(r.i32(), r.i64())
    elif record_type == SHARE_TARGET_ASSIGNMENT_METADATA:
        value = ShareTargetAssignmentMetadataValue(r.i32())
    elif record_type == SHARE_TARGET_ASSIGNMENT_MEMBER:
        value = ShareTargetAssignmentMemberValue(_read_topic_partitions(r))
    elif record_type == SHARE_CURRENT_MEMBER_ASSIGNMENT:
        epoch, previous, state = r.i32(), r.i32(), r.i8()
        value = ShareCurrentMemberAssignmentValue(epoch, previous, state, _read_topic_partitions(r))
    elif record_type == SHARE_STATE_PARTITION_METADATA:
        initializing, initialized = _read_partitions_info(r), _read_partitions_info(r)
        deleting = []
        for _ in range(r.compact_count()):
            topic_id, name = r.uuid(), r.compact_str()
            r.skip_tags()
            deleting.append(TopicInfo(topic_id, name))
        value = ShareStatePartitionMetadataValue(initializing, initialized, tuple(deleting))
    else:
        raise RecordFormatError(f"not a share-group record type: {record_type}")
    r.skip_tags()
    r.end()
    return value


_SHARE_VALUE_TYPES: dict[type, int] = {
    ShareMemberMetadataValue: SHARE_MEMBER_METADATA,
    ShareGroupMetadataValue: SHARE_GROUP_METADATA,
    ShareTargetAssignmentMetadataValue: SHARE_TARGET_ASSIGNMENT_METADATA,
    ShareTargetAssignmentMemberValue: SHARE_TARGET_ASSIGNMENT_MEMBER,
    ShareCurrentMemberAssignmentValue: SHARE_CURRENT_MEMBER_ASSIGNMENT,
    ShareStatePartitionMetadataValue: SHARE_STATE_PARTITION_METADATA,
}
