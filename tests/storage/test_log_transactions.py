"""Transactions in the Log: LSO, the aborted-transaction index, markers as leader and follower,
truncation, deletion and recovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dmq.record.batch import InvalidRecordError
from dmq.storage.log import Log
from dmq.storage.producer_state import AppendOrigin
from tests.support.transactions import (
    append,
    data_batch,
    end_txn,
    make_log,
    marker_batch,
    raw_batches,
    read_committed,
    send,
)


@pytest.fixture(autouse=True)
def _log_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Log's clock at these tests' record timestamps (1970, a few seconds in): a
    producer a reload takes from a snapshot expires producer.id.expiration.ms after its
    last batch (as in Kafka), so at today's time every one of them would be gone."""
    monkeypatch.setattr("dmq.storage.log.now_ms", lambda: 10_000)


def txn_files(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".txnindex"))


def test_open_transaction_holds_the_lso_until_its_marker_is_replicated(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0")
    log.update_high_watermark(0)
    send(log, 9, 0, 0, [b"a"], transactional=False)          # 0
    assert send(log, 1, 0, 0, [b"t1", b"t2"]) == 1            # 1-2, open
    send(log, 9, 0, 1, [b"b"], transactional=False)          # 3
    assert log.update_high_watermark(100) == 4                # clamped to the log end
    assert log.first_unstable_offset() == 1 and log.last_stable_offset() == 1
    assert read_committed(log) == [(0, b"a")]
    assert end_txn(log, 1, 0, commit=True) == 4
    # Committed, but the marker is not below the high watermark yet.
    assert log.last_stable_offset() == 1
    log.update_high_watermark(4)
    assert log.last_stable_offset() == 1
    log.update_high_watermark(5)
    assert log.first_unstable_offset() is None and log.last_stable_offset() == 5
    assert read_committed(log) == [(0, b"a"), (1, b"t1"), (2, b"t2"), (3, b"b")]


def test_lso_is_the_high_watermark_without_transactions_and_the_log_end_until_told(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0")
    send(log, 9, 0, 0, [b"a", b"b"], transactional=False)
    assert log.high_watermark == log.last_stable_offset() == 2  # not told: everything replicated
    send(log, 1, 0, 0, [b"t"])
    end_txn(log, 1, 0, commit=False)
    assert log.last_stable_offset() == 4 and log.first_unstable_offset() is None
    log.update_high_watermark(1)
    assert log.last_stable_offset() == 1


def test_aborted_transactions_are_indexed_and_collected(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0")
    send(log, 1, 0, 0, [b"x1"])                               # 0
    send(log, 2, 0, 0, [b"y1"])                               # 1
    send(log, 1, 0, 1, [b"x2"])                               # 2
    assert end_txn(log, 1, 0, commit=False, coordinator_epoch=3) == 3
    send(log, 2, 0, 1, [b"y2"])                               # 4
    assert end_txn(log, 2, 0, commit=True) == 5
    send(log, 3, 0, 0, [b"z"])                                # 6
    assert end_txn(log, 3, 0, commit=False) == 7
    entries = log.active_segment.txn_index.entries
    # The LSO stored with pid 1's abort is pid 2's open transaction.
    assert [(e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in entries] \
        == [(1, 0, 3, 1), (3, 6, 7, 8)]
    assert txn_files(tmp_path / "t-0") == ["00000000000000000000.txnindex"]
    assert log.collect_aborted_transactions(0, 8) == [(1, 0), (3, 6)]
    assert log.collect_aborted_transactions(4, 6) == []
    assert log.collect_aborted_transactions(3, 4) == [(1, 0)]
    assert log.collect_aborted_transactions(6, 7) == [(3, 6)]
    assert read_committed(log) == [(1, b"y1"), (4, b"y2")]
    assert read_committed(log, max_bytes=1) == [(1, b"y1"), (4, b"y2")]  # one batch per fetch
    state = log.producer_state.producers[1]
    assert (state.coordinator_epoch, state.has_ongoing_txn) == (3, False)


def test_aborted_transaction_spanning_segments(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", **{"segment.bytes": "300"})
    send(log, 1, 0, 0, [b"a" * 100])
    for i in range(6):
        send(log, 2, 0, i, [b"b" * 100], transactional=False)
    end_txn(log, 1, 0, commit=False)
    assert len(log.segments) > 3
    marker_segment = log.segments[-1]
    assert [e.first_offset for e in marker_segment.txn_index.entries] == [0]
    assert all(len(s.txn_index) == 0 for s in log.segments[:-1])
    # A read starting in an earlier segment finds the entry in a later one.
    assert log.collect_aborted_transactions(0, 3) == [(1, 0)]
    assert [o for o, _ in read_committed(log, max_bytes=1)] == [1, 2, 3, 4, 5, 6]


def test_leader_refusals_leave_the_log_unchanged(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0")
    send(log, 1, 2, 0, [b"a"])
    end_txn(log, 1, 2, commit=True, coordinator_epoch=4)
    send(log, 1, 2, 1, [b"b"])
    before = (log.log_end_offset, log.size_in_bytes, len(log.segments))

    def error(data: bytearray, origin: AppendOrigin = AppendOrigin.CLIENT) -> str:
        with pytest.raises(InvalidRecordError) as e:
            append(log, data, origin)
        return e.value.error

    assert error(marker_batch(1, 2, commit=True)) == "invalid_record"  # clients write no markers
    assert error(data_batch(1, 1, 2, [b"zombie"])) == "invalid_producer_epoch"
    assert error(marker_batch(1, 1, commit=False, coordinator_epoch=4), AppendOrigin.COORDINATOR) \
        == "invalid_producer_epoch"
    assert error(marker_batch(1, 2, commit=False, coordinator_epoch=3), AppendOrigin.COORDINATOR) \
        == "transaction_coordinator_fenced"
    assert error(data_batch(1, 2, 2, [b"plain"], transactional=False)) == "invalid_txn_state"
    assert (log.log_end_offset, log.size_in_bytes, len(log.segments)) == before
    assert log.producer_state.producers[1].current_txn_first_offset == 2
    with pytest.raises(InvalidRecordError):
        log.append_end_txn_marker(1, 1, 4, True, 0)
    assert end_txn(log, 1, 2, commit=False, coordinator_epoch=4) == before[0]


def test_duplicate_transactional_batch_is_answered_with_its_offsets(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0")
    send(log, 1, 0, 0, [b"a", b"b"])
    result = append(log, data_batch(1, 0, 0, [b"a", b"b"]))
    assert result.duplicate and (result.first_offset, result.last_offset) == (0, 1)
    assert log.log_end_offset == 2


def test_follower_builds_the_same_state_from_fetched_batches(tmp_path: Path) -> None:
    leader = make_log(tmp_path / "l" / "t-0", **{"segment.bytes": "400"})
    follower = make_log(tmp_path / "f" / "t-0", **{"segment.bytes": "400"})
    send(leader, 1, 0, 0, [b"a" * 50])
    send(leader, 2, 0, 0, [b"b" * 50])
    end_txn(leader, 1, 0, commit=False, coordinator_epoch=2)
    send(leader, 3, 0, 0, [b"c" * 50])
    send(leader, 2, 0, 1, [b"d" * 50])
    end_txn(leader, 2, 0, commit=True, coordinator_epoch=2)
    send(leader, 4, 0, 0, [b"e" * 50])
    end_txn(leader, 4, 0, commit=False, coordinator_epoch=2)
    batches = raw_batches(leader)
    follower.append_as_follower(b"".join(batches[:4]))   # fetches split anywhere
    follower.append_as_follower(b"".join(batches[4:]))
    for log in (leader, follower):
        log.update_high_watermark(log.log_end_offset)
    assert follower.log_end_offset == leader.log_end_offset
    assert follower.collect_aborted_transactions(0, 100) == leader.collect_aborted_transactions(0, 100) \
        == [(1, 0), (4, 6)]
    assert follower.first_unstable_offset() == leader.first_unstable_offset() == 3
    assert follower.producer_state.producers == leader.producer_state.producers
    assert [s.txn_index.entries for s in follower.segments if len(s.txn_index)] \
        == [s.txn_index.entries for s in leader.segments if len(s.txn_index)]
    assert read_committed(follower) == read_committed(leader)


def test_truncation_reopens_a_transaction_and_drops_its_index_entry(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0")
    send(log, 1, 0, 0, [b"a"])                                 # 0
    log.flush()                                                # a snapshot at 1, txn open
    send(log, 2, 0, 0, [b"b"], transactional=False)            # 1
    end_txn(log, 1, 0, commit=False)                           # 2
    log.flush()
    send(log, 1, 0, 1, [b"c"])                                 # 3, a new transaction
    log.update_high_watermark(2)
    assert log.collect_aborted_transactions(0, 10) == [(1, 0)]
    log.truncate_to(2)                                         # the abort marker goes
    assert log.log_end_offset == 2 and log.high_watermark == 2
    assert log.collect_aborted_transactions(0, 10) == []
    assert txn_files(tmp_path / "t-0") == []
    assert log.producer_state.producers[1].current_txn_first_offset == 0
    assert log.first_unstable_offset() == 0 and log.last_stable_offset() == 0
    # The coordinator writes the marker again.
    end_txn(log, 1, 0, commit=False)
    log.update_high_watermark(3)
    assert log.collect_aborted_transactions(0, 10) == [(1, 0)] and log.last_stable_offset() == 3


def test_truncation_keeps_unreplicated_completions_below_it(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0")
    log.update_high_watermark(0)
    send(log, 1, 0, 0, [b"a"])                                 # 0
    end_txn(log, 1, 0, commit=True)                            # 1
    log.flush()                                                # the snapshot at 2 has no open txn
    send(log, 2, 0, 0, [b"b"], transactional=False)            # 2
    assert log.last_stable_offset() == 0
    log.truncate_to(2)
    # The marker at 1 is above the high watermark (0): the transaction is still unstable.
    assert log.first_unstable_offset() == 0


def test_truncate_fully_forgets_transactions(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0")
    log.update_high_watermark(0)
    send(log, 1, 0, 0, [b"a"])
    end_txn(log, 1, 0, commit=False)
    send(log, 2, 0, 0, [b"b"])
    log.truncate_fully_and_start_at(50)
    assert log.producer_state.producers == {} and log.first_unstable_offset() is None
    assert log.collect_aborted_transactions(0, 100) == [] and txn_files(tmp_path / "t-0") == []
    assert log.high_watermark == log.last_stable_offset() == 50


def test_deleted_segments_take_their_transaction_index(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", **{"segment.bytes": "200", "retention.bytes": "0"})
    send(log, 1, 0, 0, [b"a" * 100])
    end_txn(log, 1, 0, commit=False)
    for i in range(3):
        send(log, 2, 0, i, [b"b" * 100], transactional=False)
    assert txn_files(tmp_path / "t-0")
    log.update_high_watermark(log.log_end_offset)
    log.delete_old_segments(now=2000)
    assert txn_files(tmp_path / "t-0") == []
    assert log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset) == []


def test_log_start_offset_bounds_the_first_unstable_offset(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0")
    send(log, 1, 0, 0, [b"a"])
    send(log, 2, 0, 0, [b"b"], transactional=False)
    log.update_high_watermark(2)
    log.delete_records_before(1)
    assert log.first_unstable_offset() == 1 and log.last_stable_offset() == 1


def test_reopen_keeps_open_transactions_and_the_index(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = make_log(path, **{"segment.bytes": "300"})
    send(log, 1, 0, 0, [b"a" * 100])
    send(log, 2, 0, 0, [b"b" * 100])
    end_txn(log, 2, 0, commit=False, coordinator_epoch=5)
    send(log, 3, 0, 0, [b"c" * 100], transactional=False)
    log.flush()
    log.close()
    again = make_log(path, **{"segment.bytes": "300"})
    assert again.producer_state.producers[1].current_txn_first_offset == 0
    assert again.producer_state.producers[2].coordinator_epoch == 5
    assert again.collect_aborted_transactions(0, 100) == [(2, 1)]
    assert again.first_unstable_offset() == 0
    end_txn(again, 1, 0, commit=True)
    assert again.first_unstable_offset() is None


def test_crash_rebuilds_indexes_and_state_of_unflushed_segments(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    cfg = {"segment.bytes": "300"}
    log = make_log(path, **cfg)
    send(log, 1, 0, 0, [b"a" * 100])                           # 0, open
    send(log, 2, 0, 0, [b"b" * 100])                           # 1
    end_txn(log, 2, 0, commit=False)                           # 2
    log.flush()
    recovery_point = log.recovery_point
    send(log, 3, 0, 0, [b"c" * 100])                           # unflushed from here
    send(log, 4, 0, 0, [b"d" * 100], transactional=False)
    end_txn(log, 3, 0, commit=False)
    send(log, 1, 0, 1, [b"e" * 100])
    end_txn(log, 1, 0, commit=False)
    expected = log.collect_aborted_transactions(0, 100)
    entries = [s.txn_index.entries for s in log.segments]
    state = log.producer_state.producers
    log.close()
    # The crash loses the unflushed transaction indexes and the snapshots after the recovery point.
    for name in os.listdir(path):
        if name.endswith(".txnindex") and int(name[:20]) >= recovery_point:
            os.unlink(path / name)
    again = make_log(path, clean_shutdown=False, recovery_point=recovery_point, **cfg)
    assert again.collect_aborted_transactions(0, 100) == expected == [(2, 1), (3, 3), (1, 0)]
    assert [s.txn_index.entries for s in again.segments] == entries
    assert again.producer_state.producers == state
    assert again.first_unstable_offset() is None


def test_torn_marker_reopens_its_transaction(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = make_log(path)
    send(log, 1, 0, 0, [b"a"])
    log.flush()
    end_txn(log, 1, 0, commit=False)
    size = log.active_segment.size
    log.close()
    with open(path / "00000000000000000000.log", "r+b") as f:
        f.truncate(size - 5)                                   # the marker is torn
    again = make_log(path, clean_shutdown=False, recovery_point=1)
    assert again.log_end_offset == 1
    assert again.producer_state.producers[1].current_txn_first_offset == 0
    assert again.collect_aborted_transactions(0, 10) == [] and txn_files(path) == []


def test_corrupt_index_of_a_flushed_segment_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    cfg = {"segment.bytes": "300"}
    log = make_log(path, **cfg)
    send(log, 1, 0, 0, [b"a" * 100])
    send(log, 2, 0, 0, [b"b" * 100], transactional=False)
    end_txn(log, 1, 0, commit=False)
    send(log, 2, 0, 1, [b"c" * 100], transactional=False)
    send(log, 2, 0, 2, [b"c" * 100], transactional=False)
    log.flush()
    expected = log.collect_aborted_transactions(0, 100)
    index_name = txn_files(path)[0]
    log.close()
    (path / index_name).write_bytes(b"\x00" * 7)
    again = make_log(path, **cfg)                              # a clean shutdown, but a corrupt index
    assert again.collect_aborted_transactions(0, 100) == expected == [(1, 0)]
    assert (path / index_name).stat().st_size == 34


def test_producer_state_of_deleted_segments_survives_an_unclean_restart(tmp_path: Path) -> None:
    """An unclean restart rebuilds the producer state from the base of the segment holding
    the recovery point; a snapshot taken at that base is kept while the segment exists (as
    Kafka keeps one per segment). Only the two newest were kept: after two flushes in the
    last segment, the restart found none at or below that base and replayed the remaining
    segments from an empty state, forgetting the producers whose batches retention or
    DeleteRecords had removed (their retries were no longer recognised, their open
    transactions no longer held the last stable offset)."""
    lg = make_log(tmp_path)
    for seq in range(5):  # segment at 0: producer 3's transaction, producer 10's batch
        send(lg, 3, 0, seq, [b"t%d" % seq])
    send(lg, 10, 0, 0, [b"i0", b"i1"], transactional=False)
    lg.roll()
    send(lg, 20, 0, 0, [b"other"], transactional=False)
    lg.roll()
    send(lg, 20, 0, 1, [b"other"], transactional=False)
    lg.flush()
    send(lg, 20, 0, 2, [b"other"], transactional=False)
    lg.flush()
    lg.update_high_watermark(lg.log_end_offset)
    lg.delete_records_before(lg.bases[1])  # the first segment goes
    assert lg.bases == [7, 8]
    before = {pid: (e.epoch, e.last_seq, e.current_txn_first_offset)
              for pid, e in lg.producer_state.producers.items()}
    assert before[3] == (0, 4, 0) and before[10] == (0, 1, -1)
    recovery_point, log_start = lg.recovery_point, lg.log_start_offset
    lg.close()  # a kill: no clean-shutdown marker
    again = Log(str(tmp_path), "t", 0, lg.config, recovery_point=recovery_point,
                log_start_offset=log_start, clean_shutdown=False)
    after = {pid: (e.epoch, e.last_seq, e.current_txn_first_offset)
             for pid, e in again.producer_state.producers.items()}
    assert after == before
    # A retry of producer 10's batch is still a duplicate, answered with its offset.
    retry = append(again, data_batch(10, 0, 0, [b"i0", b"i1"], transactional=False))
    assert retry.duplicate and retry.first_offset == 5


def test_duplicate_on_a_log_append_time_topic_is_answered_with_the_original_append_time(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", **{"message.timestamp.type": "LogAppendTime"})
    batch = data_batch(7, 0, 0, [b"a", b"b"], transactional=False)
    first = append(log, bytearray(batch), ts=5000)
    assert first.log_append_time == 5000
    retry = append(log, bytearray(batch), ts=9000)
    assert retry.duplicate and (retry.first_offset, retry.last_offset, retry.log_append_time) == (0, 1, 5000)
    # The producer snapshot keeps each batch's timestamp: still answered after a restart,
    # which loads the state from the snapshot a flush took (no batch after it to replay).
    log.flush()
    log.close()
    log = make_log(tmp_path / "t-0", **{"message.timestamp.type": "LogAppendTime"})
    assert log.producer_state.snapshot_offsets()[-1] == log.log_end_offset == 2
    retry = append(log, bytearray(batch), ts=9500)
    assert retry.duplicate and retry.log_append_time == 5000 and log.log_end_offset == 2


def test_duplicate_on_a_create_time_topic_is_answered_without_an_append_time(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0")
    batch = data_batch(7, 0, 0, [b"a"], transactional=False, ts=4000)
    assert append(log, bytearray(batch), ts=5000).log_append_time == -1
    retry = append(log, bytearray(batch), ts=9000)
    assert retry.duplicate and retry.log_append_time == -1


def test_a_reload_leaves_out_producers_expired_since_their_snapshot(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    log = make_log(tmp_path / "t-0")
    send(log, 1, 0, 0, [b"a"], transactional=False, ts=1000)
    send(log, 2, 0, 0, [b"b"], ts=1000)  # its transaction stays open
    log.flush()
    log.close()
    monkeypatch.setattr("dmq.storage.log.now_ms", lambda: 1000 + 86_400_000)  # producer.id.expiration.ms later
    log = make_log(tmp_path / "t-0")
    assert sorted(log.producer_state.producers) == [2]
