"""``__transaction_state`` records: Kafka's formats and partitioning."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from dmq.transaction import records as rec

values = st.builds(
    rec.TxnValue,
    producer_id=st.integers(min_value=-1, max_value=2**63 - 1),
    producer_epoch=st.integers(min_value=-1, max_value=32767),
    timeout_ms=st.integers(min_value=0, max_value=2**31 - 1),
    status=st.integers(min_value=0, max_value=7),
    partitions=st.lists(st.tuples(st.text(min_size=1, max_size=20),
                                  st.lists(st.integers(min_value=0, max_value=2**31 - 1), max_size=5)
                                  .map(tuple)), max_size=5).map(tuple),
    last_update_ms=st.integers(min_value=-1, max_value=2**62),
    start_ms=st.integers(min_value=-1, max_value=2**62),
)


@given(values, st.text(max_size=50))
def test_records_round_trip(value: rec.TxnValue, transactional_id: str) -> None:
    assert rec.decode_value(rec.encode_value(value)) == value
    assert rec.decode_key(rec.encode_key(transactional_id)) == transactional_id


@given(st.binary(max_size=80))
def test_garbage_is_a_format_error_not_a_crash(data: bytes) -> None:
    for decode in (rec.decode_key, rec.decode_value):
        try:
            decode(data)
        except rec.RecordFormatError:
            pass


def test_value_layout_is_kafkas_v0() -> None:
    value = rec.TxnValue(7, 3, 60_000, 1, (("t", (0, 2)),), 1000, 900)
    expected = (struct.pack(">hqhib", 0, 7, 3, 60_000, 1) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
                + struct.pack(">iii", 2, 0, 2) + struct.pack(">qq", 1000, 900))
    assert rec.encode_value(value) == expected
    assert rec.encode_key("tx") == struct.pack(">h", 0) + struct.pack(">h", 2) + b"tx"


def test_partition_is_kafkas_abs_of_the_java_hash() -> None:
    # Utils.abs(hashCode) % 50: negative hashes are negated, not masked.
    assert rec.java_string_hash("my-app") == -1061206400
    assert rec.partition_for("my-app", 50) == 1061206400 % 50 == 0
    assert rec.partition_for("test-group", 50) == 627841412 % 50
    # Integer.MIN_VALUE maps to 0 ("polygenelubricants".hashCode() is MIN_VALUE).
    assert rec.java_string_hash("polygenelubricants") == -(2**31)
    assert rec.partition_for("polygenelubricants", 50) == 0
