"""The source's bulk decoder (fetched record batches to Arrow) against dmq's record decoder."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

from dmq.record.batch import TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK  # noqa: E402
from dmq.record.control import ControlRecordType, EndTxnMarker, build_end_txn_marker_batch  # noqa: E402
from dmq.record.records import decode_batch, encode_batch  # noqa: E402
from dmq.spark import arrow_records  # noqa: E402
from dmq.spark.arrow_records import CorruptRecordsError, arrow_batches, next_offset  # noqa: E402

# The record walks: numpy's everywhere, and the C one where the extension is built. Every
# read below goes through each, and they must agree (rows, or both CorruptRecordsError).
WALKS = {"numpy": arrow_records._fields_np}
COLUMNS = {"numpy": lambda buf, starts, lengths: arrow_records._binary(pa.py_buffer(buf), starts, lengths)}
if arrow_records._fields is not arrow_records._fields_np:
    WALKS["c"] = arrow_records._fields_c
    COLUMNS["c"] = arrow_records._binary_c

blobs = st.one_of(st.none(), st.binary(max_size=300),
                  st.sampled_from([b"", b"x" * 63, b"y" * 64, b"z" * 8200, b"w" * 70000]))
headers = st.lists(st.tuples(st.text(max_size=8), blobs), max_size=3)
records = st.tuples(blobs, blobs, headers)
batches = st.tuples(st.lists(records, min_size=1, max_size=40),
                    st.sampled_from([0, 1, 2, 3, 4]),  # none, gzip, snappy, lz4, zstd
                    st.booleans(),  # LogAppendTime
                    st.lists(st.integers(-(2**40), 2**41), min_size=1, max_size=40))


def rows(data: bytes, start: int, end: int, **kw: object) -> list[tuple]:
    """The rows read from ``data`` by each record walk, which must agree."""
    results: list[list[tuple] | CorruptRecordsError] = []
    for name, walk in WALKS.items():
        arrow_records._fields, arrow_records._column = walk, COLUMNS[name]
        try:
            results.append(_rows(data, start, end, **kw))
        except CorruptRecordsError as e:
            results.append(e)
        finally:
            best = "c" if "c" in WALKS else "numpy"
            arrow_records._fields, arrow_records._column = WALKS[best], COLUMNS[best]
    first = results[0]
    if isinstance(first, CorruptRecordsError):
        assert all(isinstance(r, CorruptRecordsError) for r in results), "the record walks disagree"
        raise first
    assert all(r == first for r in results), "the record walks disagree"
    return first


def _rows(data: bytes, start: int, end: int, **kw: object) -> list[tuple]:
    out = []
    for rb in arrow_batches(data, start, end, topic="tôpic", partition=7, **kw):  # type: ignore[arg-type]
        d = rb.to_pydict()
        micros = rb.column("timestamp").cast(pa.int64()).to_pylist()
        assert set(d["topic"]) == {"tôpic"} and set(d["partition"]) == {7}
        for i in range(rb.num_rows):
            hs = [(h["key"], h["value"]) for h in d["headers"][i]] if "headers" in d else None
            out.append((d["offset"][i], micros[i] // 1000, d["timestampType"][i], d["key"][i], d["value"][i], hs))
    return out


def build(spec: list) -> tuple[bytes, list[tuple]]:
    """Batches as producers write them, and their records as dmq.record.records reads them."""
    data, expected, offset = b"", [], 1000
    for recs, codec, log_append, stamps in spec:
        ts = [stamps[i % len(stamps)] for i in range(len(recs))]
        batch = encode_batch(recs, base_offset=offset, timestamps=ts, codec=codec,
                             attributes_extra=TIMESTAMP_TYPE_MASK if log_append else 0)
        header, decoded = decode_batch(batch)
        expected += [(r.offset, r.timestamp, int(log_append), r.key, r.value, r.headers) for r in decoded]
        data += batch
        offset += len(recs) + 3  # a gap between batches, as compaction leaves
    return data, expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batches, min_size=1, max_size=4), st.integers(0, 60), st.integers(1, 200), st.integers(0, 10**6))
def test_rows_are_the_records_of_the_range(spec: list, skip: int, span: int, cut: int) -> None:
    data, expected = build(spec)
    start = 1000 + skip
    end = start + span
    wanted = [e for e in expected if start <= e[0] < end]
    last_offset = max(e[0] for e in expected)
    # A fetch answer may end in a partial batch: it is ignored.
    first_size = int.from_bytes(data[8:12], "big") + 12
    fetched = data + data[: cut % first_size]
    assert rows(fetched, start, end, include_headers=True) == wanted
    assert [g[:5] for g in rows(fetched, start, end)] == [e[:5] for e in wanted]
    assert next_offset(fetched) == last_offset + 1


def test_one_size_records_and_varied_sizes_give_the_same_rows() -> None:
    """Fixed-size values (found in runs with numpy) and varied ones (walked) alike, across the
    offset deltas where their varint grows (64 and 8192 records)."""
    fixed = [(None, b"v" * 100, []) for _ in range(9000)]
    varied = [(b"k%d" % i, b"v" * (i % 300), []) for i in range(9000)]
    for recs in (fixed, varied):
        data = encode_batch(recs, base_offset=5, timestamp=1_700_000_000_000)
        got = rows(data, 0, 10**6)
        assert [(g[0], g[3], g[4]) for g in got] == [(5 + i, k, v) for i, (k, v, _) in enumerate(recs)]


def marker(pid: int, commit: bool, offset: int) -> bytes:
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    batch = bytearray(build_end_txn_marker_batch(EndTxnMarker(kind, 0), producer_id=pid, producer_epoch=0,
                                                 timestamp=1))
    batch[0:8] = offset.to_bytes(8, "big")
    return bytes(batch)


def txn(pid: int, values: list[bytes], offset: int, codec: int = 0) -> bytes:
    return encode_batch([(None, v, []) for v in values], base_offset=offset, timestamp=1, codec=codec,
                        producer_id=pid, producer_epoch=0, base_sequence=0, attributes_extra=TRANSACTIONAL_MASK)


def test_read_committed_leaves_out_aborted_transactions_and_markers() -> None:
    data = b"".join([
        txn(1, [b"a0", b"a1"], 0),                     # producer 1's transaction: aborted
        txn(2, [b"c0"], 2, codec=3),                   # producer 2's: committed
        encode_batch([(None, b"plain", [])], base_offset=3, timestamp=1),
        marker(1, False, 4),
        marker(2, True, 5),
        txn(1, [b"a2"], 6),                            # producer 1 again, after its abort: committed
        marker(1, True, 7),
    ])
    aborted = [(1, 0)]

    def values(**kw: object) -> list[bytes]:
        return [r[4] for r in rows(data, 0, 100, aborted=aborted, **kw)]

    assert values(read_committed=True) == [b"c0", b"plain", b"a2"]
    assert values(read_committed=False) == [b"a0", b"a1", b"c0", b"plain", b"a2"]
    assert next_offset(data) == 8
    assert [r[4] for r in rows(data, 1, 7, read_committed=False)] == [b"a1", b"c0", b"plain", b"a2"]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 255), st.booleans())
def test_corrupt_records_are_an_error_not_a_crash(where: int, byte: int, headers_too: bool) -> None:
    """A damaged batch body gives CorruptRecordsError (or, where the damage still parses,
    rows), never an IndexError, a huge allocation or a hang."""
    recs = [(b"k%d" % i, b"v" * (i * 7 % 90), [("h", b"x")] if i % 3 else []) for i in range(50)]
    data = bytearray(encode_batch(recs, base_offset=0, timestamp=1))
    pos = 61 + where % (len(data) - 61)
    data[pos] = byte
    try:
        got = rows(bytes(data), 0, 100, include_headers=headers_too)
    except CorruptRecordsError:
        return
    assert len(got) <= 50


def test_the_c_walk_is_built_and_used() -> None:
    """The package builds its C extension where a compiler is (as every test machine has)."""
    assert "c" in WALKS and arrow_records._fields is arrow_records._fields_c
    assert arrow_records._column is arrow_records._binary_c


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(st.tuples(st.integers(-3, 320), st.integers(-3, 40)), max_size=12))
def test_gather_builds_the_column_take_builds_or_refuses(buf: bytes, ranges: list) -> None:
    """Ranges inside the buffer give the column the numpy path's ``take`` gives (a negative
    length: a null); a range outside it (which the field checks never pass on) is an error,
    not a read."""
    starts = np.array([a for a, _ in ranges], dtype=np.int64)
    lengths = np.array([n for _, n in ranges], dtype=np.int64)
    outside = any(n > 0 and (a < 0 or a + n > len(buf)) for a, n in ranges)
    try:
        got = arrow_records._binary_c(buf, starts, lengths)
    except CorruptRecordsError:
        assert outside
        return
    assert not outside
    got.validate(full=True)
    expected = [None if n < 0 else buf[a : a + n] for a, n in ranges]
    bounds = [b for a, n in ranges for b in (a, a + max(n, 0))]
    if bounds and min(bounds) >= 0 and max(bounds) <= len(buf) and bounds == sorted(bounds):
        # take's case: ranges in buffer order, inside it
        assert arrow_records._binary(pa.py_buffer(buf + bytes(16)), starts, lengths).to_pylist() == expected
    assert got.to_pylist() == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=0, max_size=40), st.integers(1, 8)), min_size=1, max_size=3),
       st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4))
def test_the_walks_agree_on_any_bodies(pieces: list, flips: list) -> None:
    """Bodies of arbitrary bytes, or of valid records with bytes changed, claiming any record
    count (at least one: the caller skips empty batches): both walks give the same fields or
    both CorruptRecordsError."""
    bodies, parts, pos = [], [], 0
    for raw, count in pieces:
        if raw:  # valid records, then damaged below
            recs = [(raw[:i], raw[i:], [("h", raw)] if i % 2 else []) for i in range(count)]
            raw = encode_batch(recs, timestamp=1)[61:]
        parts.append(raw)
        bodies.append((pos, pos + len(raw), count))
        pos += len(raw)
    buf = bytearray(b"".join([*parts, bytes(16)]))
    for where, byte in flips:
        if pos:
            buf[where % pos] = byte
    results = []
    for walk in WALKS.values():
        data = bytes(buf)
        try:
            fields = walk(data, np.frombuffer(data, dtype=np.uint8), bodies)
            results.append([f.tolist() for f in fields])
        except CorruptRecordsError:
            results.append(None)
    assert all(r == results[0] for r in results)


def fields_or_none(walk: object, body: bytes, count: int) -> list | None:
    data = body + bytes(16)
    try:
        fields = walk(data, np.frombuffer(data, dtype=np.uint8), [(0, len(body), count)])  # type: ignore[operator]
    except CorruptRecordsError:
        return None
    return [f.tolist() for f in fields]


def test_the_walks_agree_on_every_one_byte_change() -> None:
    """Every value of every byte of a small body (a record with a key, one with a header):
    the field checks' bounds, exhaustively."""
    body = encode_batch([(b"k", b"vv", []), (None, b"", [("h", b"x")])], timestamp=1)[61:]
    changed = 0
    for pos in range(len(body)):
        for value in range(256):
            damaged = body[:pos] + bytes([value]) + body[pos + 1:]
            got = [fields_or_none(walk, damaged, 2) for walk in WALKS.values()]
            assert all(g == got[0] for g in got), (pos, value)
            changed += got[0] is None
    assert changed > len(body) * 64  # many changes are errors: the checks are on


def uvarint(u: int) -> bytes:
    out = bytearray()
    while u >> 7:
        out.append(u & 0x7F | 0x80)
        u >>= 7
    return bytes(out) + bytes([u])


def zigzag(v: int) -> bytes:
    return uvarint(v << 1 if v >= 0 else (-v << 1) - 1)


def record(key_len: int, key: bytes, val_len: int, val: bytes, length: bytes | None = None) -> bytes:
    """A record with its fields as given (attributes, deltas 0, no headers)."""
    rest = b"\0\0\0" + zigzag(key_len) + key + zigzag(val_len) + val + b"\0"
    return (zigzag(len(rest)) if length is None else length) + rest


@pytest.mark.parametrize("body", [
    # a record length of ten bytes whose value has bits above bit 63 (2^64 plus the real one):
    # numpy read it exactly and refused it, C read it modulo 2^64 and took it
    record(-1, b"", 2, b"ab", length=uvarint((1 << 64) + 2 * 8)) + record(-1, b"", 2, b"ab"),
    # lengths near 2^63 wrapped around in numpy's int64 arithmetic (an IndexError, or an
    # OverflowError for the record length)
    record(2**63 - 1, b"kk", 1, b"v"),
    record(-1, b"", 2**63 - 1, b"v"),
    bytes.fromhex("8c80808080808080807600000001010000"),
])
def test_lengths_beyond_the_body_are_corrupt_in_both_walks(body: bytes) -> None:
    """Found by fuzzing the two walks against each other (ASan build, 4.7 M inputs)."""
    count = 2 if body.startswith(uvarint((1 << 64) + 16)) else 1
    for walk in WALKS.values():
        assert fields_or_none(walk, body, count) is None


def test_a_huge_record_count_is_an_error_not_an_allocation() -> None:
    batch = bytearray(encode_batch([(None, b"x", [])], timestamp=1))
    batch[57:61] = (2**31 - 1).to_bytes(4, "big")  # the batch header's record count
    with pytest.raises(CorruptRecordsError):
        rows(bytes(batch), 0, 10)


def test_bad_batches_are_named() -> None:
    batch = bytearray(encode_batch([(None, b"x", [])], timestamp=1, codec=1))
    batch[70:80] = bytes(10)  # the gzip stream
    with pytest.raises(CorruptRecordsError, match="cannot decompress"):
        rows(bytes(batch), 0, 10)
    batch = bytearray(encode_batch([(None, b"x", [])], timestamp=1))
    batch[16] = 1  # magic
    with pytest.raises(CorruptRecordsError, match="magic 1"):
        rows(bytes(batch), 0, 10)


def test_schema_is_the_one_spark_expects(spark) -> None:  # noqa: ANN001 - the session parses the DDL
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    from dmq.spark.source import schema_for

    data = encode_batch([(None, b"x", [("h", None)])], timestamp=1)
    for with_headers in (False, True):
        (rb,) = arrow_batches(data, 0, 1, topic="t", partition=0, include_headers=with_headers)
        expected = to_arrow_schema(_parse_datatype_string(schema_for(with_headers)), timezone="UTC")
        assert rb.schema.equals(expected), (rb.schema, expected)
