from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.record.batch import (
    InvalidRecordError,
    compute_crc,
    parse_header,
    set_base_offset,
    set_log_append_time,
    validate_batches,
)
from dmq.record.records import decode_batch, encode_batch

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
