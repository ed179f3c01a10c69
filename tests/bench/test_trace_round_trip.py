"""bench/trace_round_trip.py splits each round trip into its hops from tcpdump's lines (the
capture itself needs tcpdump and root; its figures are recorded, never asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from trace_round_trip import HOPS, hops, packets  # noqa: E402

LEADER, CLIENT, F1, F2 = 9092, 40001, 40011, 40012


def line(t: float, src: int, dst: int, length: int) -> str:
    return (f"{t:.6f} IP 127.0.0.1.{src} > 127.0.0.1.{dst}: Flags [P.], seq 1:{length + 1}, ack 1, "
            f"win 512, options [nop,nop,TS val 1 ecr 1], length {length}")


def trip(t: float) -> list[str]:
    """One round trip: produce in, both followers answered, their next fetches, the answer."""
    return [
        line(t, CLIENT, LEADER, 200),
        line(t + 0.000010, LEADER, CLIENT, 0)[:-1] + "0",  # a bare ACK: no payload, ignored
        line(t + 0.000250, LEADER, F1, 180),
        line(t + 0.000270, LEADER, F2, 180),
        line(t + 0.000500, F1, LEADER, 90),
        line(t + 0.000600, F2, LEADER, 90),
        line(t + 0.000700, LEADER, CLIENT, 60),
    ]


def test_hops_of_clean_round_trips() -> None:
    lines = trip(100.0) + trip(100.001) + ["reading from file rt.pcap, link-type EN10MB"]
    found = hops(packets(lines), LEADER, {CLIENT}, {F1, F2})
    assert sorted(round(v) for v in found[HOPS[0]]) == [250, 250, 270, 270]
    assert sorted(round(v) for v in found[HOPS[1]]) == [250, 250, 330, 330]
    assert [round(v) for v in found[HOPS[2]]] == [100, 100]
    assert [round(v) for v in found[HOPS[3]]] == [700, 700]
    assert [round(v) for v in found[HOPS[4]]] == [300]


@pytest.mark.parametrize("drop", [2, 4, 6])
def test_a_round_trip_missing_a_packet_is_left_out(drop: int) -> None:
    first = trip(100.0)
    del first[drop]
    found = hops(packets(first + trip(100.001)), LEADER, {CLIENT}, {F1, F2})
    assert len(found[HOPS[3]]) == 1
    assert found[HOPS[4]] == []  # the gap needs the answer before it
