"""A connection frames its byte stream with FrameReader (tests/protocol/test_framing.py):
requests split over many reads reach the dispatcher whole and in order, and a size above
the connection's bound (which the broker may change) closes it."""

from __future__ import annotations

import asyncio
from typing import Any

from support.transport import Transport

from dmq.protocol.framing import GATHER_BYTES
from dmq.server.network import KafkaConnection


def frame_of(size: int, seed: int) -> bytes:
    # The first two bytes are the API key, one the connection treats as eager.
    return (b"\x00\x00" + bytes((seed + i) % 251 for i in range(size)))[:size]


def run(frames: list[bytes], cuts: list[int], max_bytes: int,
        lower_to: int | None = None) -> tuple[list[bytes], bool]:
    stream = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
    got: list[bytes] = []

    async def dispatch(frame: bytes, peer: str, dispatched: Any, connection_id: int) -> object:
        got.append(frame)
        return None

    async def main() -> bool:
        conn = KafkaConnection(dispatch, max_bytes, set(), eager_api_keys=frozenset({0}))
        transport = Transport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        if lower_to is not None:
            conn.max_request_bytes = lower_to
            assert conn.reader.max_bytes == lower_to
        points = sorted({c for c in cuts if 0 < c < len(stream)} | {0, len(stream)})
        for a, b in zip(points, points[1:], strict=False):
            if transport.closed:
                break
            conn.data_received(stream[a:b])
            await asyncio.sleep(0)
        return transport.closed

    closed = asyncio.run(main())
    return got, closed


def test_requests_split_over_many_reads_are_dispatched_whole_and_in_order() -> None:
    frames = [frame_of(10, 1), frame_of(GATHER_BYTES * 2, 2), frame_of(3, 3), frame_of(GATHER_BYTES, 4)]
    got, closed = run(frames, list(range(0, 5 * GATHER_BYTES, 7000)) + [3, 15, 16], max_bytes=10**7)
    assert got == frames and not closed


def test_a_size_above_the_bound_closes_the_connection() -> None:
    frames = [frame_of(10, 1), frame_of(GATHER_BYTES + 1, 2), frame_of(10, 3)]
    got, closed = run(frames, [14, 20, 30_000], max_bytes=GATHER_BYTES)
    assert got == frames[:1] and closed


def test_the_bound_the_broker_sets_on_the_connection_is_the_one_enforced() -> None:
    frames = [frame_of(10, 1), frame_of(500, 2)]
    got, closed = run(frames, [14], max_bytes=10**7, lower_to=100)
    assert got == frames[:1] and closed
