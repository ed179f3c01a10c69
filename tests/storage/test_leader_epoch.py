from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_log import append, make_log, read_offsets

from dmq.record.batch import InvalidRecordError
from dmq.storage.leader_epoch import UNDEFINED, LeaderEpochFileCache


def brute_end_offset(entries: list[tuple[int, int]], requested: int, leo: int) -> tuple[int, int]:
    """OffsetForLeaderEpoch by definition: the largest epoch <= requested, and where it ends;
    an epoch older than every entry (Kafka's endOffsetFor): itself, ending where the first
    entry starts."""
    older = [(e, s) for e, s in entries if e <= requested]
    if not older:
        return (requested, entries[0][1]) if entries and requested >= 0 else (UNDEFINED, UNDEFINED)
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


def test_a_follower_writes_a_new_epochs_entry_before_its_first_batch(tmp_path: Path) -> None:
    """KIP-101's order (Kafka's append too): with the batch written first, a crash between
    the two left it under the previous epoch's entry on disk. The entries of an answer
    bringing several epochs are written once."""
    leader = make_log(tmp_path / "leader")
    append(leader, 2)
    leader.append_as_leader(*_batch(2), leader_epoch=3)
    leader.append_as_leader(*_batch(1), leader_epoch=5)
    data = leader.read(0, 10**9, leader.log_end_offset)
    assert data is not None
    follower = make_log(tmp_path / "follower")
    cache = follower.leader_epochs
    seen: list[list[tuple[int, int]]] = []
    writes: list[list[tuple[int, int]]] = []
    segment, real_append, real_write = follower.active_segment, follower.active_segment.append, cache._write

    def append_seeing_the_file(*args: object, **kwargs: object) -> None:
        seen.append(LeaderEpochFileCache(str(tmp_path / "follower")).entries)
        real_append(*args, **kwargs)  # type: ignore[arg-type]

    def write_counted() -> None:
        writes.append(list(cache.entries))
        real_write()

    segment.append = append_seeing_the_file  # type: ignore[method-assign]
    cache._write = write_counted  # type: ignore[method-assign]
    follower.append_as_follower(data.read())
    assert seen == [[(0, 0), (3, 2), (5, 4)]]
    assert writes == [[(0, 0), (3, 2), (5, 4)]]


def test_recovery_puts_back_the_epochs_of_the_batches_it_reads_again(tmp_path: Path) -> None:
    """Kafka's LogSegment.recover. A follower's truncation cuts the log file without an
    fsync but writes the shorter epoch file with one: power lost in between brings the
    batches back without their epoch's entry. An unclean start reads them again anyway."""
    from dmq.config import BrokerConfig, LogConfig
    from dmq.storage.log import Log

    log = make_log(tmp_path)
    append(log, 2)
    log.append_as_leader(*_batch(2), leader_epoch=3)
    log.close()
    cache = LeaderEpochFileCache(str(tmp_path))
    cache.truncate_from_end(2)  # the file as the truncation left it
    assert LeaderEpochFileCache(str(tmp_path)).entries == [(0, 0)]
    assert make_log(tmp_path).leader_epochs.entries == [(0, 0)]  # a clean start trusts the file
    unclean = Log(str(tmp_path), "t", 0, LogConfig(BrokerConfig(), {}), recovery_point=0)
    assert unclean.leader_epochs.entries == [(0, 0), (3, 2)]
    assert unclean.leader_epochs.epoch_for(3) == 3
    unclean.close()
    assert LeaderEpochFileCache(str(tmp_path)).entries == [(0, 0), (3, 2)]


def test_an_epoch_older_than_the_cache_ends_where_the_first_entry_starts(tmp_path: Path) -> None:
    """A new empty partition led in epoch 0, re-elected in epoch 1 before any write: the
    cache holds (1, 0) only. A consumer at offset 0 of epoch 0 validates its position after
    the leader change: (-1, -1) made it reset (Kafka answers (0, 0))."""
    cache = LeaderEpochFileCache(str(tmp_path))
    cache.assign(1, 0)
    assert cache.end_offset_for(0, 0) == (0, 0)
    cache.assign(3, 1000)
    assert cache.end_offset_for(2, 1200) == (1, 1000)
    (tmp_path / "r").mkdir()
    reassigned = LeaderEpochFileCache(str(tmp_path / "r"))
    reassigned.assign(3, 1000)  # a replica whose log starts at 1000 in epoch 3
    assert reassigned.end_offset_for(2, 1200) == (2, 1000)
