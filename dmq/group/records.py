"""Records of the internal ``__consumer_offsets`` topic (Kafka's formats), sans-io.

Keys start with an int16 version: 0 or 1 is an offset commit key
``(group, topic, partition)``, 2 a group metadata key ``(group)``. Values
start with their own version; a null value is a tombstone (compaction drops
the key). Strings are int16-length prefixed, bytes int32-length prefixed.

- OffsetCommitValue v3: offset int64, leader epoch int32, metadata string,
  commit timestamp int64.
- GroupMetadataValue v3: protocol type, generation int32, protocol (nullable),
  leader (nullable), current state timestamp int64, members: int32 count of
  (member id, group instance id (nullable), client id, client host,
  rebalance timeout int32, session timeout int32, subscription bytes,
  assignment bytes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dmq.coordinator.hashing import java_string_hash

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


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
        return None if n < 0 else self._take(n).decode()

    def blob(self) -> bytes:
        return self._take(self.i32())


def encode_offset_key(key: OffsetKey) -> bytes:
    return bytes(_Writer().i16(OFFSET_KEY_VERSION).string(key.group).string(key.topic)
                 .i32(key.partition).buf)


def encode_group_key(key: GroupKey) -> bytes:
    return bytes(_Writer().i16(GROUP_KEY_VERSION).string(key.group).buf)


def encode_offset_value(v: OffsetValue) -> bytes:
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


def decode_key(data: bytes) -> OffsetKey | GroupKey:
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
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        offset, metadata, ts = r.i64(), r.string() or "", r.i64()
        return OffsetValue(offset, -1, metadata, ts)
    if version == 3:
        return OffsetValue(r.i64(), r.i32(), r.string() or "", r.i64())
    raise RecordFormatError(f"unsupported offset value version {version}")


def decode_group_value(data: bytes) -> GroupValue:
    r = _Reader(data)
    version = r.i16()
    if version != 3:
        raise RecordFormatError(f"unsupported group metadata value version {version}")
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol, leader, ts = r.string(), r.string(), r.i64()
    members = []
    for _ in range(r.i32()):
        members.append(MemberValue(r.string() or "", r.string(), r.string() or "", r.string() or "",
                                   r.i32(), r.i32(), r.blob(), r.blob()))
    return GroupValue(protocol_type, generation, protocol, leader, ts, tuple(members))


def partition_for(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group, as Kafka computes it."""
    return (java_string_hash(group) & 0x7FFFFFFF) % partitions
