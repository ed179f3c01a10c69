"""Record batch (magic v2) helpers: sans-io, bytes in, values out.

Wire layout of one batch (Kafka's ``DefaultRecordBatch``), big-endian::

    0  baseOffset            int64
    8  batchLength           int32   bytes after this field
    12 partitionLeaderEpoch  int32
    16 magic                 int8    always 2
    17 crc                   uint32  CRC32C of bytes [21, 12 + batchLength)
    21 attributes            int16   bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control,
                                     6 delete horizon (baseTimestamp is then the cleaner's delete horizon)
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordCount           int32
    61 records...

The broker treats batches as opaque once validated: it checks the header, the CRC
and that the batch's records (decompressed) parse (``dmq.record.check``), then only
patches ``baseOffset`` and ``partitionLeaderEpoch`` (outside the CRC) and, for
LogAppendTime topics, ``attributes``/``maxTimestamp`` (which needs a new CRC).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

from dmq.record import compression
from dmq.record.check import check_records

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
CRC_START = 21
MAGIC_V2 = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

# A produced batch may decompress to this much, or to 4 x max.message.bytes when that
# is more (see _check_records).
DECOMPRESSED_LIMIT = 64 << 20

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch on the wire and on disk."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When the cleaner may drop this batch's tombstones or marker (Kafka's KIP-534 field)."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Sequences wrap at Int32.MAX like Kafka's DefaultRecordBatch.incrementSequence.
        return (self.base_sequence + self.last_offset_delta) % (2**31)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


class InvalidRecordError(Exception):
    """A batch failed validation; ``error`` names the Kafka error code to return."""

    def __init__(self, error: str, message: str, record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.error = error  # attribute name of kio's ErrorCode, e.g. "corrupt_message"
        # (index of the record in the request's records, why it was refused): Produce v8's
        # record_errors, as Kafka's RecordValidationException
        self.record_errors = record_errors


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    return crc32c(memoryview(buf)[pos + CRC_START : pos + size])


@dataclass(slots=True)
class ValidatedBatches:
    """The result of validating the records of one produce partition. ``headerless``
    holds the positions of the batches none of whose records has a header (None: not
    known, as for batches dmq made itself)."""

    headers: list[BatchHeader]
    positions: list[int]
    record_count: int
    max_timestamp: int
    total_size: int
    headerless: frozenset[int] | None = None


def validate_batches(
    buf: bytes | bytearray | memoryview,
    max_batch_size: int,
) -> ValidatedBatches:
    """Validate every batch in ``buf`` (as sent by a producer).

    Checks magic, sizes (MESSAGE_TOO_LARGE past ``max_batch_size``), CRC32C
    (CORRUPT_MESSAGE), that the buffer holds whole batches only and that the records
    of each batch, decompressed, parse (INVALID_RECORD, as Kafka: ``dmq.record.check``).
    """
    total = len(buf)
    if total == 0:
        raise InvalidRecordError("invalid_record", "empty record set")
    pos = 0
    headers: list[BatchHeader] = []
    positions: list[int] = []
    headerless: set[int] = set()
    count = 0
    max_ts = -1
    while pos < total:
        if total - pos < HEADER_SIZE:
            raise InvalidRecordError("corrupt_message", "truncated record batch header")
        header = parse_header(buf, pos)
        if header.magic != MAGIC_V2:
            # INVALID_RECORD, as Kafka's ProduceRequest.validateRecords answers from Produce v3 on
            raise InvalidRecordError(
                "invalid_record",
                f"record batch magic {header.magic} is not supported; only magic 2 is",
            )
        if header.batch_length < MIN_BATCH_LENGTH:
            raise InvalidRecordError("corrupt_message", "record batch length too small")
        size = header.size
        if size > max_batch_size:
            raise InvalidRecordError(
                "message_too_large",
                f"record batch of {size} bytes exceeds max.message.bytes {max_batch_size}",
            )
        if pos + size > total:
            raise InvalidRecordError("corrupt_message", "truncated record batch")
        if compute_crc(buf, pos, size) != header.crc:
            raise InvalidRecordError("corrupt_message", "record batch CRC32C mismatch")
        if header.last_offset_delta < 0 or header.record_count < 0:
            raise InvalidRecordError("corrupt_message", "negative record count or offset delta")
        if header.record_count != header.last_offset_delta + 1 and not header.is_control:
            # Producers always send dense batches; a mismatch means a broken client.
            raise InvalidRecordError(
                "invalid_record",
                f"record count {header.record_count} does not match last offset delta "
                f"{header.last_offset_delta}",
            )
        if not _check_records(buf, pos, header, max_batch_size):
            headerless.add(pos)
        headers.append(header)
        positions.append(pos)
        count += header.record_count
        if header.max_timestamp > max_ts:
            max_ts = header.max_timestamp
        pos += size
    return ValidatedBatches(headers, positions, count, max_ts, total, frozenset(headerless))


def _check_records(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader,
                   max_batch_size: int) -> int:
    """Kafka reads every record of a produced batch, decompressing it first, and answers
    INVALID_RECORD when they do not parse: such a batch, appended, would stop every
    consumer of its partition. A codec id Kafka lacks is UNSUPPORTED_COMPRESSION_TYPE.
    Unlike Kafka, a batch may decompress to at most ``DECOMPRESSED_LIMIT`` or four times
    ``max_batch_size`` (INVALID_RECORD past that): Kafka reads a compressed batch record by
    record, dmq decompresses it whole."""
    body: bytes | bytearray | memoryview = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    codec = header.attributes & COMPRESSION_MASK
    try:
        if codec:
            body = compression.decompress_bounded(codec, bytes(body), max(DECOMPRESSED_LIMIT, 4 * max_batch_size))
        return check_records(body, header.record_count)
    except compression.UnsupportedCodecError as e:
        raise InvalidRecordError("unsupported_compression_type", str(e)) from None
    except ValueError as e:
        raise InvalidRecordError("invalid_record", f"the records of a batch do not parse: {e}") from None


def recompressed(buf: bytes | bytearray | memoryview, validated: ValidatedBatches, target: int,
                 max_batch_size: int, level: int | None = None) -> bytearray | None:
    """The batches of ``buf`` with their records compressed by codec ``target`` (Kafka's
    topic ``compression.type`` other than ``producer``: LogValidator's recompression), or
    None when every batch already is (or is a control batch, which no producer sends).

    Only the records section and the header's codec bits, ``batchLength`` and CRC change:
    offsets, timestamps, the producer id, epoch and sequence stay, so idempotence and
    transactions see the batch the producer sent. ``level``: the codec's level (None:
    its default). The caller validates the result again (its size against
    ``max.message.bytes``, as Kafka checks the recompressed batch)."""
    if all(h.compression == target or h.is_control for h in validated.headers):
        return None
    view = memoryview(buf)
    out = bytearray()
    limit = max(DECOMPRESSED_LIMIT, 4 * max_batch_size)
    for header, pos in zip(validated.headers, validated.positions, strict=True):
        if header.compression == target or header.is_control:
            out += view[pos : pos + header.size]
            continue
        body = bytes(view[pos + HEADER_SIZE : pos + header.size])
        if header.compression:
            body = bytes(compression.decompress_bounded(header.compression, body, limit))
        if target:
            body = compression.compress(target, body, level)
        start = len(out)
        out += _HEADER.pack(header.base_offset, MIN_BATCH_LENGTH + len(body), header.partition_leader_epoch,
                            header.magic, 0, (header.attributes & ~COMPRESSION_MASK) | target,
                            header.last_offset_delta, header.base_timestamp, header.max_timestamp,
                            header.producer_id, header.producer_epoch, header.base_sequence,
                            header.record_count)
        out += body
        _U32.pack_into(out, start + 17, compute_crc(out, start, len(out) - start))
    return out


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    _I64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    _I32.pack_into(buf, pos + 12, epoch)


def set_log_append_time(buf: bytearray, pos: int, size: int, timestamp: int) -> None:
    """Mark the batch as LogAppendTime with ``timestamp`` and recompute its CRC."""
    attributes = _I16.unpack_from(buf, pos + 21)[0]
    _I16.pack_into(buf, pos + 21, attributes | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, pos + 35, timestamp)
    _U32.pack_into(buf, pos + 17, compute_crc(buf, pos, size))


def iter_headers(buf: bytes | bytearray | memoryview) -> list[tuple[int, BatchHeader]]:
    """All complete batch headers in ``buf`` with their positions (no CRC check)."""
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    total = len(buf)
    while total - pos >= HEADER_SIZE:
        header = parse_header(buf, pos)
        if pos + header.size > total or header.batch_length < MIN_BATCH_LENGTH:
            break
        out.append((pos, header))
        pos += header.size
    return out
