"""Delayed delivery in the record format (sans-io): the headers that ask for it, the
control records that hold a delayed record until its time, and the batches that deliver it.

A producer delays a record with a header whose value is decimal ASCII:

- ``dmq-delay-ms``: milliseconds from the broker's receipt;
- ``dmq-deliver-at``: epoch milliseconds.

The partition leader takes such records out of their batch (``split``). The batch
keeps its base offset, last offset delta, producer id and sequences — the delayed
records' offsets become gaps, as after compaction — so idempotence and
transactions see the batch the producer sent. The delayed records go into one
control batch right after it, a DELAYED control record each. Kafka clients skip
control batches and ignore control types they do not know, so a delayed record is
invisible until the leader, at its time, appends a DELIVERED control record naming
it followed by a normal batch holding the record again (``delivery``). A record
whose time has already come stays where it is, untouched.

Control records (Kafka's key layout: version int16 0, type int16; types far from
Kafka's 0-6), in batches with producer id -1, uncompressed::

    DELAYED (32000) value:
      version      int16   0
      deliver_at   int64   epoch ms
      producer_id  int64   -1, or the transactional producer whose commit it waits for
      timestamp    int64   the record's own timestamp (CreateTime)
      key          int32 length (-1: null), bytes
      value        int32 length (-1: null), bytes
      headers      int32 count; each: int16 length, utf-8 key, int32 length (-1: null), value
                   (the delay headers removed)

    DELIVERED (32001) value:
      version      int16   0
      count        int32
      entries      count x (offset int64, deliver_at int64): the DELAYED records delivered
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from dmq.record.batch import (
    CONTROL_MASK,
    HEADER_SIZE,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
    InvalidRecordError,
    ValidatedBatches,
    parse_header,
    recompressed,
    validate_batches,
)
from dmq.record.compression import decompress
from dmq.record.records import decode_batch, encode_batch, raw_records, rebuild_batch

DELAY_MS_HEADER = "dmq-delay-ms"
DELIVER_AT_HEADER = "dmq-deliver-at"
_HEADER_PREFIX = b"dmq-de"  # common to both header names: a fast pre-check
DELAYED_TYPE = 32000
DELIVERED_TYPE = 32001
VALUE_VERSION = 0

_KEY = struct.Struct(">hh")
_DELAYED_HEAD = struct.Struct(">hqqq")
_DELIVERED_HEAD = struct.Struct(">hi")
_ENTRY = struct.Struct(">qq")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


@dataclass(slots=True)
class DelayedRecord:
    """A record held back until ``deliver_at`` (epoch ms)."""

    deliver_at: int
    producer_id: int  # -1, or the transactional producer whose commit it waits for
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(slots=True)
class Split:
    """A produce request's batches with their delayed records taken out: ``records``
    and ``batches`` to append in their place; ``control_positions`` are the positions
    of the DELAYED control batches dmq itself made (the rest are the producer's)."""

    records: bytes
    batches: ValidatedBatches
    control_positions: frozenset[int]
    delayed: int  # records delayed


def control_key(control_type: int) -> bytes:
    return _KEY.pack(0, control_type)


def control_type_of(key: bytes | None) -> int | None:
    """The type a control record's key names, or None when the key is not one."""
    if key is None or len(key) < 4:
        return None
    version, control_type = _KEY.unpack_from(key, 0)
    return control_type if version >= 0 else None


# ---------------------------------------------------------------- DELAYED values


def _put_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(data))
        out += data


def encode_delayed(record: DelayedRecord) -> bytes:
    out = bytearray(_DELAYED_HEAD.pack(VALUE_VERSION, record.deliver_at, record.producer_id,
                                       record.timestamp))
    _put_bytes(out, record.key)
    _put_bytes(out, record.value)
    out += _I32.pack(len(record.headers))
    for name, value in record.headers:
        encoded = name.encode()
        out += _I16.pack(len(encoded))
        out += encoded
        _put_bytes(out, value)
    return bytes(out)


def decode_delayed(value: bytes | None) -> DelayedRecord:
    """A DELAYED control record's value; InvalidRecordError when it does not parse."""
    try:
        assert value is not None
        version, deliver_at, producer_id, timestamp = _DELAYED_HEAD.unpack_from(value, 0)
        if version < 0:
            raise ValueError(f"version {version}")
        pos = _DELAYED_HEAD.size

        def take(pos: int) -> tuple[bytes | None, int]:
            (n,) = _I32.unpack_from(value, pos)
            pos += 4
            if n < 0:
                return None, pos
            if pos + n > len(value):
                raise ValueError("truncated")
            return value[pos : pos + n], pos + n

        key, pos = take(pos)
        data, pos = take(pos)
        (count,) = _I32.unpack_from(value, pos)
        pos += 4
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(count):
            (n,) = _I16.unpack_from(value, pos)
            pos += 2
            name = value[pos : pos + n].decode()
            pos += n
            header_value, pos = take(pos)
            headers.append((name, header_value))
    except (AssertionError, ValueError, struct.error, UnicodeDecodeError) as e:
        raise InvalidRecordError("corrupt_message", f"unreadable DELAYED control record: {e}") from None
    return DelayedRecord(deliver_at, producer_id, timestamp, key, data, headers)


def encode_delivered(entries: list[tuple[int, int]]) -> bytes:
    return _DELIVERED_HEAD.pack(VALUE_VERSION, len(entries)) + b"".join(
        _ENTRY.pack(offset, deliver_at) for offset, deliver_at in entries)


def decode_delivered(value: bytes | None) -> list[tuple[int, int]]:
    """(offset, deliver_at) of the DELAYED records a DELIVERED control record names."""
    try:
        assert value is not None
        version, count = _DELIVERED_HEAD.unpack_from(value, 0)
        if version < 0 or count < 0 or len(value) < _DELIVERED_HEAD.size + count * _ENTRY.size:
            raise ValueError(f"version {version}, {count} entries in {len(value)} bytes")
        return [_ENTRY.unpack_from(value, _DELIVERED_HEAD.size + i * _ENTRY.size) for i in range(count)]
    except (AssertionError, ValueError, struct.error) as e:
        raise InvalidRecordError("corrupt_message", f"unreadable DELIVERED control record: {e}") from None


# ----------------------------------------------------------------- produce side


def _delay_of(headers: list[tuple[str, bytes | None]], now_ms: int, max_delay_ms: int,
              index: int) -> int | None:
    """The deliver time a record's headers ask for (None: no delay header)."""
    deliver_at: int | None = None
    for name, value in headers:
        if name not in (DELAY_MS_HEADER, DELIVER_AT_HEADER):
            continue
        text = (value or b"").decode("ascii", "replace").strip()
        if not text.isdigit():
            raise InvalidRecordError(
                "invalid_record", f"record {index}: header {name} is {text[:40]!r}, not a whole "
                f"number of milliseconds in decimal ASCII")
        number = int(text)
        at = now_ms + number if name == DELAY_MS_HEADER else number
        if at - now_ms > max_delay_ms:
            raise InvalidRecordError(
                "invalid_record", f"record {index}: header {name}={text} asks for a delay of "
                f"{at - now_ms} ms, above delayed.delivery.max.ms={max_delay_ms}")
        deliver_at = at if deliver_at is None else max(deliver_at, at)
    return deliver_at


def may_hold_delay_headers(records: bytes | bytearray, header: BatchHeader, pos: int) -> bool:
    """Whether a batch can hold a delay header: its (decompressed) bytes hold the
    headers' common prefix. False for control batches."""
    if header.attributes & CONTROL_MASK:
        return False
    if not header.compression:
        return records.find(_HEADER_PREFIX, pos + HEADER_SIZE, pos + header.size) >= 0
    body = decompress(header.compression, bytes(records[pos + HEADER_SIZE : pos + header.size]))
    return _HEADER_PREFIX in body


def split(records: bytes | bytearray | memoryview, batches: ValidatedBatches, now_ms: int,
          max_delay_ms: int, compacted: bool) -> Split | None:
    """Take the records that ask for a later delivery out of a producer's batches; None
    when there are none (the batches are appended as they came). Raises
    InvalidRecordError for a delay header that does not parse, a delay above
    ``max_delay_ms``, or any delay on a compacted topic."""
    data = records if isinstance(records, bytes | bytearray) else bytes(records)
    headerless = batches.headerless or frozenset()  # a batch without headers asks for no delay
    candidates = [i for i, (h, p) in enumerate(zip(batches.headers, batches.positions, strict=True))
                  if p not in headerless and may_hold_delay_headers(data, h, p)]
    if not candidates:
        return None
    pieces: list[tuple[bytes, bool]] = []  # (batch bytes, made by dmq)
    delayed_total = 0
    index = 0
    chosen = set(candidates)
    for i, (header, pos) in enumerate(zip(batches.headers, batches.positions, strict=True)):
        batch = bytes(data[pos : pos + header.size])
        if i not in chosen:
            pieces.append((batch, False))
            index += header.record_count
            continue
        _, decoded = decode_batch(batch)
        _, raws = raw_records(batch)
        kept = []
        held: list[DelayedRecord] = []
        for record, raw in zip(decoded, raws, strict=True):
            deliver_at = _delay_of(record.headers, now_ms, max_delay_ms, index)
            index += 1
            if deliver_at is None or deliver_at <= now_ms:
                kept.append(raw)
                continue
            if compacted:
                raise InvalidRecordError(
                    "invalid_record", "delayed delivery is not available on a compacted topic "
                    "(cleanup.policy=compact)")
            headers = [(n, v) for n, v in record.headers if n not in (DELAY_MS_HEADER, DELIVER_AT_HEADER)]
            held.append(DelayedRecord(deliver_at, header.producer_id if header.is_transactional
                                      else NO_PRODUCER_ID, record.timestamp, record.key,
                                      record.value, headers))
        if not held:
            pieces.append((batch, False))
            continue
        delayed_total += len(held)
        if kept or header.producer_id >= 0:
            # An idempotent producer's batch stays, even emptied: its sequences are the
            # producer's; a plain batch with nothing left goes.
            pieces.append((rebuild_batch(batch, kept), False))
        pieces.append((delayed_batch(held, now_ms), True))
    if not delayed_total:
        return None
    out = bytearray()
    out_headers: list[BatchHeader] = []
    positions: list[int] = []
    control: set[int] = set()
    count = 0
    for batch, made in pieces:
        position = len(out)
        if made:
            control.add(position)
        out += batch
        h = parse_header(batch, 0)
        out_headers.append(h)
        positions.append(position)
        count += h.record_count
    return Split(bytes(out), ValidatedBatches(out_headers, positions, count, batches.max_timestamp,
                                              len(out)), frozenset(control), delayed_total)


def delayed_batch(held: list[DelayedRecord], now_ms: int) -> bytes:
    """The control batch of DELAYED records holding ``held``."""
    key = control_key(DELAYED_TYPE)
    return encode_batch([(key, encode_delayed(r), []) for r in held], timestamp=now_ms,
                        producer_id=NO_PRODUCER_ID, base_sequence=NO_SEQUENCE,
                        attributes_extra=CONTROL_MASK)


# ----------------------------------------------------------------- delivery side


def delivered_marker(named: list[tuple[int, int]], now_ms: int) -> bytes:
    """A control batch with one DELIVERED record naming ``named`` ((offset, deliver_at))."""
    return encode_batch([(control_key(DELIVERED_TYPE), encode_delivered(named), [])],
                        timestamp=now_ms, producer_id=NO_PRODUCER_ID, base_sequence=NO_SEQUENCE,
                        attributes_extra=CONTROL_MASK)


# What a batch adds to its records (the v2 header), and an upper bound of what one record
# adds to its key, value and headers (length, attributes, timestamp and offset deltas, and
# the varint lengths of key, value, header count and each header's key and value).
BATCH_OVERHEAD = HEADER_SIZE
RECORD_OVERHEAD = 5 + 1 + 10 + 5 + 5 + 5 + 5
HEADER_OVERHEAD = 5 + 5


def record_size_bound(r: DelayedRecord) -> int:
    """At least the bytes ``r`` takes in an uncompressed batch."""
    return (RECORD_OVERHEAD + len(r.key or b"") + len(r.value or b"")
            + sum(HEADER_OVERHEAD + len(k.encode()) + len(v or b"") for k, v in r.headers))


def delivery_chunks(entries: list[tuple[int, DelayedRecord]],
                    max_batch_bytes: int) -> list[list[tuple[int, DelayedRecord]]]:
    """``entries`` cut, in order, into runs each of which fits one uncompressed batch of at
    most ``max_batch_bytes`` (a topic's ``max.message.bytes``); a record that alone does not
    is a run of its own (it was accepted when produced, maybe compressed)."""
    chunks: list[list[tuple[int, DelayedRecord]]] = []
    current: list[tuple[int, DelayedRecord]] = []
    size = BATCH_OVERHEAD
    for entry in entries:
        needed = record_size_bound(entry[1])
        if current and size + needed > max_batch_bytes:
            chunks.append(current)
            current, size = [], BATCH_OVERHEAD
        current.append(entry)
        size += needed
    if current:
        chunks.append(current)
    return chunks


def delivery(entries: list[tuple[int, DelayedRecord]], now_ms: int, codec: int = 0,
             level: int | None = None) -> bytes:
    """What a leader appends to deliver ``entries`` ((offset of the DELAYED record,
    record), in delivery order; one run of ``delivery_chunks``): a DELIVERED control
    batch naming them, then a batch holding the records again with their own
    timestamps (``delivery_records``)."""
    return (delivered_marker([(o, r.deliver_at) for o, r in entries], now_ms)
            + delivery_records(entries, codec, level))


def delivery_records(entries: list[tuple[int, DelayedRecord]], codec: int = 0,
                     level: int | None = None) -> bytes:
    """The normal batch of ``delivery`` alone (also to finish a delivery whose marker made
    it to the log and whose records did not), compressed by ``codec`` at ``level`` (a
    topic's ``compression.type``) unless that makes it larger."""
    plain = encode_batch([(r.key, r.value, r.headers) for _, r in entries],
                         timestamps=[r.timestamp for _, r in entries])
    if not codec:
        return plain
    compressed = recompressed(plain, validate_batches(plain, len(plain)), codec, len(plain), level)
    return bytes(compressed) if compressed is not None and len(compressed) < len(plain) else plain


def read_control_batch(batch: bytes | memoryview) -> list[tuple[int, int, bytes | None]]:
    """(offset delta, control type, value) of each record of a control batch; types other
    than dmq's are returned too, for the caller to skip. Offset deltas, since a batch
    being appended may not carry its offset yet."""
    header, records = decode_batch(batch)
    out = []
    for r in records:
        t = control_type_of(r.key)
        if t is not None:
            out.append((r.offset - header.base_offset, t, r.value))
    return out
