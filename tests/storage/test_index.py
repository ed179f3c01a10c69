from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.storage.index import CorruptIndexError, OffsetIndex, TimeIndex


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=0, max_size=60), st.integers(0, 3000))
def test_offset_index_lookup_matches_brute_force(tmp_path_factory, gaps: list[int], target: int) -> None:  # noqa: ANN001
    path = tmp_path_factory.mktemp("idx") / "00000000000000000100.index"
    idx = OffsetIndex(str(path), 100)
    entries = []
    off, pos = 100, 0
    for g in gaps:
        off += g
        pos += g * 10
        idx.append(off, pos)
        entries.append((off, pos))
    expected = max((e for e in entries if e[0] <= target + 100), default=(100, 0))
    assert idx.lookup(target + 100) == expected
    idx.flush()
    again = OffsetIndex(str(path), 100)
    again.load()
    assert again.lookup(target + 100) == expected
    cut = 100 + target
    again.truncate_to(cut)
    assert all(o < cut for o in again.offsets)
    idx.close()


def test_corrupt_index_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(b"\x00" * 13)
    with pytest.raises(CorruptIndexError):
        OffsetIndex(str(path), 0).load()
    path.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x10" * 2)  # not increasing
    with pytest.raises(CorruptIndexError):
        OffsetIndex(str(path), 0).load()


def test_time_index_lookup(tmp_path: Path) -> None:
    t = TimeIndex(str(tmp_path / "x.timeindex"), 0)
    for ts, off in [(100, 5), (90, 6), (200, 10), (300, 20)]:
        t.maybe_append(ts, off)
    assert list(t.timestamps) == [100, 200, 300]  # only increasing timestamps are kept
    assert t.lookup(50) == 0
    assert t.lookup(100) == 0
    assert t.lookup(150) == 5
    assert t.lookup(301) == 20
