"""The record helpers message query reads batches with: ``keyed_offsets`` (the key
indexer) and ``find_records`` (a query decoding only the records it returns) answer
exactly what decoding the whole batch and filtering says, for every codec."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.record.batch import TIMESTAMP_TYPE_MASK, set_log_append_time
from dmq.record.records import (
    decode_batch,
    encode_batch,
    find_records,
    keyed_offsets,
    raw_records,
    rebuild_batch,
)

keys = st.one_of(st.none(), st.sampled_from([b"", b"a", b"ab", b"order-42", b"\x00\xff" * 80]), st.binary(max_size=300))
blobs = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=8), blobs), max_size=3)
records = st.lists(st.tuples(keys, blobs, headers), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(records, st.sampled_from([0, 1, 2, 3, 4]), st.integers(0, 2**40), st.integers(0, 2**41),
       st.booleans(), st.data())
def test_helpers_agree_with_decoding_the_whole_batch(recs, codec, base, ts, log_append, data) -> None:  # noqa: ANN001
    batch = bytearray(encode_batch(recs, codec=codec, base_offset=base, timestamps=[ts + i for i in range(len(recs))]))
    if log_append:
        set_log_append_time(batch, 0, len(batch), ts + 10**6)
    header, decoded = decode_batch(bytes(batch))
    assert bool(header.attributes & TIMESTAMP_TYPE_MASK) == log_append
    assert keyed_offsets(batch)[1] == [(r.offset, r.key) for r in decoded if r.key is not None]
    assert keyed_offsets(memoryview(bytes(batch)))[1] == keyed_offsets(batch)[1]
    key = data.draw(st.one_of(keys.filter(lambda k: k is not None), st.sampled_from([r[0] for r in recs if r[0] is not None] or [b"x"])))
    assert find_records(batch, key=key)[1] == [r for r in decoded if r.key == key]
    offsets = set(data.draw(st.lists(st.integers(base - 2, base + len(recs) + 2), max_size=10)))
    assert find_records(batch, offsets=offsets)[1] == [r for r in decoded if r.offset in offsets]
    assert find_records(batch, key=key, offsets=offsets)[1] == [
        r for r in decoded if r.offset in offsets and r.key == key]
    assert find_records(batch)[1] == decoded
    # A batch the cleaner emptied in places (offset deltas with gaps): no dense shortcut.
    header, raw = raw_records(bytes(batch))
    kept = [r for r in raw if data.draw(st.booleans())]
    sparse = rebuild_batch(bytes(batch), kept)
    sparse_decoded = decode_batch(sparse)[1]
    assert [r.offset for r in sparse_decoded] == [r.offset for r in kept]
    assert find_records(sparse, offsets=offsets)[1] == [r for r in sparse_decoded if r.offset in offsets]
    assert find_records(sparse, key=key, offsets=offsets)[1] == [
        r for r in sparse_decoded if r.offset in offsets and r.key == key]
    assert keyed_offsets(sparse)[1] == [(r.offset, r.key) for r in sparse_decoded if r.key is not None]


@pytest.mark.parametrize("extra", [1, 5])
def test_records_missing_from_the_body_are_a_value_error(extra: int) -> None:
    batch = bytearray(encode_batch([(b"key-%d" % i, b"value" * 10, [("h", b"v")]) for i in range(5)]))
    struct.pack_into(">i", batch, 57, 5 + extra)  # the header counts records the body lacks
    with pytest.raises(ValueError):
        find_records(batch, key=b"key-9")
    with pytest.raises(ValueError):
        keyed_offsets(batch)
    with pytest.raises(ValueError):
        keyed_offsets(batch[:61] + b"\xff" * (len(batch) - 61))
