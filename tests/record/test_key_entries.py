"""``key_entries``, the key indexer's walk: on encoded batches it yields one key index
entry per keyed record, as ``record_keys`` and ``key_hash`` did before it; the C walk and
the Python walk answer the same for any bytes (valid, damaged, random), piece by piece
too, and stop at the same record whose offset is too far from the segment's base."""

from __future__ import annotations

from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.record import records as rec
from dmq.record.batch import HEADER_SIZE
from dmq.record.records import encode_batch, key_entries_py, record_keys
from dmq.storage.key_index import MAX_RELATIVE_OFFSET, key_hash

keys = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=50))), max_size=3)
batches = st.lists(st.tuples(keys, keys, headers), min_size=1, max_size=40)

WALKS = [pytest.param(key_entries_py, id="python")]
if rec.key_entries is not key_entries_py:
    WALKS.append(pytest.param(rec.key_entries, id="c"))
# Without the extension rec.key_entries is the Python walk: comparing it with itself could
# not fail. scripts/test.sh builds the extension, so these run in CI.
needs_c = pytest.mark.skipif(rec.key_entries is key_entries_py, reason="dmq's C extension is not built")


def body_of(recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> bytes:
    return encode_batch(recs)[HEADER_SIZE:]


def outcome(walk: Any, body: bytes | memoryview, count: int, pos: int = 0, base_offset: int = 0,
            segment_base: int = 0, max_relative: int = MAX_RELATIVE_OFFSET) -> tuple[Any, ...]:
    """(pos, keyed, bad offset, entries) or ("error", entries appended before it)."""
    out: list[int] = []
    try:
        return (*walk(body, count, pos, base_offset, segment_base, max_relative, out), out)
    except ValueError:
        return ("error", out)


@settings(max_examples=300, deadline=None)
@given(batches, st.integers(0, 2**40))
@pytest.mark.parametrize("walk", WALKS)
def test_an_encoded_batch_gives_an_entry_per_keyed_record(walk: Any, recs: Any, base_offset: int) -> None:
    body = body_of(recs)
    segment_base = max(base_offset - 7, 0)
    pos, keyed, bad, out = outcome(walk, body, len(recs), 0, base_offset, segment_base)
    expected = [key_hash(key) << 32 | (offset - segment_base)
                for offset, key in record_keys(body, base_offset, len(recs))[0]]
    assert (pos, keyed, bad, out) == (len(body), len(expected), None, expected)
    assert expected == [crc32c(key) << 32 | (base_offset + i - segment_base)
                        for i, (key, _value, _headers) in enumerate(recs) if key is not None]


@settings(max_examples=200, deadline=None)
@given(batches, st.data())
@pytest.mark.parametrize("walk", WALKS)
def test_a_batch_walked_a_piece_at_a_time_gives_the_same_entries(walk: Any, recs: Any, data: Any) -> None:
    body = memoryview(body_of(recs))  # the indexer passes an uncompressed body in place
    whole = outcome(walk, body, len(recs))
    pos, left, entries = 0, len(recs), []
    while left:
        step = data.draw(st.integers(1, left))
        pos, _keyed, bad, out = outcome(walk, body, step, pos)
        assert bad is None
        entries += out
        left -= step
    assert (pos, entries) == (whole[0], whole[3])


@needs_c
@settings(max_examples=1000, deadline=None)
@given(batches, st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
       st.integers(0, 10_000), st.integers(-3, 3), st.integers(0, 40), st.booleans(),
       st.integers(-5, 50), st.integers(0, 60))
def test_the_c_and_python_walks_agree_on_damaged_batches(recs: Any, edits: Any, cut: int, extra: int, skip: int,
                                                         view: bool, shift: int, max_relative: int) -> None:
    """From any record start (``skip`` records in), on bytes or a memoryview, with offsets
    near and past the segment's limits."""
    body = bytearray(body_of(recs))
    pos = len(body_of(recs[:skip])) if 0 < skip < len(recs) else 0
    for at, byte in edits:
        if body:
            body[at % len(body)] = byte
    body = body[: len(body) - cut % (len(body) + 1)] if cut % 3 == 0 else body
    count = max(len(recs) + extra, 0)
    data: bytes | memoryview = memoryview(bytes(body)) if view else bytes(body)
    args = (count, pos, 1000, 1000 - shift, max_relative)
    assert outcome(rec.key_entries, data, *args) == outcome(key_entries_py, data, *args)


@needs_c
@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 20), st.integers(-(2**63) + 50, 2**63 - 6),
       st.integers(-5, 50), st.integers(0, 2**31), st.integers(0, 30))
def test_the_c_and_python_walks_agree_on_any_bytes(body: bytes, count: int, base_offset: int, shift: int,
                                                   max_relative: int, pos: int) -> None:
    """``segment_base`` near ``base_offset``, so that keyed records are mostly in range."""
    args = (count, min(pos, len(body)), base_offset, base_offset - shift, max_relative)
    assert outcome(rec.key_entries, body, *args) == outcome(key_entries_py, body, *args)


@settings(max_examples=300, deadline=None)
@given(batches, st.integers(0, 2**33), st.integers(-50, 50), st.integers(0, 40))
@pytest.mark.parametrize("walk", WALKS)
def test_a_keyed_record_too_far_from_the_segment_base_stops_the_walk(
        walk: Any, recs: Any, base_offset: int, shift: int, max_relative: int) -> None:
    body = body_of(recs)
    segment_base = base_offset + shift
    got = outcome(walk, body, len(recs), 0, base_offset, segment_base, max_relative)
    keyed = [(i, key) for i, (key, _value, _headers) in enumerate(recs) if key is not None]
    too_far = [i for i, _key in keyed if not 0 <= base_offset + i - segment_base <= max_relative]
    if not too_far:
        assert got[2] is None and got[1] == len(keyed)
        return
    first = too_far[0]
    before = [crc32c(key) << 32 | (base_offset + i - segment_base) for i, key in keyed if i < first]
    start = len(body_of(recs[:first])) if first else 0
    assert got == (start, len(before), base_offset + first, before)
    if walk is not key_entries_py:
        assert got == outcome(key_entries_py, body, len(recs), 0, base_offset, segment_base, max_relative)


def test_a_ten_byte_offset_delta_is_read_exactly() -> None:
    """A damaged record whose offset delta takes ten bytes (70 bits): the offset reported
    is the exact one, as Python's ints read it."""
    delta = bytes([0xFF] * 9 + [0x01])  # a 10-byte varint: 64 bits set, beyond what an int64 holds
    fields = b"\x00" + b"\x00" + delta + b"\x02k" + b"\x00" + b"\x00"  # attrs, ts, delta, key "k"
    body = bytes([len(fields) << 1]) + fields
    for walk in (w.values[0] for w in WALKS):
        pos, keyed, bad, out = outcome(walk, body, 1, 0, 5, 5)
        assert (pos, keyed, out) == (0, 0, []) and bad == 5 + rec.read_varint(delta, 0)[0]
