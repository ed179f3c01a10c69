"""Control records: the commit and abort markers of transactions (sans-io).

A control batch has the transactional and control bits set in its attributes
and holds one record whose key says what it controls (Kafka's
``ControlRecordType``) and whose value carries the details. dmq writes and
reads the two transaction markers (Kafka's ``EndTransactionMarker``)::

    key   = version int16 (0), type int16 (0 ABORT, 1 COMMIT)
    value = version int16 (0), coordinator epoch int32

Readers follow Kafka: a key or value shorter than version 0's layout or with a
negative version is invalid; a newer version is read as version 0 (fields are
only ever appended). The other control types (KRaft's 2..6) are recognised
but are not transaction markers.

A marker batch is what Kafka's ``MemoryRecords.withEndTransactionMarker``
builds: magic 2, uncompressed, CreateTime, the producer's id and epoch, base
sequence -1, one record at offset delta 0.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

from dmq.record.batch import (
    CONTROL_MASK,
    NO_SEQUENCE,
    TRANSACTIONAL_MASK,
    InvalidRecordError,
    parse_header,
)
from dmq.record.records import decode_batch, encode_batch

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
CONTROL_KEY_SIZE = 4
END_TXN_MARKER_VALUE_SIZE = 6

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlRecordType(IntEnum):
    """Kafka's control record types; UNKNOWN stands for any id dmq does not know."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def from_id(cls, type_id: int) -> ControlRecordType:
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN


class EndTxnMarker(NamedTuple):
    """A transaction's commit or abort marker: its type and the coordinator epoch that wrote it."""

    control_type: ControlRecordType  # ABORT or COMMIT
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        return self.control_type == ControlRecordType.COMMIT

    @property
    def is_abort(self) -> bool:
        return self.control_type == ControlRecordType.ABORT


def encode_control_key(control_type: ControlRecordType) -> bytes:
    if control_type == ControlRecordType.UNKNOWN:
        raise ValueError("cannot serialize the UNKNOWN control record type")
    return _KEY.pack(CONTROL_KEY_VERSION, int(control_type))


def parse_control_type(key: bytes | None) -> ControlRecordType:
    """The type a control record's key names (UNKNOWN for an id dmq does not know)."""
    if key is None or len(key) < CONTROL_KEY_SIZE:
        raise InvalidRecordError(
            "corrupt_message",
            f"control record key must have at least {CONTROL_KEY_SIZE} bytes, "
            f"found {0 if key is None else len(key)}")
    version, type_id = _KEY.unpack_from(key, 0)
    if version < 0:
        raise InvalidRecordError("corrupt_message", f"invalid control record key version {version}")
    return ControlRecordType.from_id(type_id)


def encode_end_txn_marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def parse_end_txn_marker(key: bytes | None, value: bytes | None) -> EndTxnMarker:
    """Decode a transaction marker from its control record's key and value."""
    control_type = parse_control_type(key)
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise InvalidRecordError(
            "corrupt_message", f"control record type {control_type.name} is not a transaction marker")
    if value is None or len(value) < END_TXN_MARKER_VALUE_SIZE:
        raise InvalidRecordError(
            "corrupt_message",
            f"end transaction marker value must have at least {END_TXN_MARKER_VALUE_SIZE} bytes, "
            f"found {0 if value is None else len(value)}")
    version, coordinator_epoch = _VALUE.unpack_from(value, 0)
    if version < 0:
        raise InvalidRecordError("corrupt_message", f"invalid end transaction marker version {version}")
    return EndTxnMarker(control_type, coordinator_epoch)


def build_end_txn_marker_batch(
    marker: EndTxnMarker,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One control batch holding ``marker``, as the transaction coordinator asks a leader to write it."""
    if marker.control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise ValueError(f"{marker.control_type!r} is not a transaction marker type")
    return encode_batch(
        [(encode_control_key(marker.control_type), encode_end_txn_marker_value(marker.coordinator_epoch), [])],
        base_offset=base_offset,
        timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        partition_leader_epoch=partition_leader_epoch,
        attributes_extra=TRANSACTIONAL_MASK | CONTROL_MASK,
    )


def read_end_txn_marker(batch: bytes | bytearray | memoryview) -> EndTxnMarker | None:
    """The marker of a whole control batch; None when the batch holds no record or no marker.

    A control batch emptied by the cleaner holds no record (Kafka: the whole
    transaction was cleaned away); KRaft's control types are not markers.
    Raises InvalidRecordError for a batch that is not a control batch or a
    marker that cannot be read.
    """
    header = parse_header(batch, 0)
    if not header.is_control:
        raise InvalidRecordError("invalid_record", "not a control batch")
    if header.record_count == 0:
        return None
    try:
        _, records = decode_batch(memoryview(batch))
    except Exception as e:  # truncated varints, bad compressed data
        raise InvalidRecordError("corrupt_message", f"cannot read control record: {e}") from None
    if not records:
        return None
    record = records[0]
    control_type = parse_control_type(record.key)
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return None
    return parse_end_txn_marker(record.key, record.value)
