from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.config import BrokerConfig, LogConfig
from dmq.record.batch import validate_batches
from dmq.record.records import encode_batch
from dmq.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_FILE,
    CheckpointFile,
    LogManager,
    read_checkpoint,
)


def _append(lm: LogManager, topic: str, n: int) -> None:
    lg = lm.get(topic, 0)
    assert lg is not None
    data = bytearray(encode_batch([(None, b"v" * 100, [])] * n, timestamp=1))
    lg.append_as_leader(data, validate_batches(data, 10**6), 0)


def test_flush_ms_and_rolled_segments_move_recovery_points(tmp_path: Path) -> None:
    broker = BrokerConfig()
    overrides = {"timed": {"flush.ms": "1000"}, "rolling": {"segment.bytes": "1000"}, "lazy": {}}
    lm = LogManager(str(tmp_path), lambda t: LogConfig(broker, overrides[t]))
    lm.load_logs(lambda t, p: "id")
    for t in overrides:
        lm.get_or_create(t, 0, "id")
        _append(lm, t, 3)
    timed, lazy, rolling = lm.get("timed", 0), lm.get("lazy", 0), lm.get("rolling", 0)
    assert timed and lazy and rolling
    lm.flush_dirty(now=timed.last_flush_ms + 500)
    assert timed.recovery_point == 0  # not due yet
    lm.flush_dirty(now=timed.last_flush_ms + 1000)
    assert timed.recovery_point == 3
    assert lazy.recovery_point == 0  # default policy: the OS decides
    for _ in range(5):
        _append(lm, "rolling", 3)
    assert len(rolling.segments) > 1
    lm.flush_pending()  # the background thread's job: fsync rolled segments
    assert rolling.recovery_point == rolling.active_segment.base_offset
    lm.checkpoint()
    points = read_checkpoint(str(tmp_path / RECOVERY_POINT_FILE))
    assert points[("timed", 0)] == 3 and points[("lazy", 0)] == 0
    lm.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    points = read_checkpoint(str(tmp_path / RECOVERY_POINT_FILE))
    assert points[("lazy", 0)] == 3  # clean shutdown flushes everything
    again = LogManager(str(tmp_path), lambda t: LogConfig(broker, overrides[t]))
    assert again.clean_shutdown
    again.load_logs(lambda t, p: "id")
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert again.get("rolling", 0).log_end_offset == 18  # type: ignore[union-attr]


def test_unknown_partition_dirs_are_removed(tmp_path: Path) -> None:
    (tmp_path / "gone-0").mkdir()
    (tmp_path / "gone-0" / "00000000000000000000.log").write_bytes(b"")
    lm = LogManager(str(tmp_path), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, p: None)
    assert not lm.logs
    assert not (tmp_path / "gone-0").exists()


def test_idle_producer_state_expires(tmp_path: Path) -> None:
    import pytest

    from dmq.record.batch import InvalidRecordError

    lm = LogManager(str(tmp_path), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, p: "id")
    lg = lm.get_or_create("t", 0, "id")
    data = bytearray(encode_batch([(None, b"v", [])], timestamp=1000, producer_id=5, producer_epoch=0,
                                  base_sequence=0))
    lg.append_as_leader(data, validate_batches(data, 10**6), 0, timestamp=1000)
    assert lm.expire_producers(expiration_ms=60_000, now=30_000) == 0
    assert lm.expire_producers(expiration_ms=60_000, now=100_000) == 1
    assert 5 not in lg.producer_state.producers
    # Its state is gone: its next batch starts it again whatever its sequence (Kafka since
    # KIP-360), and from there the sequence is checked again.
    nxt = bytearray(encode_batch([(None, b"v", [])], producer_id=5, producer_epoch=0, base_sequence=1))
    lg.append_as_leader(nxt, validate_batches(nxt, 10**6), 0)
    gap = bytearray(encode_batch([(None, b"v", [])], producer_id=5, producer_epoch=0, base_sequence=9))
    with pytest.raises(InvalidRecordError):
        lg.append_as_leader(gap, validate_batches(gap, 10**6), 0)


def test_a_checkpoint_snapshot_written_late_does_not_replace_a_later_one(tmp_path: Path) -> None:
    """The loop takes a snapshot and a worker thread writes it; a write whose task was
    cancelled may still run after the shutdown wrote the final snapshot. It must not
    bring the file back to the older values."""
    f = CheckpointFile(str(tmp_path / "cp"))
    older = f.snapshot({("t", 0): 5})
    newer = f.snapshot({("t", 0): 9})
    assert older is not None and newer is not None
    f.write(newer)
    f.write(older)  # the late one
    assert read_checkpoint(f.path) == {("t", 0): 9}
    assert f.snapshot({("t", 0): 9}) is None  # the file says so already
    assert CheckpointFile(f.path).snapshot({("t", 0): 9}) is None  # also once reopened


@settings(max_examples=25, deadline=None)
@given(st.lists(st.dictionaries(st.tuples(st.sampled_from("ab"), st.integers(0, 3)), st.integers(0, 10**6),
                                max_size=4), min_size=1, max_size=8),
       st.randoms(use_true_random=False))
def test_checkpoint_writes_from_threads_in_any_order_leave_the_newest_snapshot(
        tmp_path_factory: pytest.TempPathFactory, states: list[dict[tuple[str, int], int]],
        rnd: random.Random) -> None:
    """Snapshots taken in order and written by threads in any order: the file ends with
    the newest state, in a form ``read_checkpoint`` accepts (also when a state goes back
    to what the file said while a different one is still being written)."""
    path = tmp_path_factory.mktemp("cp") / "cp"
    f = CheckpointFile(str(path))
    snapshots = [s for s in (f.snapshot(state) for state in states) if s is not None]
    rnd.shuffle(snapshots)
    threads = [threading.Thread(target=f.write, args=(s,)) for s in snapshots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert read_checkpoint(str(path)) == states[-1]


def test_a_crash_soon_after_a_fresh_start_is_an_unclean_shutdown(tmp_path: Path) -> None:
    """A new data directory gets its recovery-point file when its logs are loaded, so a
    crash before the first periodic checkpoint is recovered, not taken for a clean stop.
    (Without the file a start takes the directory for one that never held a log.)"""
    config = LogConfig(BrokerConfig())
    lm = LogManager(str(tmp_path), lambda t: config)
    lm.load_logs(lambda t, p: "id")
    assert (tmp_path / RECOVERY_POINT_FILE).exists()
    lm.get_or_create("t", 0, "id")
    _append(lm, "t", 3)
    # killed here: no shutdown(), no later checkpoint
    again = LogManager(str(tmp_path), lambda t: config)
    assert not again.clean_shutdown


def test_a_checkpoint_write_that_failed_is_taken_again(tmp_path: Path) -> None:
    """A write that raised (a full disk) leaves the next snapshot of the same entries to
    be taken and written, not skipped as already written."""
    (tmp_path / "dir").mkdir()
    f = CheckpointFile(str(tmp_path / "dir" / "cp"))
    first = f.snapshot({("t", 0): 5})
    assert first is not None
    (tmp_path / "dir").rename(tmp_path / "gone")  # the write cannot create its file
    with pytest.raises(OSError):
        f.write(first)
    (tmp_path / "gone").rename(tmp_path / "dir")
    again = f.snapshot({("t", 0): 5})
    assert again is not None
    f.write(again)
    assert read_checkpoint(f.path) == {("t", 0): 5}
    assert f.snapshot({("t", 0): 5}) is None


def test_a_recreated_partition_does_not_take_the_checkpoints_of_the_deleted_one(tmp_path: Path) -> None:
    """A partition deleted and created again (a topic deleted and created with the same
    name, a replica moved away and back) starts from offset 0. A crash before the next
    periodic checkpoint must not give the new log the old one's log start offset (which
    would hide its acknowledged records) or recovery point: deleting a log writes the
    checkpoints without it, as Kafka does."""
    config = LogConfig(BrokerConfig())
    lm = LogManager(str(tmp_path), lambda t: config)
    lm.load_logs(lambda t, p: "old")
    old = lm.get_or_create("t", 0, "old")
    _append(lm, "t", 10)
    old.flush()
    old.delete_records_before(8)
    lm.checkpoint()  # the periodic checkpoint: t-0 starts at 8, recovered to 10
    lm.delete("t", 0)
    lm.get_or_create("t", 0, "new")
    _append(lm, "t", 3)
    # killed here: no shutdown(), no later periodic checkpoint
    again = LogManager(str(tmp_path), lambda t: config)
    again.load_logs(lambda t, p: "new")
    lg = again.get("t", 0)
    assert lg is not None
    assert (lg.log_start_offset, lg.log_end_offset) == (0, 3)
    assert lg.recovery_point == 0


def test_a_log_of_an_earlier_topic_of_the_same_name_is_removed_at_start(tmp_path: Path) -> None:
    """A topic deleted and created again while this broker was down: the directory left
    behind holds the earlier topic's records (its partition.metadata says so) and is
    removed, not taken for the new topic's log."""
    config = LogConfig(BrokerConfig())
    lm = LogManager(str(tmp_path), lambda t: config)
    lm.load_logs(lambda t, p: "old")
    lm.get_or_create("t", 0, "old")
    _append(lm, "t", 5)
    lm.shutdown()
    again = LogManager(str(tmp_path), lambda t: config)
    again.load_logs(lambda t, p: "new")
    assert again.get("t", 0) is None
    assert not (tmp_path / "t-0").exists()
    assert read_checkpoint(str(tmp_path / RECOVERY_POINT_FILE)) == {}
    lg = again.get_or_create("t", 0, "new")
    assert lg.log_end_offset == 0


def test_a_shutdown_whose_flush_failed_is_not_marked_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The clean-shutdown marker tells the next start to skip recovery: not after a flush
    failed (a full or failing disk), when the log may not be on disk as it says."""
    config = LogConfig(BrokerConfig())
    lm = LogManager(str(tmp_path), lambda t: config)
    lm.load_logs(lambda t, p: "id")
    lg = lm.get_or_create("t", 0, "id")
    _append(lm, "t", 3)

    def failing_fsync() -> None:
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(lg.active_segment, "flush", failing_fsync)
    lm.shutdown()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert not LogManager(str(tmp_path), lambda t: config).clean_shutdown


def test_a_queued_flush_of_a_rolled_segment_does_not_pass_a_truncation_made_before_it_ran(
        tmp_path: Path) -> None:
    """A roll queues its segment's flush for the background thread; a follower's
    truncation before that thread runs must count as one during the flush, or the recovery
    point ends above the log end, over bytes written again and never fsynced."""
    lm = LogManager(str(tmp_path), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, p: "id")
    lg = lm.get_or_create("t", 0, "id")
    for _ in range(2):
        data = bytearray(encode_batch([(None, b"v", [])] * 10, timestamp=1000))
        lg.append_as_leader(data, validate_batches(data, 10**6), 0, timestamp=1000)
    lg.roll()  # queues the flush up to 20
    lg.truncate_to(5)
    lm.flush_pending()
    assert lg.log_end_offset == 5
    assert lg.recovery_point <= 5


def test_a_directory_with_logs_but_no_recovery_checkpoint_is_recovered(tmp_path: Path) -> None:
    """Only the clean-shutdown marker says a shutdown was clean (Kafka's loadLogs). A
    directory holding segments but no recovery-point file (deleted by an operator, or
    copied without it) was taken as cleanly stopped: a torn last batch was served and
    the next append went after it."""
    config = LogConfig(BrokerConfig())
    lm = LogManager(str(tmp_path), lambda t: config)
    lm.load_logs(lambda t, p: "id")
    lm.get_or_create("t", 0, "id")
    for _ in range(5):
        _append(lm, "t", 2)
    lg = lm.get("t", 0)
    assert lg is not None
    segment = Path(lg.active_segment.log_path)
    torn = segment.stat().st_size - 100  # the last batch reached the disk in part
    (tmp_path / RECOVERY_POINT_FILE).unlink()
    os.truncate(segment, torn)
    again = LogManager(str(tmp_path), lambda t: config)
    assert not again.clean_shutdown
    again.load_logs(lambda t, p: "id")
    lg = again.get("t", 0)
    assert lg is not None and lg.log_end_offset == 8
    assert LogManager(str(tmp_path / "new"), lambda t: config).clean_shutdown  # a new directory
