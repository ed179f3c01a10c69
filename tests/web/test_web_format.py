"""The console's pure parts: how values are shown, forms parsed, assignments decoded, and
the bounded history behind message rates and lag over time."""

from __future__ import annotations

import struct

import pytest

from dmq.web import format as fmt
from dmq.web.app import merge, parse_pairs, parse_time, sparkline
from dmq.web.kafka import Message, decode_assignment, parse_bootstrap
from dmq.web.sampler import HISTORY, MAX_GROUPS, History


def test_sizes_times_and_rates() -> None:
    assert [fmt.size(n) for n in (0, 1023, 1024, 1536, 5 * 1024**3, -1)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 GiB", "?"]
    assert fmt.timestamp(1_700_000_000_123) == "2023-11-14 22:13:20.123"
    assert fmt.timestamp(-1) == "-"
    now = 1_000_000_000
    assert [fmt.age(now - s * 1000, now) for s in (5, 65, 3 * 3600 + 60, 2 * 86400 + 3600)] == [
        "5 s", "1 min 5 s", "3 h 1 min", "2 d 1 h"]
    assert (fmt.rate(None), fmt.rate(2.5), fmt.rate(12_345)) == ("-", "2.5/s", "12.3 k/s")


def test_record_bytes_as_json_text_or_hex() -> None:
    assert fmt.show_bytes(b'{"a":[1,2]}', "json") == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert fmt.show_bytes(b"not json", "json") == "not json"
    assert fmt.show_bytes(b"\xff\x00A", "text") == "\ufffd\x00A"
    assert fmt.show_bytes(b"\xff\x00A", "hex") == "ff 00 41"
    assert fmt.show_bytes(None, "json") == "null"
    assert fmt.matches("ord", None, b"order-1") and not fmt.matches("x", b"abc", "def")


def test_forms() -> None:
    assert parse_pairs("a=1, b = two\n\nc=") == {"a": "1", "b": "two", "c": ""}
    with pytest.raises(ValueError, match="expected key=value"):
        parse_pairs("oops")
    assert parse_time("1700000000000") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13") == 1_699_999_980_000
    with pytest.raises(ValueError, match="epoch milliseconds"):
        parse_time("yesterday")
    assert parse_bootstrap("PLAINTEXT://h:1, k:2") == [("h", 1), ("k", 2)]
    with pytest.raises(ValueError):
        parse_bootstrap("h:x")


def test_consumer_assignment_decoding() -> None:
    def encode(topics: dict[str, list[int]]) -> bytes:
        out = struct.pack(">hi", 0, len(topics))
        for t, ps in topics.items():
            out += struct.pack(">h", len(t)) + t.encode() + struct.pack(f">i{len(ps)}i", len(ps), *ps)
        return out + struct.pack(">i", -1)  # no user data

    assert decode_assignment(encode({"b": [1, 0], "a": [2]})) == [("a", 2), ("b", 0), ("b", 1)]
    assert decode_assignment(b"") == [] and decode_assignment(b"\x00\x00\x00\x00\x00\x05") == []


def test_merge_interleaves_partitions_by_timestamp() -> None:
    def m(p: int, o: int, ts: int) -> Message:
        return Message(p, o, ts, None, None, ())

    found = {0: [m(0, 0, 10), m(0, 1, 30)], 1: [m(1, 0, 20)]}
    assert [(x.partition, x.offset) for x in merge(found, newest_first=False)] == [(0, 0), (1, 0), (0, 1)]
    newest = {p: list(reversed(v)) for p, v in found.items()}
    assert [(x.partition, x.offset) for x in merge(newest, newest_first=True)] == [(0, 1), (1, 0), (0, 0)]


def test_history_is_bounded_and_gives_rates() -> None:
    h = History()
    h.record_topics(100.0, {"t": 1000})
    assert h.rate("t", 1000, 100.5) is None  # less than a second of history
    assert h.rate("t", 1500, 110.0) == 50.0
    h.record_topics(200.0, {"t": 2000})  # the first sample is now older than the window
    assert h.rate("t", 2600, 210.0) == 60.0
    h.record_topics(300.0, {})  # a deleted topic is forgotten
    assert h.rate("t", 10, 301.0) is None
    for i in range(HISTORY + 5):
        h.record_lag("g", float(i), i, i)
    assert len(h.lag_series("g")) == HISTORY and h.lag_series("g")[-1] == (HISTORY + 4, HISTORY + 4)
    for i in range(MAX_GROUPS + 3):
        h.record_lag(f"g{i}", 0.0, 0, 0)
    assert len(h.group_lag) == MAX_GROUPS and "g" not in h.group_lag and f"g{MAX_GROUPS + 2}" in h.group_lag
    h.forget_groups_except({"g5"})
    assert list(h.group_lag) == ["g5"]


def test_sparkline_is_svg_of_numbers_only() -> None:
    assert sparkline([(0, 5)]) == ""
    svg = sparkline([(0, 0), (1000, 10), (2000, 5)], width=100, height=20)
    assert svg.startswith('<svg class="spark"') and 'points="0.0,19.0 50.0,1.0 100.0,10.0"' in svg
