"""Framing of a connection's byte stream into requests (dmq.server.network): whatever
the reads' boundaries, every frame reaches the dispatcher whole, once, in order; large
frames are gathered from their reads; a size above the bound closes the connection."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.server.network import GATHER_BYTES, KafkaConnection


class Transport:
    """What KafkaConnection asks of a transport, recording writes and state."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False
        self.reading = True

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


def run_stream(frames: list[bytes], cuts: list[int], max_bytes: int = 10**7,
               ) -> tuple[list[bytes], Transport]:
    """Feed the frames' stream to a connection in reads ending at ``cuts``; return the
    frames its dispatcher got."""
    stream = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
    got: list[bytes] = []

    async def dispatch(frame: bytes, peer: str, dispatched: Any, connection_id: int) -> object:
        got.append(frame)
        return None  # no answer written

    async def main() -> Transport:
        conn = KafkaConnection(dispatch, max_bytes, set(), eager_api_keys=frozenset(range(-1, 100)))
        transport = Transport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        points = sorted({c for c in cuts if 0 < c < len(stream)} | {0, len(stream)})
        for a, b in zip(points, points[1:], strict=False):
            if transport.closed:
                break
            conn.data_received(stream[a:b])
            await asyncio.sleep(0)
        for _ in range(5):
            await asyncio.sleep(0)
        return transport

    transport = asyncio.run(main())
    return got, transport


def frame_of(size: int, seed: int) -> bytes:
    # The first two bytes are the API key; keep it one the connection treats as eager.
    body = bytes((seed + i) % 251 for i in range(min(size, 997))) * (size // 997 + 1)
    return (b"\x00\x00" + body)[:size]


sizes = st.one_of(st.integers(0, 40), st.integers(GATHER_BYTES - 3, GATHER_BYTES + 3),
                  st.integers(GATHER_BYTES, 3 * GATHER_BYTES))


@settings(max_examples=60, deadline=None)
@given(st.lists(sizes, min_size=1, max_size=6), st.lists(st.integers(0, 7 * GATHER_BYTES), max_size=30),
       st.integers(1, 9))
def test_every_frame_arrives_whole_and_in_order_whatever_the_reads(
        frame_sizes: list[int], cuts: list[int], chunk_every: int) -> None:
    frames = [frame_of(n, i) for i, n in enumerate(frame_sizes)]
    total = sum(4 + n for n in frame_sizes)
    # Some examples read in small steps too, across headers and gathered frames alike.
    cuts = cuts + list(range(0, total, max(1, total // (chunk_every * 7))))
    got, transport = run_stream(frames, cuts)
    assert got == frames
    assert not transport.closed


def test_a_large_frame_read_a_byte_at_a_time_then_one_small_frame_in_the_same_read() -> None:
    big = frame_of(GATHER_BYTES + 10, 3)
    small = frame_of(7, 4)
    stream_len = 4 + len(big) + 4 + len(small)
    # The big frame's header arrives alone, then its body in pieces, and its last bytes
    # share a read with the whole next frame.
    cuts = [2, 4, 5, 1000, 40_000, 4 + len(big) - 1, stream_len]
    got, _ = run_stream([big, small], cuts)
    assert got == [big, small]


def test_a_size_above_the_bound_closes_the_connection_and_dispatches_nothing_after() -> None:
    frames = [frame_of(10, 1), frame_of(GATHER_BYTES + 1, 2), frame_of(10, 3)]
    got, transport = run_stream(frames, [3, 14, 20, 30_000], max_bytes=GATHER_BYTES)
    assert got == frames[:1]
    assert transport.closed
