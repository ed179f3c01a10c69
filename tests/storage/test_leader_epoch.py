from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_log import append, make_log, read_offsets

from dmq.record.batch import InvalidRecordError
from dmq.storage.leader_epoch import UNDEFINED, LeaderEpochFileCache, write_plans


def brute_end_offset(entries: list[tuple[int, int]], requested: int, leo: int) -> tuple[int, int]:
    """OffsetForLeaderEpoch by definition: the largest epoch <= requested, and where it ends."""
    older = [(e, s) for e, s in entries if e <= requested]
    if not older:
        return UNDEFINED, UNDEFINED
    epoch = older[-1][0]
    later = [s for e, s in entries if e > requested]
    return epoch, later[0] if later else leo


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 20)), max_size=12),
       requested=st.integers(-1, 40))
def test_end_offset_for_matches_definition(tmp_path_factory, steps, requested) -> None:  # noqa: ANN001
    cache = LeaderEpochFileCache(str(tmp_path_factory.mktemp("epochs")))
    epoch, offset = 0, 0
    for de, do in steps:
        epoch += de
        offset += do
        cache.assign(epoch, offset)
    entries = cache.entries
    assert entries == sorted(entries) and len({e for e, _ in entries}) == len(entries)
    assert all(a[1] < b[1] for a, b in zip(entries, entries[1:], strict=False))
    leo = offset + 5
    assert cache.end_offset_for(requested, leo) == brute_end_offset(entries, requested, leo)
    # The checkpoint file round-trips.
    assert LeaderEpochFileCache(cache.path.rsplit("/", 1)[0]).entries == entries


def test_leader_appends_record_epochs_and_truncation_drops_them(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    append(log, 3)  # epoch 0 (make_log appends as leader with epoch 0)
    log.append_as_leader(*_batch(2), leader_epoch=4)
    assert log.leader_epochs.entries == [(0, 0), (4, 3)]
    assert log.leader_epochs.end_offset_for(0, log.log_end_offset) == (0, 3)
    assert log.leader_epochs.end_offset_for(2, log.log_end_offset) == (0, 3)
    assert log.leader_epochs.end_offset_for(4, log.log_end_offset) == (4, 5)
    log.truncate_to(3)
    assert log.leader_epochs.entries == [(0, 0)]
    log.close()
    reopened = make_log(tmp_path)
    assert reopened.leader_epochs.entries == [(0, 0)]
    assert reopened.log_end_offset == 3


def test_follower_append_keeps_offsets_epochs_and_producer_state(tmp_path: Path) -> None:
    leader = make_log(tmp_path / "leader")
    append(leader, 4)
    leader.append_as_leader(*_batch(3, producer_id=7), leader_epoch=2)
    follower = make_log(tmp_path / "follower")
    data = leader.read(0, 10**9, leader.log_end_offset)
    assert data is not None
    raw = data.read()
    # A fetch may end in a partial batch: only whole batches are taken.
    taken = follower.append_as_follower(raw + raw[:30])
    assert taken == len(raw)
    assert follower.log_end_offset == leader.log_end_offset == 7
    assert read_offsets(follower, 0) == list(range(7))
    assert follower.leader_epochs.entries == leader.leader_epochs.entries == [(0, 0), (2, 4)]
    assert 7 in follower.producer_state.producers
    # Going backwards or a flipped byte is refused, and nothing is appended.
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(raw)
    corrupt = bytearray(raw)
    corrupt[-1] ^= 0xFF
    fresh = make_log(tmp_path / "fresh")
    with pytest.raises(InvalidRecordError):
        fresh.append_as_follower(corrupt)
    assert fresh.log_end_offset == 0


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    append(log, 5)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.leader_epochs.entries == []
    log.append_as_leader(*_batch(2), leader_epoch=1)
    assert read_offsets(log, 100) == [100, 101]


def _batch(n: int, producer_id: int = -1) -> tuple[bytearray, object]:
    from dmq.record.batch import validate_batches
    from dmq.record.records import encode_batch

    raw = bytearray(encode_batch([(b"k", b"v" * 10, [])] * n, timestamp=1000, producer_id=producer_id,
                                 producer_epoch=0 if producer_id >= 0 else -1,
                                 base_sequence=0 if producer_id >= 0 else -1))
    return raw, validate_batches(raw, 10**6)


def test_log_without_checkpoint_rebuilds_epochs(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    append(log, 2)
    log.append_as_leader(*_batch(2), leader_epoch=3)
    log.close()
    (tmp_path / "leader-epoch-checkpoint").unlink()
    assert make_log(tmp_path).leader_epochs.entries == [(0, 0), (3, 2)]


class _Writes:
    """Records each write of a cache's file: the thread it ran on and the entries."""

    def __init__(self, cache: LeaderEpochFileCache) -> None:
        self.real = cache._write
        self.done: list[tuple[int, tuple[tuple[int, int], ...]]] = []
        cache._write = self  # type: ignore[method-assign]

    def __call__(self, entries: tuple[tuple[int, int], ...]) -> None:
        self.real(entries)
        self.done.append((threading.get_ident(), entries))


def _on_disk(cache: LeaderEpochFileCache) -> list[tuple[int, int]]:
    return LeaderEpochFileCache(cache.path.rsplit("/", 1)[0]).entries


def test_a_planned_write_on_a_thread_leaves_the_assign_nothing_to_write(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(str(tmp_path))
    cache.assign(0, 0)
    writes = _Writes(cache)
    plan = cache.plan([(3, 10)])
    assert plan == (((0, 0),), ((0, 0), (3, 10)), 0)
    worker = threading.Thread(target=lambda: write_plans([(cache, *plan)]))
    worker.start()
    worker.join()
    assert _on_disk(cache) == [(0, 0), (3, 10)] and cache.entries == [(0, 0)]  # the file first
    cache.assign(3, 10)
    assert cache.entries == [(0, 0), (3, 10)] and not cache.dirty
    assert [entries for _, entries in writes.done] == [((0, 0), (3, 10))]
    assert writes.done[0][0] != threading.get_ident()
    assert cache.plan([(3, 10)]) is None  # nothing left to write


def test_a_late_planned_write_never_puts_back_older_entries(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(str(tmp_path))
    cache.assign(0, 0)
    plan = cache.plan([(3, 10)])
    assert plan is not None
    cache.assign(5, 12)  # the owner moved on (and wrote) before the thread ran
    assert not cache.write_planned(*plan)
    assert _on_disk(cache) == cache.entries == [(0, 0), (5, 12)]
    # A fence (a new leadership, another leader to follow) voids a plan made before it,
    # even when the entries did not change: appends may follow it at once.
    plan = cache.plan([(7, 20)])
    assert plan is not None
    cache.fence()
    assert not cache.write_planned(*plan) and _on_disk(cache) == [(0, 0), (5, 12)]
    assert write_plans([(cache, *plan)]) == [True]  # not written, and no error either


def test_a_truncation_left_unwritten_is_written_before_the_next_append(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(str(tmp_path))
    cache.assign(0, 0)
    cache.assign(2, 10)
    cache.truncate_from_end(10, flush=False)
    assert cache.dirty and _on_disk(cache) == [(0, 0), (2, 10)]
    cache.assign(0, 12)  # an append in a known epoch: the file is brought up to date first
    assert not cache.dirty and _on_disk(cache) == [(0, 0)]
    cache.assign(4, 12)
    cache.truncate_from_end(12, flush=False)
    write_plans([(cache, *cache.planned_flush())])
    assert not cache.dirty and _on_disk(cache) == [(0, 0)]


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["append", "plan", "planned_append", "late_write",
                                                 "truncate", "flush", "fence"]),
                                st.integers(0, 2), st.integers(0, 6)), max_size=30))
def test_the_file_never_mislabels_an_appended_batch(tmp_path_factory, steps) -> None:  # noqa: ANN001
    """A model of the cache's callers: appends (``assign`` then the batch), plans whose own
    caller appends only after writing them, others that append after a ``fence()``,
    truncations left to a thread, and plans written late. After every step, what a restart
    would load (the file, cut at the log end) equals the entries below the log end: no batch
    ever sits under another epoch's entry on disk, whenever the process dies."""
    cache = LeaderEpochFileCache(str(tmp_path_factory.mktemp("epochs")))
    log_end = 0  # offsets [0, log_end) hold batches

    def latest() -> int:
        return max(cache.latest_epoch, 0)

    def append(epoch: int) -> None:
        nonlocal log_end
        cache.assign(epoch, log_end)  # Log.append_*: the entry, then the batch
        assert _on_disk(cache) == cache.entries
        log_end += 1

    plans: list[tuple[tuple[int, int], tuple[object, ...]]] = []
    for op, de, n in steps:
        if op == "append":
            cache.fence()  # another appender: a new leadership, or another leader to follow
            for _ in range(n):
                append(latest() + de)
        elif op == "plan":
            assign = (latest() + 1 + de, log_end)
            plan = cache.plan([assign])
            if plan is not None:
                plans.append((assign, plan))
        elif op == "planned_append" and plans:
            assign, plan = plans.pop()
            base, _planned, generation = plan  # type: ignore[misc]
            if cache.write_planned(*plan):  # type: ignore[arg-type]
                # Its caller appends only if nothing changed meanwhile (the fetcher's recheck).
                if base == tuple(cache.entries) and generation == cache.generation and assign[1] == log_end:
                    append(assign[0])
        elif op == "late_write" and plans:
            write_plans([(cache, *plans.pop(0)[1])])  # type: ignore[list-item]
        elif op == "truncate":
            cache.fence()
            log_end = max(0, log_end - n)
            cache.truncate_from_end(log_end, flush=False)
        elif op == "flush":
            write_plans([(cache, *cache.planned_flush())])
        elif op == "fence":
            cache.fence()
        on_disk = [(e, s) for e, s in _on_disk(cache) if s < log_end]
        assert on_disk == [(e, s) for e, s in cache.entries if s < log_end], (op, on_disk, cache.entries)


def test_a_follower_writes_a_new_epochs_entry_before_its_first_batch(tmp_path: Path) -> None:
    """KIP-101's order (Kafka's append too): were the batch written first, a crash between
    the two would leave it under the previous epoch's entry on disk."""
    from dmq.record.batch import iter_headers

    leader = make_log(tmp_path / "leader")
    append(leader, 2)
    leader.append_as_leader(*_batch(2), leader_epoch=3)
    data = leader.read(0, 10**9, leader.log_end_offset)
    assert data is not None
    raw = data.read()
    follower = make_log(tmp_path / "follower")
    seen: list[list[tuple[int, int]]] = []
    segment = follower.active_segment
    real = segment.append
    segment.append = lambda *a, **k: (seen.append(_on_disk(follower.leader_epochs)), real(*a, **k))[1]  # type: ignore[method-assign]
    follower.append_as_follower(raw)
    assert seen == [[(0, 0), (3, 2)]]
    # With the entries written first (on a worker thread: plan_follower_epochs), the
    # append finds nothing to write.
    again = make_log(tmp_path / "again")
    found = iter_headers(raw)
    plan = again.plan_follower_epochs(found)
    assert plan is not None and write_plans([(again.leader_epochs, *plan)]) == [True]
    writes = _Writes(again.leader_epochs)
    again.append_as_follower(raw, found)
    assert writes.done == [] and again.leader_epochs.entries == _on_disk(again.leader_epochs) == [(0, 0), (3, 2)]
    assert again.plan_follower_epochs(found) is None
