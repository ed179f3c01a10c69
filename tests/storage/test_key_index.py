"""The ``.keyindex`` file format and in-memory runs (dmq.storage.key_index): a lookup
returns exactly the entries of a key hash below an offset, newest first; a file that
is torn, corrupt or not ours is refused, never half read."""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.storage import key_index
from dmq.storage.index import CorruptIndexError
from dmq.storage.key_index import (
    HEADER_SIZE,
    KeyIndexFile,
    merge_runs,
    run_candidates,
    write_index,
    write_steps,
)


@pytest.fixture(scope="module", autouse=True)
def small_blocks() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(key_index, "FENCE_EVERY", 4)
        yield


def expected(entries: list[int], hashed: int, below: int, limit: int) -> list[int]:
    return sorted({e & 0xFFFFFFFF for e in entries if e >> 32 == hashed and (e & 0xFFFFFFFF) < below},
                  reverse=True)[:limit]


entry_lists = st.lists(st.tuples(st.sampled_from([0, 1, 7, 2**32 - 1]), st.integers(0, 60)),
                       max_size=120, unique=True).map(lambda pairs: [h << 32 | o for h, o in pairs])


@settings(max_examples=150, deadline=None)
@given(entry_lists, st.sampled_from([0, 1, 7, 3, 2**32 - 1]), st.integers(0, 2**32), st.integers(1, 30),
       st.integers(1, 4))
def test_lookup_finds_exactly_the_entries_of_a_hash(tmp_path_factory: pytest.TempPathFactory, entries: list[int],
                                                    hashed: int, below: int, limit: int, runs: int) -> None:
    path = str(tmp_path_factory.mktemp("ki") / "00000000000000000000.keyindex")
    written = write_index(path, 0, 1234, 99, entries)
    loaded = KeyIndexFile.read_header(path)
    assert (loaded.count, loaded.log_size, loaded.next_offset) == (len(entries), 1234, 99)
    assert not loaded.verified
    loaded.verify()
    assert loaded.fences == written.fences
    want = expected(entries, hashed, below, limit)
    assert loaded.candidates(hashed, below, limit) == want
    assert list(loaded.iter_entries(chunk_entries=7)) == sorted(entries)
    # The same entries as sorted in-memory runs, merged or not.
    parts = [array("Q", sorted(entries[i::runs])) for i in range(runs)]
    found = sorted((c for p in parts for c in run_candidates(p, hashed, below, limit)), reverse=True)[:limit]
    assert found == want
    merged = parts[0]
    for part in parts[1:]:
        merged = merge_runs(merged, part)
    assert list(merged) == sorted(entries)


@pytest.mark.parametrize("damage", ["flip-entry", "flip-header", "torn", "magic", "empty"])
def test_a_damaged_file_is_refused(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "00000000000000000000.keyindex"
    write_index(str(path), 0, 100, 10, [5 << 32 | 1, 5 << 32 | 3, 9 << 32 | 2])
    data = bytearray(path.read_bytes())
    if damage == "flip-entry":
        data[HEADER_SIZE + 3] ^= 1
    elif damage == "flip-header":
        data[30] ^= 1
    elif damage == "torn":
        data = data[:-1]
    elif damage == "magic":
        data[0:8] = b"notours!"
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError):
        KeyIndexFile.read_header(str(path)).verify()


def test_an_unverified_file_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.keyindex"
    write_index(str(path), 0, 100, 10, [5 << 32 | 1])
    with pytest.raises(CorruptIndexError):
        KeyIndexFile.read_header(str(path)).candidates(5, 10, 10)


def test_a_write_stopped_half_way_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.keyindex"
    steps = write_steps(str(path), 0, 100, 10, [iter(range(1000))], chunk_entries=10)
    next(steps)
    next(steps)
    assert os.path.exists(str(path) + ".tmp")
    steps.close()
    assert os.listdir(tmp_path) == []
