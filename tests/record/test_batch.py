from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.record.batch import (
    HEADER_SIZE,
    InvalidRecordError,
    compute_crc,
    parse_header,
    recompressed,
    set_base_offset,
    set_log_append_time,
    validate_batches,
)
from dmq.record.records import decode_batch, encode_batch, raw_records, rebuild_batch

blobs = st.one_of(st.none(), st.binary(max_size=200))
headers = st.lists(st.tuples(st.text(max_size=10), blobs), max_size=3)
records = st.lists(st.tuples(blobs, blobs, headers), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(records, st.sampled_from([0, 1, 2, 3, 4]), st.integers(0, 2**40),
       st.lists(st.integers(0, 2**41), min_size=30, max_size=30))
def test_encode_decode_round_trip(recs, codec, base_offset, times) -> None:  # noqa: ANN001
    ts = times[: len(recs)]
    data = encode_batch(recs, codec=codec, base_offset=base_offset, timestamps=ts)
    v = validate_batches(data, 10**7)
    assert v.record_count == len(recs) and v.total_size == len(data)
    header, decoded = decode_batch(data)
    assert header.max_timestamp == max(ts)
    assert [(r.key, r.value, r.headers) for r in decoded] == [
        (k, v, [(hk, hv) for hk, hv in h]) for k, v, h in recs]
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(recs)))
    assert [r.timestamp for r in decoded] == ts


@given(st.integers(0, 2**62), st.integers(0, 2**40))
def test_patching_keeps_the_batch_valid(offset: int, now: int) -> None:
    data = bytearray(encode_batch([(b"k", b"v", [])] * 3, timestamp=5))
    set_base_offset(data, 0, offset)
    set_log_append_time(data, 0, len(data), now)
    validate_batches(data, 10**6)  # CRC still right
    h = parse_header(data)
    assert (h.base_offset, h.max_timestamp, h.is_log_append_time) == (offset, now, True)
    assert [r.timestamp for r in decode_batch(bytes(data))[1]] == [now] * 3


@given(st.integers(0, 80), st.integers(1, 255))
def test_any_flipped_byte_in_the_crc_range_is_detected(pos: int, xor: int) -> None:
    data = bytearray(encode_batch([(b"key", b"value" * 5, [("h", b"x")])]))
    i = 21 + pos % (len(data) - 21)
    data[i] ^= xor
    with pytest.raises(InvalidRecordError):
        validate_batches(data, 10**6)


def test_size_limits_and_truncation() -> None:
    data = encode_batch([(None, b"x" * 1000, [])])
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(data, 500)
    assert e.value.error == "message_too_large"
    for cut in (1, 30, len(data) - 62):
        with pytest.raises(InvalidRecordError) as e:
            validate_batches(data[:-cut], 10**6)
        assert e.value.error == "corrupt_message"
    two = data + encode_batch([(None, b"y", [])])
    assert len(validate_batches(two, 10**6).headers) == 2
    assert compute_crc(data, 0, len(data)) == parse_header(data).crc


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(records, st.sampled_from([0, 1, 2, 3, 4])), min_size=1, max_size=3),
       st.sampled_from([0, 1, 2, 3, 4]), st.integers(0, 2**31 - 1000))
def test_recompressing_keeps_records_offsets_and_producer_fields(batches, target, sequence) -> None:  # noqa: ANN001
    """A topic's compression.type rewrites each batch's records with its codec; the records,
    the offsets and the idempotence fields (producer id, epoch, sequence) stay as sent."""
    data = b"".join(encode_batch(recs, codec=codec, base_offset=i * 100, timestamp=7, producer_id=42,
                                 producer_epoch=3, base_sequence=sequence)
                    for i, (recs, codec) in enumerate(batches))
    validated = validate_batches(data, 10**7)
    out = recompressed(data, validated, target, 10**7)
    if all(codec == target for _, codec in batches):
        assert out is None
        return
    assert out is not None
    again = validate_batches(out, 10**7)  # sizes and CRCs right
    assert again.record_count == validated.record_count
    for before, (after, pos) in zip(validated.headers, zip(again.headers, again.positions, strict=True),
                                    strict=True):
        assert after.compression == target
        assert (after.base_offset, after.last_offset_delta, after.producer_id, after.producer_epoch,
                after.base_sequence, after.max_timestamp) == (
            before.base_offset, before.last_offset_delta, before.producer_id, before.producer_epoch,
            before.base_sequence, before.max_timestamp)
        assert after.attributes & ~0x07 == before.attributes & ~0x07
        decoded = decode_batch(bytes(out[pos : pos + after.size]))[1]
        original = decode_batch(bytes(data[validated.positions[again.positions.index(pos)]:][: before.size]))[1]
        assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in decoded] == [
            (r.offset, r.key, r.value, r.headers, r.timestamp) for r in original]


def test_recompression_takes_the_codecs_level() -> None:
    """compression.gzip.level (and lz4/zstd) reach the codec: level 1 and level 9 make
    different batches of the same records, both of which read back the same."""
    data = encode_batch([(None, b"value %d " % (i % 7) * 30, []) for i in range(200)])
    validated = validate_batches(data, 10**7)
    fast, small = (recompressed(data, validated, 1, 10**7, level) for level in (1, 9))
    assert fast is not None and small is not None and len(small) < len(fast)
    assert [r.value for r in decode_batch(bytes(fast))[1]] == [r.value for r in decode_batch(bytes(small))[1]]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_a_batch_left_with_no_records_is_uncompressed_and_empty(codec: int) -> None:
    """As Kafka's writeEmptyHeader (an idempotent producer's batch whose records were all
    delayed, or all cleaned away): no compressed empty section, which librdkafka aborts on."""
    batch = encode_batch([(b"k", b"v" * 100, [])] * 3, codec=codec, producer_id=7, producer_epoch=1,
                         base_sequence=40, base_offset=10, timestamp=1000)
    empty = rebuild_batch(batch, [])
    header = parse_header(empty, 0)
    before = parse_header(batch, 0)
    assert header.compression == 0 and header.record_count == 0 and header.size == HEADER_SIZE
    assert (header.base_offset, header.last_offset, header.producer_id, header.producer_epoch,
            header.base_sequence) == (10, 12, 7, 1, 40)
    assert header.attributes == before.attributes & ~0x07
    assert decode_batch(empty)[1] == []
    _, kept = raw_records(batch)
    assert parse_header(rebuild_batch(batch, kept[1:]), 0).compression == codec  # not emptied: as it was
