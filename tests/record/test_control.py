from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.record.batch import NO_SEQUENCE, InvalidRecordError, parse_header, validate_batches
from dmq.record.control import (
    ControlRecordType,
    EndTxnMarker,
    build_end_txn_marker_batch,
    encode_control_key,
    encode_end_txn_marker_value,
    parse_control_type,
    parse_end_txn_marker,
    read_end_txn_marker,
)
from dmq.record.records import decode_batch, encode_batch

marker_types = st.sampled_from([ControlRecordType.ABORT, ControlRecordType.COMMIT])
int32 = st.integers(-(2**31), 2**31 - 1)
markers = st.builds(EndTxnMarker, marker_types, int32)


@settings(max_examples=200, deadline=None)
@given(markers)
def test_marker_key_and_value_round_trip(marker: EndTxnMarker) -> None:
    key = encode_control_key(marker.control_type)
    value = encode_end_txn_marker_value(marker.coordinator_epoch)
    assert len(key) == 4 and len(value) == 6
    assert parse_end_txn_marker(key, value) == marker
    assert marker.is_commit == (marker.control_type == ControlRecordType.COMMIT) != marker.is_abort


@settings(max_examples=200, deadline=None)
@given(markers, st.integers(0, 2**62), st.integers(0, 2**15 - 1), st.integers(0, 2**41),
       st.integers(0, 2**40), st.integers(-1, 2**31 - 1))
def test_marker_batch_round_trip(marker: EndTxnMarker, producer_id: int, producer_epoch: int,
                                 timestamp: int, base_offset: int, leader_epoch: int) -> None:
    batch = build_end_txn_marker_batch(marker, producer_id=producer_id, producer_epoch=producer_epoch,
                                       timestamp=timestamp, base_offset=base_offset,
                                       partition_leader_epoch=leader_epoch)
    validated = validate_batches(batch, 10**6)  # a whole batch with a valid CRC
    assert validated.record_count == 1
    header = parse_header(batch)
    assert header.is_control and header.is_transactional and header.compression == 0
    assert not header.is_log_append_time and header.delete_horizon_ms is None
    assert (header.producer_id, header.producer_epoch) == (producer_id, producer_epoch)
    assert header.base_sequence == NO_SEQUENCE and header.last_offset_delta == 0
    assert (header.base_offset, header.partition_leader_epoch) == (base_offset, leader_epoch)
    assert header.max_timestamp == timestamp
    assert read_end_txn_marker(batch) == marker
    _, records = decode_batch(batch)
    assert [r.offset for r in records] == [base_offset] and records[0].headers == []


def test_marker_bytes_are_kafkas() -> None:
    # Kafka: key = version 0, type; value = version 0, coordinator epoch, all big-endian.
    assert encode_control_key(ControlRecordType.ABORT) == b"\x00\x00\x00\x00"
    assert encode_control_key(ControlRecordType.COMMIT) == b"\x00\x00\x00\x01"
    assert encode_end_txn_marker_value(7) == b"\x00\x00\x00\x00\x00\x07"


@settings(max_examples=100, deadline=None)
@given(marker_types, int32, st.integers(1, 2**15 - 1), st.binary(max_size=8), st.binary(max_size=8))
def test_newer_versions_read_as_version_0(control_type: ControlRecordType, epoch: int, version: int,
                                          key_tail: bytes, value_tail: bytes) -> None:
    key = struct.pack(">hh", version, control_type) + key_tail
    value = struct.pack(">hi", version, epoch) + value_tail
    assert parse_end_txn_marker(key, value) == EndTxnMarker(control_type, epoch)


@pytest.mark.parametrize(("key", "value"), [
    (None, b"\x00\x00\x00\x00\x00\x01"),
    (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01"),            # key too short
    (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01"),        # negative key version
    (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00"),            # value too short
    (b"\x00\x00\x00\x01", None),
    (b"\x00\x00\x00\x01", b"\xff\xfe\x00\x00\x00\x01"),        # negative value version
    (b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x01"),        # LEADER_CHANGE is no marker
])
def test_invalid_markers_are_refused(key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(InvalidRecordError):
        parse_end_txn_marker(key, value)


def test_control_types() -> None:
    assert parse_control_type(b"\x00\x00\x00\x05") == ControlRecordType.KRAFT_VERSION
    assert parse_control_type(b"\x00\x00\x00\x63") == ControlRecordType.UNKNOWN
    with pytest.raises(ValueError):
        encode_control_key(ControlRecordType.UNKNOWN)
    with pytest.raises(ValueError):
        build_end_txn_marker_batch(EndTxnMarker(ControlRecordType.LEADER_CHANGE, 0),
                                   producer_id=1, producer_epoch=0, timestamp=0)


def test_read_end_txn_marker_of_other_batches() -> None:
    with pytest.raises(InvalidRecordError):
        read_end_txn_marker(encode_batch([(b"k", b"v", [])]))  # a data batch
    # A control batch the cleaner emptied, and a KRaft control record: no marker.
    empty = encode_batch([], attributes_extra=0x30, producer_id=3, producer_epoch=0)
    assert read_end_txn_marker(empty) is None
    leader_change = encode_batch([(b"\x00\x00\x00\x02", b"", [])], attributes_extra=0x20)
    assert read_end_txn_marker(leader_change) is None
    broken = encode_batch([(b"\x00\x00\x00\x01", b"\x00", [])], attributes_extra=0x30)
    with pytest.raises(InvalidRecordError):
        read_end_txn_marker(broken)
