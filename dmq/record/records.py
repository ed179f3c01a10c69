"""Encode and decode the records inside a v2 batch (sans-io).

The broker's hot path never calls this module: produce and fetch move batches
as opaque bytes. It is used where a feature must look inside a batch (offset
of the first record at or after a timestamp, offset of the max timestamp, the
keys the background key indexer reads, the records a query returns) and by
tests and tools that build batches by hand.

Record layout (varints are zig-zag)::

    length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength varint, key, valueLength varint, value,
    headerCount varint, [headerKeyLength varint, key, headerValueLength varint, value]...
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from crc32c import crc32c

from dmq.record import compression
from dmq.record.batch import (
    COMPRESSION_MASK,
    CRC_START,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    parse_header,
)

_HEADER = struct.Struct(">qiibIhiqqqhii")


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def write_varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)
    while v & ~0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
    return (result >> 1) ^ -(result & 1), pos


def _read_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise ValueError("truncated record field")
    return bytes(buf[pos : pos + length]), pos + length


def decode_batch(batch: bytes | memoryview) -> tuple[BatchHeader, list[Record]]:
    """Decode one whole batch (decompressing when needed)."""
    header = parse_header(batch, 0)
    body = memoryview(batch)[HEADER_SIZE : header.size]
    if header.compression:
        body = memoryview(compression.decompress(header.compression, bytes(body)))
    records: list[Record] = []
    pos = 0
    log_append = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    for _ in range(header.record_count):
        _length, pos = read_varint(body, pos)
        pos += 1  # attributes
        ts_delta, pos = read_varint(body, pos)
        off_delta, pos = read_varint(body, pos)
        key, pos = _read_bytes(body, pos)
        value, pos = _read_bytes(body, pos)
        n_headers, pos = read_varint(body, pos)
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(n_headers):
            hk, pos = _read_bytes(body, pos)
            hv, pos = _read_bytes(body, pos)
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        ts = header.max_timestamp if log_append else header.base_timestamp + ts_delta
        records.append(Record(header.base_offset + off_delta, ts, key, value, headers))
    return header, records


def batch_body(batch: bytes | memoryview, header: BatchHeader) -> bytes:
    """The records of a whole batch as plain bytes, decompressed when the batch is compressed."""
    body = memoryview(batch)[HEADER_SIZE : header.size]
    if header.compression:
        return compression.decompress(header.compression, bytes(body))
    return bytes(body)


def _varint_at(body: bytes | memoryview, pos: int) -> tuple[int, int]:
    """``read_varint`` with the one- and two-byte cases inline (deltas and key lengths are
    small, record lengths mostly below 8 KiB)."""
    b = body[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    b2 = body[pos + 1]
    if b2 < 0x80:
        v = (b & 0x7F) | (b2 << 7)
        return (v >> 1) ^ -(v & 1), pos + 2
    return read_varint(body, pos)


def keyed_offsets(batch: bytes | memoryview) -> tuple[BatchHeader, list[tuple[int, bytes]]]:
    """(offset, key) of every record of a whole batch that has a key, in offset order.

    Values and headers are skipped, not decoded. Raises ValueError when the
    records do not parse (or UnsupportedCodecError for an unknown codec).
    """
    header = parse_header(batch, 0)
    out, _ = record_keys(batch_body(batch, header), header.base_offset, header.record_count)
    return header, out


def _walk_keys(body: bytes | memoryview, count: int, pos: int,
               on_key: Callable[[int, int, int, int], bool]) -> int:
    """The one Python walk over the keys of ``count`` records from ``pos``: for each record
    with a key, ``on_key(record start, offset delta, key start, key length)``, which returns
    False to stop there. Returns the position after the records, or the start of the record
    ``on_key`` stopped at. ValueError when the records do not parse."""
    # One call per record costs as much as the rest of its parsing, so the one-byte
    # varints (key lengths, most deltas) are read inline, and a record without a key
    # stops at its key length's first byte (zigzag -1 is 0x01).
    size = len(body)
    try:
        for _ in range(count):
            start = pos
            b = body[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (b2 := body[pos + 1]) < 0x80:  # records of 64 B to 8 KiB
                v = (b & 0x7F) | (b2 << 7)
                length = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                length, pos = _varint_at(body, pos)
            end = pos + length
            if length < 0 or end > size:
                raise ValueError("record extends past its batch")
            p = pos + 1  # after the attributes byte
            if body[p] < 0x80:  # the timestamp delta, skipped
                p += 1
            else:
                _ts_delta, p = _varint_at(body, p)
            delta_at = p  # the offset delta, decoded only for a record with a key
            while body[p] & 0x80:
                p += 1
            b = body[p + 1]
            if b < 0x80:
                if b & 1:  # a negative length: no key
                    pos = end
                    continue
                key_length = b >> 1
                p += 2
            else:
                key_length, p = _varint_at(body, p + 1)
            off_delta = _varint_at(body, delta_at)[0]
            if key_length >= 0:
                if p + key_length > end:
                    raise ValueError("record key extends past its record")
                if not on_key(start, off_delta, p, key_length):
                    return start
            pos = end
    except IndexError:
        raise ValueError("truncated record") from None
    return pos


def record_keys(body: bytes, base_offset: int, count: int,
                pos: int = 0) -> tuple[list[tuple[int, bytes]], int]:
    """``keyed_offsets`` of ``count`` records of a batch body (``batch_body``) from ``pos``:
    (offset, key) of those with a key, and the position after them, so a long batch can
    be read a piece at a time."""
    out: list[tuple[int, bytes]] = []

    def on_key(_start: int, off_delta: int, key_at: int, key_length: int) -> bool:
        out.append((base_offset + off_delta, body[key_at : key_at + key_length]))
        return True

    return out, _walk_keys(body, count, pos, on_key)


def key_entries_py(body: bytes | memoryview, count: int, pos: int, base_offset: int, segment_base: int,
                   max_relative: int, out: list[int]) -> tuple[int, int, int | None]:
    """The key indexer's walk over ``count`` records of a batch body from ``pos``: for each
    record with a key, ``crc32c(key) << 32 | (offset - segment_base)`` (a key index entry,
    ``dmq.storage.key_index``) is appended to ``out``. Returns (position after them,
    entries appended, None); or, at the first keyed record whose offset is not within
    ``segment_base + [0, max_relative]``, (that record's position, entries appended before
    it, its offset). ValueError where ``record_keys`` raises it.

    ``key_entries`` is the C walk (``dmq.record._recordcheck``) where it is built, this
    one without it; a Hypothesis property checks they answer the same for any bytes."""
    if pos < 0:  # Python would index from the end
        raise ValueError("truncated record")
    appended = len(out)
    too_far: int | None = None

    def on_key(_start: int, off_delta: int, key_at: int, key_length: int) -> bool:
        nonlocal too_far
        offset = base_offset + off_delta
        relative = offset - segment_base
        if not 0 <= relative <= max_relative:
            too_far = offset
            return False
        out.append(crc32c(body[key_at : key_at + key_length]) << 32 | relative)
        return True

    end = _walk_keys(body, count, pos, on_key)
    return end, len(out) - appended, too_far


KeyEntries = Callable[[bytes | memoryview, int, int, int, int, int, list[int]], tuple[int, int, int | None]]
key_entries: KeyEntries
try:
    from dmq.record._recordcheck import key_entries as _key_entries_c  # type: ignore[import-not-found]
except ImportError:  # built without a C compiler: the Python walk
    key_entries = key_entries_py
else:
    key_entries = _key_entries_c


def find_records(batch: bytes | memoryview, key: bytes | None = None,
                 offsets: Collection[int] | None = None) -> tuple[BatchHeader, list[Record]]:
    """Decode only the records of a whole batch with key ``key`` (when given) and an
    offset in ``offsets`` (when given); the others are skipped by their length.

    In a dense batch (as producers write them: offset deltas 0, 1, 2, ...) the i-th
    record has delta i, so records before a wanted offset are skipped reading their
    length alone, and none after the last wanted one is read."""
    header = parse_header(batch, 0)
    base = header.base_offset
    count = header.record_count
    wanted: set[int] | None = None  # indexes of the wanted records, in a dense batch
    if offsets is not None:
        deltas = [o - base for o in offsets if 0 <= o - base <= header.last_offset_delta]
        if not deltas:
            return header, []
        if count == header.last_offset_delta + 1:
            wanted = set(deltas)
            count = max(deltas) + 1
    body = batch_body(batch, header)
    log_append = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    out: list[Record] = []
    pos, size = 0, len(body)
    try:
        for i in range(count):
            length, pos = _varint_at(body, pos)
            end = pos + length
            if length < 0 or end > size:
                raise ValueError("record extends past its batch")
            if wanted is not None and i not in wanted:
                pos = end
                continue
            ts_delta, p = _varint_at(body, pos + 1)
            off_delta, p = _varint_at(body, p)
            pos, start = end, p
            if offsets is not None and base + off_delta not in offsets:
                continue
            if key is not None:
                key_length, p = _varint_at(body, p)
                if key_length != len(key) or not body.startswith(key, p):
                    continue
            record_key, p = _read_bytes(body, start)
            value, p = _read_bytes(body, p)
            n_headers, p = read_varint(body, p)
            headers: list[tuple[str, bytes | None]] = []
            for _h in range(n_headers):
                hk, p = _read_bytes(body, p)
                hv, p = _read_bytes(body, p)
                headers.append(((hk or b"").decode("utf-8", "replace"), hv))
            if p > end:
                raise ValueError("record extends past its length")
            ts = header.max_timestamp if log_append else header.base_timestamp + ts_delta
            out.append(Record(base + off_delta, ts, record_key, value, headers))
    except IndexError:
        raise ValueError("truncated record") from None
    return header, out


def encode_batch(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    *,
    base_offset: int = 0,
    timestamp: int = 0,
    timestamps: list[int] | None = None,
    codec: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = -1,
    attributes_extra: int = 0,
) -> bytes:
    """Build a v2 batch from (key, value, headers) tuples, as a producer would."""
    ts_list = timestamps if timestamps is not None else [timestamp] * len(records)
    base_ts = min(ts_list) if ts_list else timestamp
    max_ts = max(ts_list) if ts_list else timestamp
    body = bytearray()
    for i, (key, value, headers) in enumerate(records):
        rec = bytearray()
        rec.append(0)
        write_varint(rec, ts_list[i] - base_ts)
        write_varint(rec, i)
        for blob in (key, value):
            if blob is None:
                write_varint(rec, -1)
            else:
                write_varint(rec, len(blob))
                rec += blob
        write_varint(rec, len(headers))
        for hk, hv in headers:
            hkb = hk.encode()
            write_varint(rec, len(hkb))
            rec += hkb
            if hv is None:
                write_varint(rec, -1)
            else:
                write_varint(rec, len(hv))
                rec += hv
        write_varint(body, len(rec))
        body += rec
    payload = compression.compress(codec, bytes(body)) if codec else bytes(body)
    attributes = (codec & 0x07) | attributes_extra
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    out = bytearray(
        _HEADER.pack(
            base_offset,
            batch_length,
            partition_leader_epoch,
            2,
            0,
            attributes,
            len(records) - 1,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    out += payload
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


@dataclass(slots=True)
class RawRecord:
    """One record of a batch, kept as its exact bytes (length prefix included)."""

    raw: bytes
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def raw_records(batch: bytes | memoryview) -> tuple[BatchHeader, list[RawRecord]]:
    """Split a whole batch into its records without re-encoding them."""
    header = parse_header(batch, 0)
    body: bytes | memoryview = memoryview(batch)[HEADER_SIZE : header.size]
    if header.compression:
        body = compression.decompress(header.compression, bytes(body))
    out: list[RawRecord] = []
    pos = 0
    log_append = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    for _ in range(header.record_count):
        start = pos
        length, pos = read_varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise ValueError("record extends past its batch")
        p = pos + 1  # attributes
        ts_delta, p = read_varint(body, p)
        off_delta, p = read_varint(body, p)
        key, p = _read_bytes(body, p)
        value, p = _read_bytes(body, p)
        ts = header.max_timestamp if log_append else header.base_timestamp + ts_delta
        out.append(RawRecord(bytes(body[start:end]), header.base_offset + off_delta, ts, key, value))
        pos = end
    return header, out


def rebuild_batch(batch: bytes, kept: list[RawRecord], delete_horizon_ms: int | None = None) -> bytes:
    """The same batch (header fields, codec, offsets) holding only ``kept`` records.

    With ``delete_horizon_ms`` the batch is marked with the cleaner's delete
    horizon as Kafka does (attribute bit 6, base timestamp = the horizon): each
    kept record is re-encoded with its timestamp delta from the new base, so
    record timestamps do not change.

    A batch left with no records is uncompressed, an empty records section (Kafka's
    DefaultRecordBatch.writeEmptyHeader): a compressed empty section (say an lz4
    frame of nothing) makes librdkafka's consumers abort.

    A CreateTime batch's max timestamp is the kept records' largest, as Kafka's
    MemoryRecords.filterTo rebuilds it, so no batch claims a timestamp no record has
    (ListOffsets MAX_TIMESTAMP, time indexes, retention.ms); a LogAppendTime batch and
    an emptied one keep theirs.
    """
    header = parse_header(batch, 0)
    if delete_horizon_ms is None:
        body = b"".join(r.raw for r in kept)
    else:
        body = b"".join(_with_timestamp_base(r, delete_horizon_ms) for r in kept)
    attributes = header.attributes
    if header.compression and kept:
        body = compression.compress(header.compression, body)
    elif header.compression:
        attributes &= ~COMPRESSION_MASK
    out = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">i", out, 8, HEADER_SIZE - LOG_OVERHEAD + len(body))
    struct.pack_into(">i", out, 57, len(kept))
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
        struct.pack_into(">q", out, 27, delete_horizon_ms)
    if kept and not attributes & TIMESTAMP_TYPE_MASK:
        struct.pack_into(">q", out, 35, max(r.timestamp for r in kept))
    struct.pack_into(">h", out, 21, attributes)
    out += body
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def _with_timestamp_base(record: RawRecord, base_timestamp: int) -> bytes:
    """``record`` re-encoded with its timestamp as a delta from ``base_timestamp``."""
    raw = record.raw
    _length, pos = read_varint(raw, 0)
    attributes = raw[pos]
    _old_delta, rest = read_varint(raw, pos + 1)  # offset delta, key, value, headers follow
    inner = bytearray([attributes])
    write_varint(inner, record.timestamp - base_timestamp)
    inner += raw[rest:]
    out = bytearray()
    write_varint(out, len(inner))
    return bytes(out + inner)
