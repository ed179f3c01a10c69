"""Fetched record batches to Arrow columns in bulk (sans-io; numpy and pyarrow).

The source's executors fetch raw v2 record batches and turn them into the
columns Spark wants without a Python object per record:

- batches are walked by their 61-byte headers (``dmq.record.batch``): control
  batches and, for read_committed, the batches of aborted transactions are
  skipped as Kafka's consumer does; compressed bodies are inflated
  (``dmq.record.compression``) and the bodies joined into one buffer;
- every record's fields (timestamp and offset deltas, where its key, value and
  headers lie, and their lengths) come from one pass in C,
  ``dmq.record._recordcheck.record_fields`` (some 15 ns a record, where numpy
  takes 200); without the C extension the same checks and fields come from numpy: one tight loop finds
  where each record starts (a record's length is a varint in front of it, so the
  walk is sequential), then each field is decoded for all records at once (zig-zag
  varints gathered byte by byte across records). Tests compare the two walks;
- keys and values become Arrow binary columns by one C copy from the joined
  buffer (``gather``; without the extension, one ``take``), with no per-record
  ``bytes``; topic and partition are constants.

Record layout (varints are zig-zag)::

    length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength varint, key, valueLength varint, value,
    headerCount varint, [headerKeyLength varint, key, headerValueLength varint, value]...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from dmq.record import compression
from dmq.record.batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    iter_headers,
)
from dmq.record.control import read_end_txn_marker

NAMES = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
TIMESTAMP = pa.timestamp("us", tz="UTC")
HEADER_STRUCT = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS = pa.list_(HEADER_STRUCT)
# Records of one Arrow batch come from at most this many bytes of (inflated) batch bodies:
# Arrow's binary offsets are 32-bit, and it bounds a worker's memory.
MAX_CHUNK_BYTES = 256 << 20
_PAD = bytes(16)
_FIRST_WINDOW = 256  # records checked at once for a run of one size (doubling while they match)
_MIN_RUN = 32  # a shorter run: sizes vary, a Python loop is cheaper than numpy calls  # after the bodies: a corrupt varint reads zeros, never past the buffer


class CorruptRecordsError(ValueError):
    pass


def next_offset(data: bytes | memoryview) -> int | None:
    """The offset after the last complete batch of a fetched ``records`` field (None: none)."""
    headers = iter_headers(data)
    return headers[-1][1].last_offset + 1 if headers else None


def select_batches(data: bytes | memoryview, start: int, end: int, read_committed: bool,
                   aborted: Sequence[tuple[int, int]]) -> list[tuple[BatchHeader, memoryview]]:
    """The complete batches of ``data`` whose records a consumer sees in [start, end).

    Kafka's consumer rules: control batches are never returned; read_committed
    skips a transactional batch of a producer with an aborted transaction (from
    the fetch response's list, (producer id, first offset)) that began at or before
    the batch, until that producer's ABORT marker.
    """
    view = memoryview(data)
    pending = sorted(aborted, key=lambda a: a[1])
    next_abort = 0
    aborted_producers: set[int] = set()
    out = []
    for pos, h in iter_headers(view):
        if h.magic != 2:
            raise CorruptRecordsError(f"batch at offset {h.base_offset} has magic {h.magic}; only v2 is read")
        whole = view[pos : pos + h.size]
        if read_committed and h.producer_id >= 0:
            while next_abort < len(pending) and pending[next_abort][1] <= h.last_offset:
                aborted_producers.add(pending[next_abort][0])
                next_abort += 1
            if h.attributes & CONTROL_MASK:
                marker = read_end_txn_marker(whole)
                if marker is not None and marker.is_abort:
                    aborted_producers.discard(h.producer_id)
                continue
            if h.attributes & TRANSACTIONAL_MASK and h.producer_id in aborted_producers:
                continue
        if h.attributes & CONTROL_MASK or h.record_count <= 0:
            continue
        if h.last_offset < start or h.base_offset >= end:
            continue
        out.append((h, whole))
    return out


def arrow_batches(data: bytes | memoryview, start: int, end: int, *, topic: str, partition: int,
                  read_committed: bool = True, aborted: Sequence[tuple[int, int]] = (),
                  include_headers: bool = False) -> Iterator[pa.RecordBatch]:
    """Arrow record batches (the source's schema) of the records in [start, end) of ``data``,
    a fetched ``records`` field (a partial batch at its end is ignored)."""
    chunk: list[tuple[BatchHeader, bytes | memoryview]] = []
    size = 0
    for h, whole in select_batches(data, start, end, read_committed, aborted):
        body: bytes | memoryview = whole[HEADER_SIZE:]
        if h.attributes & COMPRESSION_MASK:
            try:
                body = compression.decompress(h.attributes & COMPRESSION_MASK, bytes(body))
            except Exception as e:  # an unknown codec, cramjam's errors for bad compressed data
                raise CorruptRecordsError(f"batch at offset {h.base_offset}: cannot decompress: {e}") from None
        if chunk and size + len(body) > MAX_CHUNK_BYTES:
            yield from _nonempty(_to_arrow(chunk, start, end, topic, partition, include_headers))
            chunk, size = [], 0
        chunk.append((h, body))
        size += len(body)
    if chunk:
        yield from _nonempty(_to_arrow(chunk, start, end, topic, partition, include_headers))


def _nonempty(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    if batch.num_rows:  # a compacted batch may hold no record in the range
        yield batch


def _record_begins(buf: bytes, u8: np.ndarray, bodies: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """Where each record (its length varint) begins, batch by batch.

    ``bodies`` holds (first byte, end, record count) of each batch body in ``buf``.
    A record's length chains it to the next, so finding them is sequential. Runs of
    records of one size (fixed-size values: only the offset delta's varint grows, at
    64 and 8192 records) are found with numpy, by checking that each record of the
    guessed run has that size; records of varying sizes by a tight loop that follows
    the lengths, the only per-record Python code of the decoder. The caller checks
    the result again (the lengths must chain every batch's records to its end).
    """
    parts: list[np.ndarray] = []
    for pos, stop, count in bodies:
        window = _FIRST_WINDOW
        while count > 0:
            length, after = _uvarint(buf, pos)
            stride = after - pos + (length >> 1)
            if length & 1 or stride <= 0:
                raise CorruptRecordsError("a record has a negative length")
            if stride > stop - pos:
                raise CorruptRecordsError("record lengths do not add up to their batches")
            guess = min(count, window, (stop - pos) // stride)
            candidates = pos + stride * np.arange(guess, dtype=np.int64)
            lengths, ends = _varints(u8, candidates, strict=False)
            wrong = np.flatnonzero(ends - candidates + lengths != stride)
            run = int(wrong[0]) if wrong.size else guess
            if run < _MIN_RUN:  # sizes vary: walk the rest of the batch
                parts.append(_walk(buf, pos, count))
                break
            parts.append(candidates[:run])
            pos += stride * run
            count -= run
            window = window * 2 if run == guess else _FIRST_WINDOW
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _walk(buf: bytes, pos: int, count: int) -> np.ndarray:
    begins: list[int] = []
    add = begins.append
    try:
        for _ in range(count):
            add(pos)
            b = buf[pos]
            if b < 0x80:
                pos += 1 + (b >> 1)  # zig-zag: a negative length is caught by the caller's checks
            else:
                c = buf[pos + 1]
                if c < 0x80:
                    pos += 2 + (((b & 0x7F) | (c << 7)) >> 1)
                else:
                    length, pos = _uvarint(buf, pos)
                    pos += length >> 1
    except IndexError:
        raise CorruptRecordsError("record lengths run past their batch") from None
    return np.array(begins, dtype=np.int64)


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if not 0 <= pos < len(buf) or shift > 63:
            raise CorruptRecordsError("bad varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >> 64:
                raise CorruptRecordsError("varint longer than 64 bits")
            return result, pos
        shift += 7


def _varints(u8: np.ndarray, pos: np.ndarray, strict: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The zig-zag varints at positions ``pos`` of ``u8``, all at once: (values, positions after).

    A varint longer than 10 bytes is an error, or (``strict`` false: guessed positions)
    the smallest int64."""
    pos = np.minimum(pos, len(u8) - len(_PAD))  # only corrupt data points further; checked later
    b = u8[pos]
    value = (b & 0x7F).astype(np.uint64)
    after = pos + 1
    more = np.flatnonzero(b & 0x80)
    shift = 7
    while more.size:
        if shift > 63:
            if strict:
                raise CorruptRecordsError("varint longer than 10 bytes")
            break
        b = u8[after[more]]
        if shift == 63 and np.any(b & 0x7E):  # bits above bit 63
            if strict:
                raise CorruptRecordsError("varint longer than 64 bits")
            wide = more[(b & 0x7E) != 0]
            value[wide] = 0  # a guess: the caller's checks refuse it
        value[more] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        after[more] += 1
        more = more[(b & 0x80) != 0]
        shift += 7
    signed = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    if more.size:
        signed[more] = np.iinfo(np.int64).min
    return signed, after


def _binary(data: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary column of the byte ranges [start, start + length) of ``data`` (length -1: null).

    The ranges are in buffer order and do not overlap; seen as an Arrow binary array
    they are every other element (the gaps between them are the rest), and one
    ``take`` copies them out in C.
    """
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    bounds = np.empty(2 * n, dtype=np.int32)
    bounds[0::2] = starts
    bounds[1::2] = starts + np.maximum(lengths, 0)
    spread = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), data])
    nulls = lengths < 0
    picks = pa.array(np.arange(0, 2 * n, 2, dtype=np.int32), mask=nulls if nulls.any() else None)
    return spread.take(picks)


def _binary_c(buf: bytes | memoryview, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """``_binary`` by one C copy (``dmq.record._recordcheck.gather``): the column's offsets
    and data are written straight, with no index arrays."""
    n = len(starts)
    total = int(np.maximum(lengths, 0).sum())
    offsets = np.empty(n + 1, dtype=np.int32)
    data = np.empty(total, dtype=np.uint8)
    try:
        _gather_c(buf, np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(lengths, dtype=np.int64),
                  offsets, data)
    except ValueError as e:
        raise CorruptRecordsError(str(e)) from None
    nulls = lengths < 0
    null_count = int(nulls.sum())
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=null_count)


def _fixed(arrow_type: pa.DataType, values: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


Fields = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
               np.ndarray, np.ndarray]
"""Per record: timestamp delta, offset delta, key position, key length, value position,
value length, headers position, header count, record end (positions in the joined buffer)."""
_N_FIELDS = 9
_MIN_RECORD = 7  # a length, attributes, three deltas/lengths and a header count: a byte each


def _fields_np(buf: bytes, u8: np.ndarray, bodies: Sequence[tuple[int, int, int]]) -> Fields:
    """Every record's fields with numpy (the walk when the C extension is not built)."""
    begins = _record_begins(buf, u8, bodies)
    length, first = _varints(u8, begins)
    last = first + length
    # The lengths must chain the records from each batch's first byte to its end.
    stops = np.array([stop for _, stop, _ in bodies], dtype=np.int64)
    batch_ends = np.cumsum([count for _, _, count in bodies]) - 1
    if (np.any(length < 0) or np.any(last[:-1] != begins[1:])
            or np.any(last[batch_ends] != stops)):
        raise CorruptRecordsError("record lengths do not add up to their batches")

    ts_delta, p = _varints(u8, first + 1)  # + 1: the attributes byte
    off_delta, p = _varints(u8, p)
    key_len, p = _varints(u8, p)
    key_at = p
    if np.any(key_len > last - p):  # checked before adding: a length near 2^63 would wrap
        raise CorruptRecordsError("a record's fields run past its end")
    val_len, p = _varints(u8, p + np.maximum(key_len, 0))
    val_at = p
    if np.any(val_len > last - p):
        raise CorruptRecordsError("a record's fields run past its end")
    n_headers, p = _varints(u8, p + np.maximum(val_len, 0))
    if (np.any(p > last) or np.any(key_len < -1) or np.any(val_len < -1) or np.any(n_headers < 0)
            or np.any(n_headers > (last - p) // 2)):  # a header takes two bytes at least
        raise CorruptRecordsError("a record's fields run past its end")
    return ts_delta, off_delta, key_at, key_len, val_at, val_len, p, n_headers, last


def _fields_c(buf: bytes, u8: np.ndarray, bodies: Sequence[tuple[int, int, int]]) -> Fields:
    """Every record's fields by the C walk (``dmq.record._recordcheck.record_fields``): one
    pass, the same checks and columns as ``_fields_np``."""
    counts = [count for _, _, count in bodies]
    n = sum(counts)
    if n * _MIN_RECORD > len(buf) - len(_PAD):  # before sizing ``out`` by a corrupt count
        raise CorruptRecordsError("record lengths run past their batch")
    out = np.empty((_N_FIELDS, n), dtype=np.int64)
    try:
        _record_fields_c(buf, np.array(bodies, dtype=np.int64).reshape(-1), out)
    except ValueError as e:
        raise CorruptRecordsError(str(e)) from None
    ts_delta, off_delta, key_at, key_len, val_at, val_len, p, n_headers, last = out
    return ts_delta, off_delta, key_at, key_len, val_at, val_len, p, n_headers, last


_fields: Callable[[bytes, np.ndarray, Sequence[tuple[int, int, int]]], Fields]
_column: Callable[[bytes | memoryview, np.ndarray, np.ndarray], pa.Array]
try:
    from dmq.record._recordcheck import gather as _gather_c  # type: ignore[import-not-found]
    from dmq.record._recordcheck import record_fields as _record_fields_c  # type: ignore[import-not-found]
except ImportError:  # built without a C compiler
    _fields, _column = _fields_np, lambda buf, starts, lengths: _binary(pa.py_buffer(buf), starts, lengths)
else:
    _fields, _column = _fields_c, _binary_c


def _to_arrow(chunk: list[tuple[BatchHeader, bytes | memoryview]], start: int, end: int, topic: str,
              partition: int, include_headers: bool) -> pa.RecordBatch:
    bodies = []
    pos = 0
    for h, body in chunk:
        bodies.append((pos, pos + len(body), h.record_count))
        pos += len(body)
    buf = b"".join([*(body for _, body in chunk), _PAD])
    u8 = np.frombuffer(buf, dtype=np.uint8)
    ts_delta, off_delta, key_at, key_len, val_at, val_len, p, n_headers, last = _fields(buf, u8, bodies)

    counts = np.array([h.record_count for h, _ in chunk], dtype=np.int64)
    log_append = np.array([bool(h.attributes & TIMESTAMP_TYPE_MASK) for h, _ in chunk])
    offsets = np.repeat(np.array([h.base_offset for h, _ in chunk], dtype=np.int64), counts) + off_delta
    stamps = np.repeat(np.array([h.max_timestamp if la else h.base_timestamp
                                 for (h, _), la in zip(chunk, log_append, strict=True)], dtype=np.int64),
                       counts)
    stamps += np.where(np.repeat(log_append, counts), 0, ts_delta)
    ts_type = np.repeat(log_append.astype(np.int32), counts)

    keep = (offsets >= start) & (offsets < end)
    if not keep.all():
        picked = np.flatnonzero(keep)
        offsets, stamps, ts_type = offsets[picked], stamps[picked], ts_type[picked]
        key_at, key_len, val_at, val_len = key_at[picked], key_len[picked], val_at[picked], val_len[picked]
        p, last, n_headers = p[picked], last[picked], n_headers[picked]
    n = len(offsets)
    columns: list[Any] = [
        _column(buf, key_at, key_len),
        _column(buf, val_at, val_len),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        _fixed(pa.int64(), offsets),
        _fixed(TIMESTAMP, stamps * 1000),
        _fixed(pa.int32(), ts_type),
    ]
    names = list(NAMES)
    if include_headers:
        columns.append(_headers(u8, pa.py_buffer(buf), p, n_headers, last))
        names.append("headers")
    elif np.any((n_headers == 0) & (p != last)):
        raise CorruptRecordsError("a record's length does not match its fields")
    return pa.RecordBatch.from_arrays(columns, names=names)


def _headers(u8: np.ndarray, data: pa.Buffer, at: np.ndarray, count: np.ndarray,
             record_end: np.ndarray) -> pa.Array:
    """The headers column: level by level (every record's first header, then every second
    one...), each field decoded for all records that have that many headers at once."""
    list_offsets = np.zeros(len(count) + 1, dtype=np.int32)
    np.cumsum(count, out=list_offsets[1:])
    total = int(list_offsets[-1])
    key_at = np.zeros(total, dtype=np.int64)
    key_len = np.zeros(total, dtype=np.int64)
    val_at = np.zeros(total, dtype=np.int64)
    val_len = np.zeros(total, dtype=np.int64)
    ends = at.copy()
    rows = np.flatnonzero(count > 0)
    pos = at[rows]
    slot = list_offsets[rows].astype(np.int64)
    level = 0
    while rows.size:
        klen, pos = _varints(u8, pos)
        key_at[slot], key_len[slot] = pos, klen
        vlen, pos = _varints(u8, pos + np.maximum(klen, 0))
        val_at[slot], val_len[slot] = pos, vlen
        pos = pos + np.maximum(vlen, 0)
        level += 1
        more = count[rows] > level
        ends[rows[~more]] = pos[~more]
        rows, pos, slot = rows[more], pos[more], slot[more] + 1
    if np.any(ends != record_end) or np.any(key_len < -1) or np.any(val_len < -1):
        raise CorruptRecordsError("a record's headers do not match its length")
    keys = _binary(data, key_at, np.maximum(key_len, 0))  # a null header key reads as ""
    try:
        key_strings = keys.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: replaced characters, as dmq.record.records reads them
        key_strings = pa.array([k.decode("utf-8", "replace") for k in keys.to_pylist()], pa.string())
    values = _binary(data, val_at, val_len)
    items = pa.StructArray.from_arrays([key_strings, values], fields=list(HEADER_STRUCT))
    return pa.ListArray.from_arrays(pa.array(list_offsets), items, type=HEADERS)
