"""dmq.record.delayed: splitting a producer's batches, the DELAYED and DELIVERED records."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmq.record.batch import (
    InvalidRecordError,
    compute_crc,
    iter_headers,
    parse_header,
    validate_batches,
)
from dmq.record.delayed import (
    BATCH_OVERHEAD,
    DELAYED_TYPE,
    DelayedRecord,
    decode_delayed,
    decode_delivered,
    delivery,
    delivery_chunks,
    delivery_records,
    encode_delayed,
    encode_delivered,
    read_control_batch,
    record_size_bound,
    split,
)
from dmq.record.records import decode_batch, encode_batch

NOW = 1_800_000_000_000
MAX = 259_200_000
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

header_values = st.none() | st.binary(max_size=6)
plain_headers = st.lists(st.tuples(st.sampled_from(["a", "trace", "x-y"]), header_values), max_size=2)
delays = st.none() | st.sampled_from([("dmq-delay-ms", 0), ("dmq-delay-ms", 1), ("dmq-delay-ms", 5000),
                                       ("dmq-deliver-at", NOW - 10), ("dmq-deliver-at", NOW + 60_000)])


@st.composite
def records(draw: st.DrawFn) -> tuple[bytes | None, bytes | None, list[Any], int | None]:
    """(key, value, headers, expected deliver time or None when not delayed)."""
    key = draw(st.none() | st.binary(max_size=5))
    value = draw(st.none() | st.binary(max_size=8))
    headers = list(draw(plain_headers))
    delay = draw(delays)
    expected = None
    if delay is not None:
        name, number = delay
        at = NOW + number if name == "dmq-delay-ms" else number
        expected = at if at > NOW else None
        headers.insert(draw(st.integers(0, len(headers))), (name, str(number).encode()))
    return key, value, headers, expected


def batch_of(recs: list[Any], codec: int, producer_id: int, sequence: int, transactional: bool) -> bytes:
    return encode_batch([(k, v, h) for k, v, h, _ in recs], timestamp=NOW - 5, codec=codec,
                        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                        base_sequence=sequence, attributes_extra=0x10 if transactional else 0)


@SETTINGS
@given(batches=st.lists(st.tuples(st.lists(records(), min_size=1, max_size=5), st.sampled_from([0, 1, 3, 4]),
                                  st.booleans(), st.booleans()), min_size=1, max_size=3))
def test_split_keeps_the_batch_shape_and_moves_exactly_the_delayed_records(batches: list[Any]) -> None:
    data = b""
    sequence = 0
    for recs, codec, idempotent, transactional in batches:
        pid = 7 if idempotent else -1
        data += batch_of(recs, codec, pid, sequence if idempotent else -1, transactional and idempotent)
        sequence += len(recs)
    validated = validate_batches(data, 1 << 20)
    result = split(data, validated, NOW, MAX, compacted=False)
    expected_delayed = [(k, v, [h for h in hs if not h[0].startswith("dmq-de")], at)
                        for recs, *_ in batches for k, v, hs, at in recs if at is not None]
    if not expected_delayed:
        assert result is None
        return
    assert result is not None and result.delayed == len(expected_delayed)
    found = iter_headers(result.records)  # whole batches, CRCs hold (gaps are allowed)
    assert [p for p, _ in found] == result.batches.positions
    assert all(compute_crc(result.records, p, h.size) == h.crc for p, h in found)
    got_delayed = []
    kept: list[Any] = []
    # A plain batch whose records were all delayed goes; an idempotent one stays, emptied.
    original = iter([h for h, (recs, _, idempotent, _) in zip(validated.headers, batches, strict=True)
                     if idempotent or any(at is None for *_, at in recs)])
    for header, pos in zip(result.batches.headers, result.batches.positions, strict=True):
        batch = result.records[pos:pos + header.size]
        if pos in result.control_positions:
            assert header.is_control and header.producer_id == -1
            for _, control_type, value in read_control_batch(batch):
                assert control_type == DELAYED_TYPE
                r = decode_delayed(value)
                got_delayed.append((r.key, r.value, r.headers, r.deliver_at))
            continue
        source = next(original)
        # The producer's batch keeps what idempotence and transactions look at (one left
        # with no records is uncompressed, as Kafka writes an empty batch).
        assert (header.base_offset, header.last_offset_delta, header.producer_id,
                header.base_sequence, header.attributes) == (
            source.base_offset, source.last_offset_delta, source.producer_id,
            source.base_sequence, source.attributes if header.record_count else source.attributes & ~0x07)
        kept += [(r.key, r.value, r.headers) for r in decode_batch(batch)[1]]
    assert got_delayed == [(k, v, h, at) for k, v, h, at in expected_delayed]
    assert kept == [(k, v, hs) for recs, *_ in batches for k, v, hs, at in recs if at is None]


def one(headers: list[Any]) -> tuple[bytes, Any]:
    data = encode_batch([(b"k", b"v", headers)], timestamp=NOW)
    return data, validate_batches(data, 1 << 20)


@pytest.mark.parametrize("headers, message", [
    ([("dmq-delay-ms", b"soon")], "not a whole number"),
    ([("dmq-delay-ms", b"-5")], "not a whole number"),
    ([("dmq-delay-ms", None)], "not a whole number"),
    ([("dmq-deliver-at", b"1.5e12")], "not a whole number"),
    ([("dmq-delay-ms", str(MAX + 1).encode())], "above delayed.delivery.max.ms"),
    ([("dmq-deliver-at", str(NOW + MAX + 1).encode())], "above delayed.delivery.max.ms"),
])
def test_bad_delay_headers_are_invalid_records(headers: list[Any], message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message) as e:
        split(*one(headers), NOW, MAX, compacted=False)
    assert e.value.error == "invalid_record"


def test_a_compacted_topic_refuses_delays_and_takes_records_without_them() -> None:
    with pytest.raises(InvalidRecordError, match="compacted"):
        split(*one([("dmq-delay-ms", b"10")]), NOW, MAX, compacted=True)
    assert split(*one([("other", b"dmq-delay-ms")]), NOW, MAX, compacted=True) is None


@SETTINGS
@given(record=st.builds(DelayedRecord, deliver_at=st.integers(0, 2**62), producer_id=st.integers(-1, 2**62),
                        timestamp=st.integers(-1, 2**62), key=st.none() | st.binary(max_size=9),
                        value=st.none() | st.binary(max_size=9),
                        headers=st.lists(st.tuples(st.text(max_size=5), header_values), max_size=3)),
       named=st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)), max_size=5))
def test_control_values_round_trip(record: DelayedRecord, named: list[tuple[int, int]]) -> None:
    assert decode_delayed(encode_delayed(record)) == record
    assert decode_delivered(encode_delivered(named)) == named


@pytest.mark.parametrize("value", [None, b"", b"\x00", encode_delayed(DelayedRecord(1, -1, 2, b"k", b"v"))[:-1]])
def test_unreadable_control_values_are_corrupt(value: bytes | None) -> None:
    with pytest.raises(InvalidRecordError):
        decode_delayed(value)


def test_a_delivery_is_a_marker_then_the_records_with_their_own_timestamps() -> None:
    entries = [(12, DelayedRecord(NOW, -1, NOW - 100, b"a", b"1", [("h", b"x")])),
               (15, DelayedRecord(NOW + 1, -1, NOW - 50, None, b"2"))]
    data = delivery(entries, NOW + 2)
    validated = validate_batches(data, 1 << 20)
    marker, batch = validated.headers
    assert marker.is_control and not batch.is_control
    pos = validated.positions[0]
    assert [decode_delivered(v) for _, _, v in read_control_batch(data[pos:marker.size])] == [
        [(12, NOW), (15, NOW + 1)]]
    _, recs = decode_batch(data[validated.positions[1]:])
    assert [(r.key, r.value, r.headers, r.timestamp) for r in recs] == [
        (b"a", b"1", [("h", b"x")], NOW - 100), (None, b"2", [], NOW - 50)]
    assert parse_header(data, validated.positions[1]).producer_id == -1


def test_a_batch_without_headers_is_not_searched_for_delay_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    """validate_batches says which batches have no header at all; split does not search
    their bytes (a value may hold the headers' prefix: it asks for nothing)."""
    from dmq.record import delayed
    plain = encode_batch([(None, b"dmq-delay-ms in a value", [])])
    with_header = encode_batch([(None, b"v", [("trace", b"1")])])
    data = plain + with_header
    validated = validate_batches(data, len(data))
    assert validated.headerless == frozenset({0})
    searched: list[int] = []
    real = delayed.may_hold_delay_headers
    monkeypatch.setattr(delayed, "may_hold_delay_headers",
                        lambda records, header, pos: searched.append(pos) or real(records, header, pos))
    assert split(data, validated, NOW, MAX, compacted=False) is None
    assert searched == [len(plain)]


delayed_records = st.builds(
    DelayedRecord, deliver_at=st.integers(NOW, NOW + MAX), producer_id=st.just(-1),
    timestamp=st.integers(0, NOW), key=st.none() | st.binary(max_size=300),
    value=st.none() | st.binary(max_size=3000),
    headers=st.lists(st.tuples(st.text(max_size=8), header_values), max_size=3))


@SETTINGS
@given(records=st.lists(delayed_records, min_size=1, max_size=40), limit=st.integers(100, 20_000),
       codec=st.sampled_from([0, 1, 2, 3, 4]))
def test_delivery_chunks_fit_the_limit_and_keep_every_record_in_order(
        records: list[DelayedRecord], limit: int, codec: int) -> None:
    entries = list(enumerate(records))
    chunks = delivery_chunks(entries, limit)
    assert [e for chunk in chunks for e in chunk] == entries
    for chunk in chunks:
        batch = delivery_records(chunk, codec)
        header = parse_header(batch, 0)
        assert header.size <= limit or len(chunk) == 1  # a record too large alone goes alone
        assert header.compression in (0, codec)
        assert [(r.key, r.value, r.timestamp) for r in decode_batch(batch)[1]] == \
            [(r.key, r.value, r.timestamp) for _, r in chunk]
        plain = encode_batch([(r.key, r.value, r.headers) for _, r in chunk],
                             timestamps=[r.timestamp for _, r in chunk])
        assert len(plain) <= sum(record_size_bound(r) for _, r in chunk) + BATCH_OVERHEAD
