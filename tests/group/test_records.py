"""``__consumer_offsets`` records: the share-group records 10-15 in Kafka 4.2's byte
format (hand-built vectors from the ShareGroup*.json schemas), round trips, and the
record types dmq skips."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dmq.group import records as rec
from dmq.group.shard import GroupConfig, GroupShard

T1 = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
T2 = uuid.UUID("ffeeddcc-bbaa-9988-7766-554433221100")

names = st.text(max_size=12)
int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)
uuids = st.uuids()
partitions = st.lists(st.integers(min_value=0, max_value=2**31 - 1), max_size=6).map(tuple)
topic_partitions = st.lists(st.builds(rec.TopicPartitions, uuids, partitions), max_size=4).map(tuple)
share_values = st.one_of(
    st.builds(rec.ShareMemberMetadataValue, st.none() | names, names, names, st.lists(names, max_size=5).map(tuple)),
    st.builds(rec.ShareGroupMetadataValue, int32s, st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    st.builds(rec.ShareTargetAssignmentMetadataValue, int32s),
    st.builds(rec.ShareTargetAssignmentMemberValue, topic_partitions),
    st.builds(rec.ShareCurrentMemberAssignmentValue, int32s, int32s, st.integers(min_value=-128, max_value=127),
              topic_partitions),
    st.builds(rec.ShareStatePartitionMetadataValue,
              st.lists(st.builds(rec.TopicPartitionsInfo, uuids, names, partitions), max_size=3).map(tuple),
              st.lists(st.builds(rec.TopicPartitionsInfo, uuids, names, partitions), max_size=3).map(tuple),
              st.lists(st.builds(rec.TopicInfo, uuids, names), max_size=3).map(tuple)),
)


@given(share_values)
def test_share_values_round_trip(value: rec.ShareValue) -> None:
    data = rec.encode_share_value(value)
    assert data[:2] == b"\x00\x00"  # value version 0
    assert rec.decode_share_value(rec.share_value_type(value), data) == value


@given(st.sampled_from(sorted(rec.SHARE_GROUP_RECORD_TYPES)), names, names)
def test_share_keys_round_trip(record_type: int, group: str, member: str) -> None:
    keyed = record_type in (rec.SHARE_MEMBER_METADATA, rec.SHARE_TARGET_ASSIGNMENT_MEMBER,
                            rec.SHARE_CURRENT_MEMBER_ASSIGNMENT)
    key = rec.ShareKey(record_type, group, member if keyed else None)
    assert rec.decode_key(rec.encode_share_key(key)) == key


@given(st.sampled_from(sorted(rec.SHARE_GROUP_RECORD_TYPES)), st.binary(max_size=60))
def test_garbage_share_values_are_format_errors_not_crashes(record_type: int, data: bytes) -> None:
    try:
        rec.decode_share_value(record_type, data)
    except rec.RecordFormatError:
        pass


def s16(text: str) -> bytes:
    """A non-flexible (key) string: int16 length."""
    return struct.pack(">h", len(text.encode())) + text.encode()


def key_bytes(record_type: int, *fields: str) -> bytes:
    return struct.pack(">h", record_type) + b"".join(s16(f) for f in fields)


def test_member_metadata_10_bytes() -> None:
    key = rec.ShareKey(10, "g", "m")
    assert rec.encode_share_key(key) == bytes.fromhex("000a 0001 67 0001 6d")
    value = rec.ShareMemberMetadataValue(None, "c", "/h", ("t1", "t2"))
    expected = bytes.fromhex(
        "0000"      # value version 0
        "00"        # RackId: null compact string
        "02 63"     # ClientId "c": length+1, bytes
        "03 2f68"   # ClientHost "/h"
        "03"        # SubscribedTopicNames: 2 entries (+1)
        "03 7431"   # "t1"
        "03 7432"   # "t2"
        "00")       # no tagged fields
    assert rec.encode_share_value(value) == expected
    assert rec.decode_share_value(10, expected) == value
    with_rack = rec.ShareMemberMetadataValue("r", "", "", ())
    assert rec.encode_share_value(with_rack) == bytes.fromhex("0000 0272 01 01 01 00")


def test_group_metadata_11_bytes() -> None:
    assert rec.encode_share_key(rec.ShareKey(11, "g")) == bytes.fromhex("000b 0001 67")
    value = rec.ShareGroupMetadataValue(5, 0x0102030405060708)
    expected = bytes.fromhex("0000 00000005 0102030405060708 00")
    assert rec.encode_share_value(value) == expected
    assert rec.decode_share_value(11, expected) == value


def test_target_assignment_metadata_12_bytes() -> None:
    assert rec.encode_share_key(rec.ShareKey(12, "g")) == bytes.fromhex("000c 0001 67")
    expected = bytes.fromhex("0000 00000007 00")
    assert rec.encode_share_value(rec.ShareTargetAssignmentMetadataValue(7)) == expected
    assert rec.decode_share_value(12, expected) == rec.ShareTargetAssignmentMetadataValue(7)


def test_target_assignment_member_13_bytes() -> None:
    assert rec.encode_share_key(rec.ShareKey(13, "g", "m")) == bytes.fromhex("000d 0001 67 0001 6d")
    value = rec.ShareTargetAssignmentMemberValue((rec.TopicPartitions(T1, (0, 2)),))
    expected = bytes.fromhex(
        "0000"
        "02"                                 # TopicPartitions: 1 entry
        "00112233445566778899aabbccddeeff"  # TopicId
        "03 00000000 00000002"              # Partitions [0, 2]
        "00"                                 # the entry's tagged fields
        "00")                                # the value's tagged fields
    assert rec.encode_share_value(value) == expected
    assert rec.decode_share_value(13, expected) == value


def test_current_member_assignment_14_bytes() -> None:
    assert rec.encode_share_key(rec.ShareKey(14, "g", "m")) == bytes.fromhex("000e 0001 67 0001 6d")
    value = rec.ShareCurrentMemberAssignmentValue(3, 2, 0, (rec.TopicPartitions(T1, (1,)),))
    expected = bytes.fromhex(
        "0000"
        "00000003"   # MemberEpoch
        "00000002"   # PreviousMemberEpoch
        "00"         # State: STABLE
        "02 00112233445566778899aabbccddeeff 02 00000001 00"
        "00")
    assert rec.encode_share_value(value) == expected
    assert rec.decode_share_value(14, expected) == value


def test_state_partition_metadata_15_bytes() -> None:
    assert rec.encode_share_key(rec.ShareKey(15, "g")) == bytes.fromhex("000f 0001 67")
    value = rec.ShareStatePartitionMetadataValue(
        (), (rec.TopicPartitionsInfo(T1, "t", (0,)),), (rec.TopicInfo(T2, "x"),))
    expected = bytes.fromhex(
        "0000"
        "01"                                                   # InitializingTopics: empty
        "02 00112233445566778899aabbccddeeff 0274 02 00000000 00"  # InitializedTopics: t [0]
        "02 ffeeddccbbaa99887766554433221100 0278 00"            # DeletingTopics: x
        "00")
    assert rec.encode_share_value(value) == expected
    assert rec.decode_share_value(15, expected) == value


def test_unknown_tagged_fields_are_skipped() -> None:
    # Record 14 with a tagged field in the array entry (tag 3, 1 byte) and at the end (tag 9, 2 bytes).
    data = bytes.fromhex("0000 00000003 00000002 00"
                         "02 00112233445566778899aabbccddeeff 02 00000001 01 03 01 ff"
                         "01 09 02 abcd")
    assert rec.decode_share_value(14, data) == rec.ShareCurrentMemberAssignmentValue(
        3, 2, 0, (rec.TopicPartitions(T1, (1,)),))


def test_a_null_in_a_non_nullable_field_is_a_format_error() -> None:
    with pytest.raises(rec.RecordFormatError):
        rec.decode_share_value(10, bytes.fromhex("0000 00 00 01 01 00"))  # ClientId null
    with pytest.raises(rec.RecordFormatError):
        rec.decode_share_value(13, bytes.fromhex("0000 00 00"))  # TopicPartitions null
    with pytest.raises(rec.RecordFormatError):
        rec.decode_share_value(11, bytes.fromhex("0001 00000005 0102030405060708 00"))  # version 1


@pytest.mark.parametrize("record_type", [*range(3, 10), *range(16, 24)])
def test_consumer_and_streams_group_records_are_skipped(record_type: int) -> None:
    key = key_bytes(record_type, "g", "m")
    assert rec.decode_key(key) == rec.OtherKey(record_type)
    shard = GroupShard(0, GroupConfig(), lambda t, p: True)
    for loading in (True, False):
        shard.replay(key, b"\x00\x00whatever", loading=loading)
        shard.replay(key, None, loading=loading)
    assert shard.groups == {} and shard.share.groups == {}


def test_classic_keys_still_decode() -> None:
    assert rec.decode_key(rec.encode_offset_key(rec.OffsetKey("g", "t", 3))) == rec.OffsetKey("g", "t", 3)
    assert rec.decode_key(rec.encode_group_key(rec.GroupKey("g"))) == rec.GroupKey("g")
    with pytest.raises(rec.RecordFormatError):
        rec.decode_key(struct.pack(">h", -1))


# Kafka's OffsetCommitValue and GroupMetadataValue, every version it has written (0-4),
# hand-built from OffsetCommitValue.json and GroupMetadataValue.json: i16/i32/i64 fields,
# int16-length strings and int32-length bytes up to v3, compact ones and tagged fields in v4.

def b32(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def compact(data: bytes | None) -> bytes:
    return b"\x00" if data is None else bytes([len(data) + 1]) + data  # short: one varint byte


@pytest.mark.parametrize(("data", "expected"), [
    (struct.pack(">hq", 0, 42) + s16("m") + struct.pack(">q", 1000), rec.OffsetValue(42, -1, "m", 1000)),
    (struct.pack(">hq", 1, 42) + s16("m") + struct.pack(">qq", 1000, 9000),
     rec.OffsetValue(42, -1, "m", 1000, 9000)),
    (struct.pack(">hq", 2, 42) + s16("") + struct.pack(">q", 1000), rec.OffsetValue(42, -1, "", 1000)),
    (struct.pack(">hqi", 3, 42, 7) + s16("m") + struct.pack(">q", 1000), rec.OffsetValue(42, 7, "m", 1000)),
    # v4: flexible, with an unknown tagged field (tag 5, 2 bytes) at the end
    (struct.pack(">hqi", 4, 42, 7) + compact(b"m") + struct.pack(">q", 1000) + bytes.fromhex("01 05 02 abcd"),
     rec.OffsetValue(42, 7, "m", 1000)),
])
def test_every_kafka_offset_value_version_decodes(data: bytes, expected: rec.OffsetValue) -> None:
    assert rec.decode_offset_value(data) == expected


def group_value(version: int) -> bytes:
    """Group "consumer" generation 5, protocol range, leader m1, state timestamp 77 (v2+),
    one member m1 (instance i1 in v3+, rebalance timeout 300 in v1+, session 100)."""
    if version == 4:
        return (struct.pack(">h", 4) + compact(b"consumer") + struct.pack(">i", 5) + compact(b"range")
                + compact(b"m1") + struct.pack(">q", 77) + bytes([2])  # one member
                + compact(b"m1") + compact(b"i1") + compact(b"c") + compact(b"/h")
                + struct.pack(">ii", 300, 100) + compact(b"sub") + compact(b"asg")
                + bytes.fromhex("01 00 01 ff")  # the member's tagged fields: tag 0, 1 byte
                + b"\x00")
    member = (s16("m1") + (s16("i1") if version >= 3 else b"") + s16("c") + s16("/h")
              + (struct.pack(">i", 300) if version >= 1 else b"") + struct.pack(">i", 100)
              + b32(b"sub") + b32(b"asg"))
    return (struct.pack(">h", version) + s16("consumer") + struct.pack(">i", 5) + s16("range") + s16("m1")
            + (struct.pack(">q", 77) if version >= 2 else b"") + struct.pack(">i", 1) + member)


@pytest.mark.parametrize("version", range(5))
def test_every_kafka_group_value_version_decodes(version: int) -> None:
    value = rec.decode_group_value(group_value(version))
    assert (value.protocol_type, value.generation, value.protocol, value.leader) == ("consumer", 5, "range", "m1")
    assert value.state_timestamp == (77 if version >= 2 else -1)
    # v0 has no rebalance timeout: the session timeout stands for it (as Kafka reads it)
    assert value.members == (rec.MemberValue("m1", "i1" if version >= 3 else None, "c", "/h",
                                             300 if version >= 1 else 100, 100, b"sub", b"asg"),)


@pytest.mark.parametrize("data", [
    struct.pack(">h", 5) + b"\x00" * 40,  # a version Kafka has not written
    struct.pack(">hq", 3, 1)[:-3],  # truncated
    struct.pack(">hq", 0, 1) + struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">q", 0),  # not UTF-8
])
def test_unreadable_values_are_format_errors(data: bytes) -> None:
    with pytest.raises(rec.RecordFormatError):
        rec.decode_offset_value(data)
    with pytest.raises(rec.RecordFormatError):
        rec.decode_group_value(data)
