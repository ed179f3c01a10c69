from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.storage.index import CorruptIndexError
from dmq.storage.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    parse_entries,
    write_entries,
)


def test_entry_is_kafkas_34_bytes() -> None:
    txn = AbortedTxn(producer_id=7, first_offset=100, last_offset=150, last_stable_offset=120)
    assert ENTRY_SIZE == 34
    assert txn.pack() == struct.pack(">hqqqq", 0, 7, 100, 150, 120)
    assert parse_entries(txn.pack()) == [txn]


def test_append_load_and_lazy_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    index = TransactionIndex(str(path), 100)
    assert not path.exists()
    index.append(AbortedTxn(1, 90, 105, 106))
    index.append(AbortedTxn(2, 101, 110, 111))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(3, 100, 110, 111))  # last offsets must increase
    index.flush()
    assert path.stat().st_size == 2 * 34
    again = TransactionIndex(str(path), 100)
    again.load()
    assert again.entries == index.entries
    index.close()


def test_collect_stops_at_the_last_stable_offset(tmp_path: Path) -> None:
    index = TransactionIndex(str(tmp_path / "x.txnindex"), 0)
    for txn in [AbortedTxn(1, 0, 10, 5), AbortedTxn(2, 5, 20, 21), AbortedTxn(3, 21, 30, 31)]:
        index.append(txn)
    found, complete = index.collect(11, 25)
    assert found == [AbortedTxn(2, 5, 20, 21), AbortedTxn(3, 21, 30, 31)] and complete
    found, complete = index.collect(0, 21)
    assert [t.producer_id for t in found] == [1, 2] and complete
    found, complete = index.collect(0, 100)
    assert len(found) == 3 and not complete  # later segments may hold more
    assert index.collect(31, 100) == ([], False)
    index.close()


def test_truncate_reset_and_delete(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    index = TransactionIndex(str(path), 0)
    for i in range(5):
        index.append(AbortedTxn(i, i * 10, i * 10 + 5, i * 10 + 6))
    index.truncate_to(25)  # markers at 25 and above go
    assert [t.last_offset for t in index.entries] == [5, 15]
    index.append(AbortedTxn(9, 20, 22, 23))
    index.flush()
    again = TransactionIndex(str(path), 0)
    again.load()
    assert [t.last_offset for t in again.entries] == [5, 15, 22]
    index.reset()
    assert not path.exists() and len(index) == 0
    index.append(AbortedTxn(1, 1, 2, 3))
    index.delete()
    assert not path.exists()


@pytest.mark.parametrize("data", [
    b"\x00" * 33,                                             # not whole entries
    struct.pack(">hqqqq", 1, 1, 1, 5, 6),                      # a version from the future
    struct.pack(">hqqqq", 0, 1, 1, 5, 6),                      # marker below the base offset (10)
    struct.pack(">hqqqq", 0, 1, 10, 15, 16) * 2,               # not increasing
])
def test_corrupt_indexes_are_refused(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "x.txnindex"
    path.write_bytes(data)
    with pytest.raises(CorruptIndexError):
        TransactionIndex(str(path), 10).load()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 1000), st.integers(1, 1000),
                          st.integers(0, 1000)), max_size=20))
def test_write_entries_round_trip(tmp_path_factory: pytest.TempPathFactory,
                                  raw: list[tuple[int, int, int, int]]) -> None:
    entries, last = [], 0
    for pid, span, step, lso_step in raw:
        last += step
        entries.append(AbortedTxn(pid, max(0, last - span), last, last + lso_step))
    path = tmp_path_factory.mktemp("w") / "x.txnindex"
    write_entries(str(path), entries)
    if not entries:
        assert not path.exists()
        return
    index = TransactionIndex(str(path), 0)
    index.load()
    assert index.entries == entries
