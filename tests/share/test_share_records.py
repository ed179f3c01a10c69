"""``__share_group_state`` records: Kafka 4.2's byte format and partitioning."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dmq.share import records as rec

TOPIC_ID = uuid.UUID("0123456789abcdef-fedcba9876543210".replace("-", ""))

i16 = st.integers(min_value=-(2**15), max_value=2**15 - 1)
i32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
batches = st.lists(st.builds(rec.StateBatch, i64, i64, st.sampled_from([0, 2, 4]), i16),
                   max_size=8).map(tuple)
snapshots = st.builds(rec.ShareSnapshotValue, i32, i32, i32, i64, i64, i64, batches, i32)
updates = st.builds(rec.ShareUpdateValue, i32, i32, i64, batches, i32)
keys = st.builds(rec.ShareStateKey, st.text(max_size=40), st.uuids(),
                 st.integers(min_value=0, max_value=2**31 - 1))


@given(snapshots)
def test_snapshot_value_round_trips(value: rec.ShareSnapshotValue) -> None:
    data = rec.encode_snapshot_value(value)
    assert rec.decode_snapshot_value(data) == value
    assert rec.decode_value(rec.SHARE_SNAPSHOT, data) == value


@given(updates)
def test_update_value_round_trips(value: rec.ShareUpdateValue) -> None:
    data = rec.encode_update_value(value)
    assert rec.decode_update_value(data) == value
    assert rec.decode_value(rec.SHARE_UPDATE, data) == value


@given(keys, st.sampled_from([rec.SHARE_SNAPSHOT, rec.SHARE_UPDATE]))
def test_key_round_trips(key: rec.ShareStateKey, record_type: int) -> None:
    assert rec.decode_key(rec.encode_key(record_type, key)) == (record_type, key)


@given(st.binary(max_size=120))
def test_garbage_is_a_format_error_not_a_crash(data: bytes) -> None:
    for decode in (rec.decode_key, rec.decode_snapshot_value, rec.decode_update_value):
        try:
            decode(data)
        except rec.RecordFormatError:
            pass


def test_a_tombstone_has_no_value() -> None:
    assert rec.decode_value(rec.SHARE_SNAPSHOT, None) is None


def test_key_layout_is_kafkas() -> None:
    key = rec.ShareStateKey("g1", TOPIC_ID, 3)
    expected = (b"\x00\x00"                      # record type 0: ShareSnapshot
                + b"\x00\x02g1"                  # GroupId: int16 length, not flexible
                + bytes.fromhex("0123456789abcdeffedcba9876543210")  # TopicId: 16 raw bytes
                + b"\x00\x00\x00\x03")           # Partition
    assert rec.encode_key(rec.SHARE_SNAPSHOT, key) == expected
    assert rec.encode_key(rec.SHARE_UPDATE, key) == b"\x00\x01" + expected[2:]


def test_snapshot_value_layout_is_kafkas() -> None:
    value = rec.ShareSnapshotValue(
        snapshot_epoch=1, state_epoch=2, leader_epoch=3, start_offset=100,
        create_timestamp=1_700_000_000_000, write_timestamp=1_700_000_000_500,
        state_batches=(rec.StateBatch(100, 104, 2, 1), rec.StateBatch(105, 105, 0, 3)),
        delivery_complete_count=5)
    expected = (
        b"\x00\x00"                                   # value version 0
        + b"\x00\x00\x00\x01"                         # SnapshotEpoch
        + b"\x00\x00\x00\x02"                         # StateEpoch
        + b"\x00\x00\x00\x03"                         # LeaderEpoch
        + b"\x00\x00\x00\x00\x00\x00\x00\x64"         # StartOffset 100
        + b"\x00\x00\x01\x8b\xcf\xe5\x68\x00"         # CreateTimestamp 1700000000000
        + b"\x00\x00\x01\x8b\xcf\xe5\x69\xf4"         # WriteTimestamp 1700000000500
        + b"\x03"                                     # StateBatches: compact, 2 + 1
        + b"\x00\x00\x00\x00\x00\x00\x00\x64"         #   FirstOffset 100
        + b"\x00\x00\x00\x00\x00\x00\x00\x68"         #   LastOffset 104
        + b"\x02" + b"\x00\x01"                       #   DeliveryState 2, DeliveryCount 1
        + b"\x00"                                     #   no tagged fields
        + b"\x00\x00\x00\x00\x00\x00\x00\x69"         #   FirstOffset 105
        + b"\x00\x00\x00\x00\x00\x00\x00\x69"         #   LastOffset 105
        + b"\x00" + b"\x00\x03"                       #   DeliveryState 0, DeliveryCount 3
        + b"\x00"                                     #   no tagged fields
        + b"\x01"                                     # one tagged field:
        + b"\x00" + b"\x04" + b"\x00\x00\x00\x05")    #   tag 0, 4 bytes, DeliveryCompleteCount 5
    assert rec.encode_snapshot_value(value) == expected
    assert rec.decode_snapshot_value(expected) == value


def test_update_value_layout_is_kafkas_and_an_unknown_count_is_not_written() -> None:
    value = rec.ShareUpdateValue(snapshot_epoch=7, leader_epoch=4, start_offset=-1, state_batches=())
    expected = (b"\x00\x00" + struct.pack(">iiq", 7, 4, -1)
                + b"\x01"      # StateBatches: empty (0 + 1)
                + b"\x00")     # no tagged fields: DeliveryCompleteCount -1 is the default
    assert rec.encode_update_value(value) == expected
    assert rec.decode_update_value(expected) == value


def test_unknown_tagged_fields_are_skipped() -> None:
    body = struct.pack(">iiq", 7, 4, 10) + b"\x02" + struct.pack(">qqbh", 10, 12, 4, 2)
    batch_tags = b"\x01" + b"\x05" + b"\x02" + b"ab"        # element: tag 5, 2 bytes
    value_tags = (b"\x02" + b"\x00\x04" + struct.pack(">i", 9)
                  + b"\x81\x01" + b"\x01" + b"z")           # then tag 129 (a 2-byte varint)
    value = rec.decode_update_value(b"\x00\x00" + body + batch_tags + value_tags)
    assert value == rec.ShareUpdateValue(7, 4, 10, (rec.StateBatch(10, 12, 4, 2),), 9)


def test_bad_versions_and_types_are_format_errors() -> None:
    with pytest.raises(rec.RecordFormatError, match="version 1"):
        rec.decode_snapshot_value(b"\x00\x01" + b"\x00" * 60)
    with pytest.raises(rec.RecordFormatError, match="record type 2"):
        rec.decode_key(b"\x00\x02\x00\x00" + b"\x00" * 20)
    with pytest.raises(rec.RecordFormatError, match="null StateBatches"):
        rec.decode_update_value(b"\x00\x00" + struct.pack(">iiq", 0, 0, 0) + b"\x00\x00")
    with pytest.raises(ValueError):
        rec.encode_key(3, rec.ShareStateKey("g", TOPIC_ID, 0))


def test_partition_is_kafkas_abs_of_the_java_hash_of_the_coordinator_key() -> None:
    # Expected values computed with Java: String.format("%s:%s:%d", group, Uuid, p).hashCode(),
    # Base64.getUrlEncoder().withoutPadding() for the topic id, Utils.abs(h) % 50.
    assert rec.topic_id_string(TOPIC_ID) == "ASNFZ4mrze_-3LqYdlQyEA"
    assert rec.coordinator_key("g", TOPIC_ID, 7) == "g:ASNFZ4mrze_-3LqYdlQyEA:7"
    assert rec.java_string_hash("g:ASNFZ4mrze_-3LqYdlQyEA:0") == 1102242264
    assert rec.partition_for("g", TOPIC_ID, 0, 50) == 14
    assert rec.partition_for("g", TOPIC_ID, 7, 50) == 21
    assert rec.partition_for("my-share-group", TOPIC_ID, 7, 50) == 26
    assert rec.java_string_hash("queue\u00e9:ASNFZ4mrze_-3LqYdlQyEA:0") == -1262285465
    assert rec.partition_for("queue\u00e9", TOPIC_ID, 0, 50) == 15
    assert rec.partition_for("queue\u00e9", TOPIC_ID, 7, 50) == 8
