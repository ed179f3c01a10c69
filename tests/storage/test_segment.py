"""LogSegment's in-memory positions of its last batches agree with reading the file."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.record.batch import validate_batches
from dmq.record.records import encode_batch
from dmq.storage.segment import LogSegment

# Each step: append a batch of n records, or truncate to a drawn offset.
STEPS = st.lists(st.one_of(st.tuples(st.just("append"), st.integers(1, 5)),
                           st.tuples(st.just("truncate"), st.integers(0, 400))), min_size=1, max_size=700)


@settings(max_examples=40, deadline=None)
@given(steps=STEPS, probes=st.lists(st.integers(0, 1500), min_size=1, max_size=30))
def test_positions_from_memory_match_the_file(tmp_path_factory, steps, probes) -> None:  # noqa: ANN001
    directory = tmp_path_factory.mktemp("seg")
    segment = LogSegment(str(directory), 0, index_interval_bytes=300)
    next_offset = 0
    for kind, n in steps:
        if kind == "append":
            data = bytearray(encode_batch([(None, b"x" * 20, [])] * n, base_offset=next_offset))
            batches = validate_batches(data, 10**6)
            segment.append(data, batches.headers, batches.positions)
            next_offset += n
        elif n < next_offset:
            segment.truncate_to(n)
            next_offset = segment.next_offset
    segment.flush()
    fresh = LogSegment(str(directory), 0, index_interval_bytes=300)  # nothing in memory: reads the file
    assert fresh.load_indexes()
    fresh.restore_tail_state()
    for offset in [*probes, next_offset - 1, next_offset, 0]:
        assert segment.find_position(offset) == fresh.find_position(offset), offset
    segment.close()
    fresh.close()


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=1500), short=st.integers(1, 700))
def test_append_of_pieces_writes_them_in_order_through_short_writes(tmp_path_factory, sizes, short) -> None:  # noqa: ANN001
    """``append`` of pieces (more than one pwritev takes, some empty) writes exactly their
    concatenation, also when the kernel writes only part of what it was given."""
    directory = tmp_path_factory.mktemp("seg")
    segment = LogSegment(str(directory), 0, index_interval_bytes=300)
    pieces = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    real_pwritev, real_pwrite = os.pwritev, os.pwrite

    def pwritev(fd: int, buffers: list[memoryview], offset: int) -> int:  # at most `short` bytes
        out, left = [], short
        for b in buffers:
            out.append(memoryview(b)[:left])
            left -= len(out[-1])
            if left <= 0:
                break
        return real_pwritev(fd, out, offset)

    os.pwritev = pwritev  # type: ignore[assignment]
    os.pwrite = lambda fd, b, offset: real_pwrite(fd, memoryview(b)[:short], offset)  # type: ignore[assignment]
    try:
        segment.append(list(pieces), [], [])
    finally:
        os.pwritev, os.pwrite = real_pwritev, real_pwrite  # type: ignore[assignment]
    segment.flush()
    assert segment.size == sum(sizes)
    with open(segment.log_path, "rb") as f:
        assert f.read() == b"".join(pieces)
    segment.close()
