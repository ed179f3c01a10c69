"""FrameReader (dmq.protocol.framing): whatever the reads' boundaries, every frame comes out
whole, once, in order; large frames are gathered from their reads; a size outside
[0, max_bytes] raises after the frames before it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.protocol.framing import GATHER_BYTES, FrameReader, FrameSizeError


def frame_of(size: int, seed: int) -> bytes:
    return (bytes((seed + i) % 251 for i in range(min(size, 997))) * (size // 997 + 1))[:size]


def stream_of(frames: list[bytes]) -> bytes:
    return b"".join(len(f).to_bytes(4, "big") + f for f in frames)


def read_in_pieces(reader: FrameReader, stream: bytes, cuts: list[int]) -> list[bytes]:
    got: list[bytes] = []
    points = sorted({c for c in cuts if 0 < c < len(stream)} | {0, len(stream)})
    for a, b in zip(points, points[1:], strict=False):
        reader.feed(stream[a:b], got.append)
    return got


sizes = st.one_of(st.integers(0, 40), st.integers(GATHER_BYTES - 3, GATHER_BYTES + 3),
                  st.integers(GATHER_BYTES, 3 * GATHER_BYTES))


@settings(max_examples=100, deadline=None)
@given(st.lists(sizes, min_size=1, max_size=6), st.lists(st.integers(0, 7 * GATHER_BYTES), max_size=30),
       st.integers(1, 9))
def test_every_frame_comes_out_whole_and_in_order_whatever_the_reads(
        frame_sizes: list[int], cuts: list[int], steps: int) -> None:
    frames = [frame_of(n, i) for i, n in enumerate(frame_sizes)]
    stream = stream_of(frames)
    # Some examples read in small steps too, across headers and gathered frames alike.
    cuts = cuts + list(range(0, len(stream), max(1, len(stream) // (steps * 7))))
    reader = FrameReader()
    assert read_in_pieces(reader, stream, cuts) == frames
    assert not reader.buffer and not reader.gathering


def test_a_large_frame_read_a_byte_at_a_time_then_a_small_frame_in_its_last_read() -> None:
    big, small = frame_of(GATHER_BYTES + 10, 3), frame_of(7, 4)
    stream = stream_of([big, small])
    # The big frame's size arrives alone and split, its body in pieces, and its last
    # byte shares a read with the whole next frame.
    cuts = [2, 4, 5, 1000, 40_000, 4 + len(big) - 1]
    assert read_in_pieces(FrameReader(), stream, cuts) == [big, small]


def test_a_frame_exactly_one_read_long_is_not_copied_into_the_buffer() -> None:
    big = frame_of(GATHER_BYTES * 2, 5)
    reader = FrameReader()
    got: list[bytes] = []
    reader.feed(stream_of([big])[:100], got.append)
    assert reader.gathering and not reader.buffer
    reader.feed(stream_of([big])[100:], got.append)
    assert got == [big] and not reader.gathering


@pytest.mark.parametrize("size", [-1, GATHER_BYTES + 1])
def test_a_size_outside_the_bound_raises_after_the_frames_before_it(size: int) -> None:
    first = frame_of(10, 1)
    data = stream_of([first]) + size.to_bytes(4, "big", signed=True) + b"x" * 20
    reader = FrameReader(max_bytes=GATHER_BYTES)
    got: list[bytes] = []
    with pytest.raises(FrameSizeError) as e:
        reader.feed(data, got.append)
    assert got == [first]
    assert (e.value.size, e.value.max_bytes) == (size, GATHER_BYTES)


def test_the_bound_is_read_when_each_size_arrives() -> None:
    reader = FrameReader(max_bytes=100)
    got: list[bytes] = []
    reader.feed(stream_of([frame_of(50, 1)]), got.append)
    reader.max_bytes = 1000  # say, a SASL client has authenticated
    reader.feed(stream_of([frame_of(500, 2)]), got.append)
    assert [len(f) for f in got] == [50, 500]
