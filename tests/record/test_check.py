"""``check_records``: every batch a producer encodes passes; damaged records get the
rule they break; the C walk and the Python walk answer the same for any bytes."""

from __future__ import annotations

import struct

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from support.batches import recrc, with_records

from dmq.record import check
from dmq.record.batch import (
    HEADER_SIZE,
    InvalidRecordError,
    validate_batches,
)
from dmq.record.records import encode_batch, write_varint

keys = st.one_of(st.none(), st.binary(max_size=200))
headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=50))), max_size=3)
records = st.lists(st.tuples(keys, keys, headers), min_size=1, max_size=30)

WALKS = [pytest.param(check.check_records_py, id="python")]
if check.IMPLEMENTATION == "c":
    WALKS.append(pytest.param(check.check_records, id="c"))
# Without the extension check.check_records is the Python walk: comparing it with itself
# could not fail. scripts/test.sh builds the extension, so these run in CI.
needs_c = pytest.mark.skipif(check.IMPLEMENTATION != "c", reason="dmq's C extension is not built")


def body_of(recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> bytes:
    return encode_batch(recs)[HEADER_SIZE:]


def outcome(walk, body: bytes, count: int) -> str:  # noqa: ANN001
    """The walk's answer: "ok N" (N records with headers) or its error's message."""
    try:
        return f"ok {walk(body, count)}"
    except ValueError as e:
        return str(e)


def varint(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def record(fields: bytes) -> bytes:
    return varint(len(fields)) + fields


@settings(max_examples=300, deadline=None)
@given(records)
def test_every_encoded_batch_passes(recs) -> None:  # noqa: ANN001
    body = body_of(recs)
    with_headers = sum(1 for _key, _value, headers in recs if headers)
    for walk in (check.check_records_py, check.check_records):
        assert walk(body, len(recs)) == with_headers
        assert walk(memoryview(body), len(recs)) == with_headers
        assert walk(bytearray(body), len(recs)) == with_headers
    batch = encode_batch(recs)
    assert validate_batches(batch, 1 << 20).headerless == (frozenset() if with_headers else frozenset({0}))


@needs_c
@settings(max_examples=1500, deadline=None)
@given(records, st.data())
def test_the_c_and_python_walks_agree_on_damaged_bodies(recs, data) -> None:  # noqa: ANN001
    body = bytearray(body_of(recs))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        at = data.draw(st.integers(0, max(0, len(body) - 1)))
        if kind == "flip" and body:
            body[at] = data.draw(st.integers(0, 255))
        elif kind == "cut":
            del body[at:]
        elif kind == "insert":
            body[at:at] = data.draw(st.binary(min_size=1, max_size=6))
        elif body:
            del body[at : at + data.draw(st.integers(1, 6))]
    count = len(recs) + data.draw(st.sampled_from([0, 0, 0, -1, 1]))
    expected = outcome(check.check_records_py, bytes(body), count)
    assert outcome(check.check_records, bytes(body), count) == expected


@needs_c
@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 4))
def test_the_walks_agree_on_random_bytes(body: bytes, count: int) -> None:
    assert outcome(check.check_records, body, count) == outcome(check.check_records_py, body, count)


@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize(("body", "count", "message"), [
    (record(b"\0\0\0\x01\x01\0"), 1, "ok 0"),  # attributes, timestamp delta, offset delta, null key and value, no headers
    (record(b"\0\0\0\x01\x01\0") + record(b"\0\0\x02\x01\x01\x02\x04hi\x01"), 2, "ok 1"),
    (b"", 1, "record extends past its batch"),
    (varint(-3), 1, "negative record length"),
    (varint(50) + b"\0" * 10, 1, "record extends past its batch"),
    (b"\x80" * 6, 1, "varint too long"),
    (record(b"\0\0\x02\x01\x01\0"), 1, "record offset deltas are not 0, 1, 2, ..."),
    (record(b"\0\0\0\x03\x01\0"), 1, "negative key or value length"),
    (record(b"\0\0\0\x01\x01\x01"), 1, "negative header count"),
    (record(b"\0\0\0\x01\x01\x02\x01\x01"), 1, "negative header key length"),
    (record(b"\0\0\0\x01\x01\x02\x00\x03"), 1, "negative header value length"),
    (record(b"\0\0\0\x01\x10ab\0"), 1, "record fields do not fit its length"),
    (record(b"\0\0\0\x01\x01\0\0\0"), 1, "record length does not match its fields"),
    (record(b"\0\0\0\x01\x01\0") + b"\0", 1, "bytes after the last record"),
    (record(b"\0" + b"\xff" * 10 + b"\x01\0\x01\x01\0"), 1, "varint too long"),
    (record(b"\0\0\0" + varint(2**33 - 100) + b"\x01\0"), 1, "record fields do not fit its length"),
    (record(b"\0\0\0\x01\x01\x02" + varint(2**33) + b"\0"), 1, "record fields do not fit its length"),
])
def test_each_rule(walk, body: bytes, count: int, message: str) -> None:  # noqa: ANN001
    assert outcome(walk, body, count) == message


def test_validate_batches_refuses_records_that_do_not_parse_with_invalid_record() -> None:
    good = encode_batch([(b"k", b"v", [])])
    validate_batches(good, 1000)
    damaged = bytearray(good)
    damaged[HEADER_SIZE] = 0x7E  # the record's length: 63 bytes, past the batch
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(recrc(damaged), 1000)
    assert e.value.error == "invalid_record"
    assert "record extends past its batch" in str(e.value)


@settings(max_examples=100, deadline=None)
@given(records, st.sampled_from([1, 2, 3, 4]))
def test_compressed_batches_are_checked_decompressed(recs, codec: int) -> None:  # noqa: ANN001
    batch = encode_batch(recs, codec=codec)
    assert validate_batches(batch, 1 << 20).record_count == len(recs)
    # The same records said to be one more: the walk runs past the decompressed body.
    more = bytearray(batch)
    struct.pack_into(">i", more, 23, len(recs))  # lastOffsetDelta
    struct.pack_into(">i", more, 57, len(recs) + 1)  # recordCount
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(recrc(more), 1 << 20)
    assert e.value.error == "invalid_record"


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_data_that_does_not_decompress_is_invalid_record(codec: int) -> None:
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(with_records(b"not compressed at all", codec), 1 << 20)
    assert e.value.error == "invalid_record"
    assert "cannot decompress" in str(e.value)


def test_a_codec_kafka_does_not_have_is_unsupported_compression_type() -> None:
    batch = bytearray(encode_batch([(b"k", b"v", [])]))
    struct.pack_into(">h", batch, 21, 5)
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(recrc(batch), 1 << 20)
    assert e.value.error == "unsupported_compression_type"


def test_a_cut_zstd_batch_is_refused() -> None:
    batch = bytearray(encode_batch([(b"k", b"v" * 100, [])] * 5, codec=4))
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(recrc(batch[:-4]), 1 << 20)
    assert e.value.error == "invalid_record"


def test_a_batch_that_decompresses_past_the_limit_is_refused() -> None:
    """Kafka reads a compressed batch a record at a time; dmq decompresses it whole, so a
    few KB that say gigabytes stop at the limit (DECOMPRESSED_LIMIT, 64 MiB here)."""
    frame = zstandard.ZstdCompressor().compress(bytes(8 << 20))  # 8 MiB of zeros, a few hundred bytes
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(with_records(frame * 9, codec=4), 1 << 20)  # 72 MiB
    assert e.value.error == "invalid_record"
    assert "decompresses to more than 67108864 bytes" in str(e.value)


@needs_c
def test_the_built_extension_is_not_older_than_its_source() -> None:
    """The extension is built in place (pip install -e .): an edit of the C file without a
    rebuild would leave these tests running the old walk."""
    from pathlib import Path

    from dmq.record import _recordcheck  # type: ignore[attr-defined]

    source = Path(check.__file__).with_name("_recordcheck.c")
    built = Path(_recordcheck.__file__)
    assert built.stat().st_mtime >= source.stat().st_mtime, (
        f"{built.name} is older than {source.name}: run pip install -e . again")
