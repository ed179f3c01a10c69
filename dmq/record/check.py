"""Whether the records inside a batch parse, as a consumer will parse them (sans-io).

Kafka's broker reads every record of a produced batch before it appends it
(``LogValidator`` iterating ``DefaultRecord.readFrom``) and answers
INVALID_RECORD when one does not parse: a batch whose header and CRC are right
but whose records are not (a broken or hostile client) would otherwise be
acknowledged, and every consumer of the partition would stop at it, unable to
read it or anything after it. ``check_records`` does the same walk over a
batch body (the bytes after the 61-byte header, decompressed):

    length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength varint, key, valueLength varint, value,
    headerCount varint, [headerKeyLength varint, key, headerValueLength varint, value]...

Rules (each broken one raises ``ValueError`` with the message below, checked in
this order for each record):

- a varint of more than 5 bytes (10 for the timestamp delta): "varint too long";
- a negative record length: "negative record length"; a record longer than what
  is left of the body: "record extends past its batch";
- the i-th record's offset delta must be i: "record offset deltas are not 0, 1, 2, ...";
- key and value lengths are -1 (null) or more: "negative key or value length";
- a negative header count: "negative header count"; a header key length below 0:
  "negative header key length"; a header value length below -1: "negative header
  value length";
- the fields must end exactly where the record's length says (reading past it:
  "record fields do not fit its length"; stopping short: "record length does not
  match its fields");
- after ``count`` records the body must end: "bytes after the last record".

It returns how many of the records have headers: a batch with none cannot ask for
delayed delivery (``dmq.record.delayed``), which then need not search its bytes.

dmq is stricter than Kafka in three ways no client's batches meet: a key, value or
header value length below -1 (Kafka reads any negative length as null), offset deltas
other than 0, 1, 2, ... (Kafka does not check them in an uncompressed batch and rewrites
a compressed one; dmq keeps a batch's bytes as sent, so a consumer would see them), and
a 5-byte varint is read whole (Kafka keeps its low 32 bits).

``check_records`` is the C walk (``dmq.record._recordcheck``, built with the package
when a C compiler is there, about 100 times faster) or, without it, this module's
Python walk, which gives the same answers (a Hypothesis property checks both on
valid and damaged batches). ``IMPLEMENTATION`` says which is in use.
"""

from __future__ import annotations

from collections.abc import Callable

Buffer = bytes | bytearray | memoryview


class _Truncated(Exception):
    pass


def _varint(body: Buffer, pos: int, limit: int, max_bytes: int) -> tuple[int, int]:
    """A zig-zag varint of at most ``max_bytes`` bytes at ``pos``, read below ``limit``."""
    result = 0
    shift = 0
    for n in range(max_bytes):
        if pos + n >= limit:
            raise _Truncated
        b = body[pos + n]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos + n + 1
        shift += 7
    raise ValueError("varint too long")


def check_records_py(body: Buffer, count: int) -> int:
    """The Python walk (see the module docstring). Each one-byte varint (most of
    them: deltas, small lengths) is read inline, the others by ``_varint``."""
    size = len(body)
    pos = 0
    with_headers = 0
    for i in range(count):
        if pos < size and (b := body[pos]) < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            try:
                length, pos = _varint(body, pos, size, 5)
            except _Truncated:
                raise ValueError("record extends past its batch") from None
        if length < 0:
            raise ValueError("negative record length")
        end = pos + length
        if end > size:
            raise ValueError("record extends past its batch")
        try:
            p = pos + 1  # attributes
            if p > end:
                raise _Truncated
            if p < end and body[p] < 0x80:  # the timestamp delta, not needed
                p += 1
            else:
                _, p = _varint(body, p, end, 10)
            if p < end and (b := body[p]) < 0x80:
                delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                delta, p = _varint(body, p, end, 5)
            if delta != i:
                raise ValueError("record offset deltas are not 0, 1, 2, ...")
            for _field in range(2):  # key, value
                if p < end and (b := body[p]) < 0x80:
                    n = (b >> 1) ^ -(b & 1)
                    p += 1
                else:
                    n, p = _varint(body, p, end, 5)
                if n < -1:
                    raise ValueError("negative key or value length")
                if n > 0:
                    p += n
                    if p > end:
                        raise _Truncated
            if p < end and body[p] == 0:  # no headers
                p += 1
            else:
                headers, p = _varint(body, p, end, 5)
                if headers < 0:
                    raise ValueError("negative header count")
                if headers > 0:
                    with_headers += 1
                for _h in range(headers):
                    n, p = _varint(body, p, end, 5)
                    if n < 0:
                        raise ValueError("negative header key length")
                    p += n
                    if p > end:
                        raise _Truncated
                    n, p = _varint(body, p, end, 5)
                    if n < -1:
                        raise ValueError("negative header value length")
                    if n > 0:
                        p += n
                        if p > end:
                            raise _Truncated
        except _Truncated:
            raise ValueError("record fields do not fit its length") from None
        if p != end:
            raise ValueError("record length does not match its fields")
        pos = end
    if pos != size:
        raise ValueError("bytes after the last record")
    return with_headers


check_records: Callable[[Buffer, int], int]
try:
    from dmq.record._recordcheck import check_records as _check_records_c  # type: ignore[import-not-found]
except ImportError:  # built without a C compiler: the same checks in Python
    check_records = check_records_py
    IMPLEMENTATION = "python"
else:
    check_records = _check_records_c
    IMPLEMENTATION = "c"
