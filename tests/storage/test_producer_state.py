from __future__ import annotations

import json
from pathlib import Path

import pytest
from crc32c import crc32c

from dmq.record.batch import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader, InvalidRecordError
from dmq.record.control import ControlRecordType, EndTxnMarker
from dmq.storage.producer_state import (
    AppendOrigin,
    CompletedTxn,
    ProducerStateManager,
    TxnMetadata,
    VerificationGuard,
)

CLIENT, COORDINATOR, REPLICATION = AppendOrigin.CLIENT, AppendOrigin.COORDINATOR, AppendOrigin.REPLICATION

def abort(coordinator_epoch: int = 0) -> EndTxnMarker:
    return EndTxnMarker(ControlRecordType.ABORT, coordinator_epoch)


def commit(coordinator_epoch: int = 0) -> EndTxnMarker:
    return EndTxnMarker(ControlRecordType.COMMIT, coordinator_epoch)


def header(offset: int, pid: int, epoch: int = 0, seq: int = 0, n: int = 1, *, txn: bool = True,
           control: bool = False, ts: int = 1000) -> BatchHeader:
    attributes = (TRANSACTIONAL_MASK if txn or control else 0) | (CONTROL_MASK if control else 0)
    return BatchHeader(offset, 49, 0, 2, 0, attributes, n - 1, ts, ts, pid, epoch,
                       -1 if control else seq, n)


def run(psm: ProducerStateManager, batches: list[tuple[BatchHeader, EndTxnMarker | None]],
        origin: AppendOrigin = CLIENT, **guard: VerificationGuard | None) -> list[CompletedTxn]:
    """Append as the Log does: prepare, then apply (which completes the finished transactions)."""
    return [txn for txn, _lso in psm.apply(psm.prepare(batches, origin, **guard))]


def error_of(psm: ProducerStateManager, batches: list[tuple[BatchHeader, EndTxnMarker | None]],
             origin: AppendOrigin = CLIENT, **guard: VerificationGuard | None) -> str:
    with pytest.raises(InvalidRecordError) as e:
        psm.prepare(batches, origin, **guard)
    return e.value.error


def test_transaction_starts_at_first_batch_and_marker_completes_it(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(10, 7, n=3), None)])
    assert psm.producers[7].current_txn_first_offset == 10
    run(psm, [(header(13, 7, seq=3), None)])
    assert psm.producers[7].current_txn_first_offset == 10  # still the same transaction
    assert psm.first_undecided_offset() == psm.first_unstable_offset() == 10
    assert psm.ongoing_transactions() == [TxnMetadata(7, 10)]
    done = run(psm, [(header(14, 7, control=True), abort(3))], COORDINATOR)
    assert done == [CompletedTxn(7, 10, 14, True)]
    entry = psm.producers[7]
    assert (entry.current_txn_first_offset, entry.coordinator_epoch) == (-1, 3)
    # Complete but its marker is not below the high watermark yet: still unstable.
    assert psm.first_undecided_offset() is None and psm.first_unstable_offset() == 10
    psm.on_high_watermark_updated(14)
    assert psm.first_unstable_offset() == 10
    psm.on_high_watermark_updated(15)
    assert psm.first_unstable_offset() is None


def test_marker_without_ongoing_transaction_completes_nothing(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    assert run(psm, [(header(0, 5, epoch=2, control=True), commit(1))], COORDINATOR) == []
    entry = psm.producers[5]
    assert (entry.epoch, entry.coordinator_epoch, entry.has_ongoing_txn) == (2, 1, False)
    # An empty control batch (cleaned) changes nothing.
    assert run(psm, [(header(1, 5, epoch=3, control=True), None)], REPLICATION) == []
    assert psm.producers[5].epoch == 2


def test_last_stable_offset_of_a_completed_transaction(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(0, 1), None), (header(1, 2), None), (header(2, 3), None)])

    def end(offset: int, pid: int) -> list[tuple[CompletedTxn, int]]:
        return psm.apply(psm.prepare([(header(offset, pid, control=True), abort())], COORDINATOR))

    # The earliest ongoing transaction of another producer, else the offset after the marker.
    assert end(3, 2) == [(CompletedTxn(2, 1, 3, True), 0)]
    assert end(4, 1) == [(CompletedTxn(1, 0, 4, True), 2)]
    assert end(5, 3) == [(CompletedTxn(3, 2, 5, True), 6)]
    with pytest.raises(ValueError):
        psm.complete_txn(CompletedTxn(9, 99, 100, True))


def test_last_stable_offsets_follow_batch_order_within_one_append(tmp_path: Path) -> None:
    # A follower's fetch: two transactions of pid 1, then one of pid 2. At each marker only
    # what started before it is open (Kafka would store 6 for the first abort).
    psm = ProducerStateManager(str(tmp_path))
    done = psm.apply(psm.prepare([
        (header(0, 1, n=2), None), (header(2, 1, control=True), abort()),
        (header(3, 1, seq=2, n=2), None), (header(5, 1, control=True), abort()),
        (header(6, 2, n=2), None), (header(8, 2, control=True), abort()),
    ], REPLICATION))
    assert [(t.first_offset, lso) for t, lso in done] == [(0, 3), (3, 6), (6, 9)]


def test_epoch_and_coordinator_fencing(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(0, 1, epoch=2), None)])
    # A zombie of an older epoch: transactional data or a marker.
    assert error_of(psm, [(header(1, 1, epoch=1), None)]) == "invalid_producer_epoch"
    assert error_of(psm, [(header(1, 1, epoch=1), None)], COORDINATOR) == "invalid_producer_epoch"
    assert error_of(psm, [(header(1, 1, epoch=1, control=True), commit())], COORDINATOR) \
        == "invalid_producer_epoch"
    run(psm, [(header(1, 1, epoch=2, control=True), commit(5))], COORDINATOR)
    assert error_of(psm, [(header(2, 1, epoch=2, control=True), abort(4))], COORDINATOR) \
        == "transaction_coordinator_fenced"
    run(psm, [(header(2, 1, epoch=2, control=True), abort(5))], COORDINATOR)  # same epoch is fine
    # Replication takes whatever the leader wrote.
    run(psm, [(header(3, 1, epoch=1, control=True), abort(1))], REPLICATION)
    assert (psm.producers[1].epoch, psm.producers[1].coordinator_epoch) == (1, 1)


def test_non_transactional_batch_during_transaction(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(0, 1), None)])
    assert error_of(psm, [(header(1, 1, seq=1, txn=False), None)]) == "invalid_txn_state"
    assert error_of(psm, [(header(1, 1, seq=1, txn=False), None)], COORDINATOR) == "invalid_txn_state"
    run(psm, [(header(1, 1, seq=1, txn=False), None)], REPLICATION)
    assert psm.producers[1].current_txn_first_offset == 0
    # After the marker the producer may write idempotently again.
    psm2 = ProducerStateManager(str(tmp_path))
    run(psm2, [(header(0, 1), None), (header(1, 1, control=True), commit())], REPLICATION)
    run(psm2, [(header(2, 1, seq=1, txn=False), None)])
    assert not psm2.producers[1].has_ongoing_txn


def test_a_refused_append_changes_nothing(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(0, 1), None)])
    before = psm.producers[1].copy()
    # The first batch is fine, the second is not: neither is applied.
    assert error_of(psm, [(header(1, 2), None), (header(2, 1, seq=1, txn=False), None)]) == "invalid_txn_state"
    assert 2 not in psm.producers and psm.producers[1] == before
    assert psm.ongoing_transactions() == [TxnMetadata(1, 0)]


def test_batches_of_one_append_are_checked_in_order(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    # Replication may carry a whole transaction and the next one in one fetch.
    done = run(psm, [(header(0, 1, n=2), None), (header(2, 1, seq=2), None),
                     (header(3, 1, control=True), abort()), (header(4, 1, seq=3), None)], REPLICATION)
    assert done == [CompletedTxn(1, 0, 3, True)]
    assert psm.producers[1].current_txn_first_offset == 4
    assert psm.first_unstable_offset() == 0
    # Sequences run on within one client append.
    run(psm, [(header(5, 9, n=2, txn=False), None), (header(7, 9, seq=2, txn=False), None)])
    assert psm.producers[9].last_seq == 2
    assert error_of(psm, [(header(8, 9, seq=4, txn=False), None)]) == "out_of_order_sequence_number"


def test_a_producer_the_partition_does_not_know_may_start_at_any_sequence(tmp_path: Path) -> None:
    """Its state went with the segments retention or DeleteRecords removed, or expired
    (producer.id.expiration.ms): its next batch carries sequence N > 0, which Kafka
    accepts (ProducerAppendInfo.checkSequence, no producer epoch). It was refused with
    OUT_OF_ORDER_SEQUENCE_NUMBER, which KafkaJS and transactional producers cannot get
    past; from there the sequence rules hold as for any producer."""
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(0, 1, seq=3, txn=False), None)])
    assert psm.producers[1].last_seq == 3
    assert error_of(psm, [(header(1, 1, seq=6, txn=False), None)]) == "out_of_order_sequence_number"
    run(psm, [(header(1, 1, seq=4, txn=False), None)])


def test_sequence_rules_are_kept(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    assert error_of(psm, [(header(0, 1, seq=-1, txn=False), None)]) == "invalid_record"
    run(psm, [(header(0, 1, n=2, txn=False), None)])
    assert psm.find_duplicate(header(0, 1, n=2, txn=False)) is not None
    assert psm.find_duplicate(header(0, 1, epoch=1, n=2, txn=False)) is None
    assert error_of(psm, [(header(2, 1, epoch=1, seq=5, txn=False), None)]) == "out_of_order_sequence_number"
    run(psm, [(header(2, 1, epoch=1, seq=0, txn=False), None)])
    # An abort marker of a bumped epoch starts the sequences over.
    run(psm, [(header(3, 1, epoch=1, seq=1), None), (header(4, 1, epoch=2, control=True), abort())],
        COORDINATOR)
    assert psm.producers[1].last_seq == -1
    assert error_of(psm, [(header(5, 1, epoch=2, seq=2), None)]) == "out_of_order_sequence_number"
    run(psm, [(header(5, 1, epoch=2, seq=0), None)])
    # Coordinator writes carry no sequence and are not checked for one.
    run(psm, [(header(6, 4, seq=-1), None)], COORDINATOR)
    assert psm.producers[4].current_txn_first_offset == 6


def test_expiry_keeps_open_transactions(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(0, 1, ts=0), None), (header(1, 2, ts=0, txn=False), None)])
    psm.remove_expired(now_ms=10_000, expiration_ms=1000)
    assert list(psm.producers) == [1]


def test_snapshot_round_trip_keeps_transactions(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(0, 1, epoch=3, n=2), None), (header(2, 2, txn=False), None),
              (header(3, 3), None), (header(4, 3, control=True), commit(7))], REPLICATION)
    psm.take_snapshot(5)
    loaded = ProducerStateManager(str(tmp_path))
    assert loaded.load_latest_snapshot(10) == 5
    assert loaded.producers == psm.producers
    assert loaded.ongoing_transactions() == [TxnMetadata(1, 0)]
    assert loaded.producers[3].coordinator_epoch == 7
    # Completed transactions are taken as replicated after a load (as Kafka).
    assert loaded.first_unstable_offset() == 0 and loaded.unreplicated_transactions() == []


def test_version_1_snapshots_are_still_read(tmp_path: Path) -> None:
    body = json.dumps([[7, 2, 1234, [[0, 4, 10, 14]]]], separators=(",", ":")).encode()
    path = tmp_path / f"{20:020d}.snapshot"
    path.write_bytes(json.dumps({"version": 1, "crc": crc32c(body)}).encode() + b"\n" + body)
    psm = ProducerStateManager(str(tmp_path))
    assert psm.load_latest_snapshot(100) == 20
    entry = psm.producers[7]
    assert (entry.epoch, entry.last_seq, entry.last_data_offset, entry.coordinator_epoch,
            entry.has_ongoing_txn) == (2, 4, 14, -1, False)
    # Rewritten as the current version.
    psm.take_snapshot(30)
    assert json.loads((tmp_path / f"{30:020d}.snapshot").read_bytes().partition(b"\n")[0])["version"] == 3


def test_corrupt_snapshot_falls_back_to_an_older_one(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(0, 1), None)], REPLICATION)
    psm.take_snapshot(1)
    run(psm, [(header(1, 2), None)], REPLICATION)
    psm.take_snapshot(2)
    (tmp_path / f"{2:020d}.snapshot").write_bytes(b'{"version": 2, "crc": 1}\n[]')
    loaded = ProducerStateManager(str(tmp_path))
    assert loaded.load_latest_snapshot(10) == 1
    assert list(loaded.producers) == [1] and loaded.snapshot_offsets() == [1]


def test_last_records_for_the_cleaner(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(0, 1, n=3), None), (header(3, 2, epoch=4, control=True), abort())], REPLICATION)
    records = psm.last_records()
    assert records[1] == (2, 0) and records[2] == (-1, 4)


def test_a_batch_that_starts_a_transaction_needs_its_verification(tmp_path: Path) -> None:
    """KIP-890: the first transactional batch of a producer on a partition is appended only
    with the guard of a verification made for it; later batches of the open transaction
    need none, and the guard goes once the transaction has started."""
    psm = ProducerStateManager(str(tmp_path))
    assert error_of(psm, [(header(0, 1), None)], guard=None) == "invalid_txn_state"
    assert error_of(psm, [(header(0, 1), None)], guard=VerificationGuard()) == "invalid_txn_state"
    guard = psm.maybe_start_verification(1, 0, 0, now_ms=0)
    assert guard is not None and psm.maybe_start_verification(1, 0, 0, now_ms=0) is guard
    run(psm, [(header(0, 1), None)], guard=guard)
    assert psm.producers[1].has_ongoing_txn and psm.verification_guard(1) is None
    assert psm.maybe_start_verification(1, 1, 0, now_ms=0) is None  # ongoing: nothing to verify
    run(psm, [(header(1, 1, seq=1), None)], guard=None)
    # Idempotent batches are not verified; a coordinator's append is when it asks to be
    # (the group coordinator's transactional offsets).
    run(psm, [(header(2, 2, txn=False), None)], guard=None)
    assert error_of(psm, [(header(3, 3, seq=-1), None)], COORDINATOR, guard=None) == "invalid_txn_state"
    offsets = psm.maybe_start_verification(3, -1, 0, now_ms=0)
    run(psm, [(header(3, 3, seq=-1), None)], COORDINATOR, guard=offsets)
    run(psm, [(header(4, 4), None)], COORDINATOR)  # markers and tools: not checked


def test_a_marker_voids_a_verification_made_before_it(tmp_path: Path) -> None:
    """The ABA race: verified while the transaction was open, the batch waits; the
    coordinator aborts and the marker lands; the late batch must not open a transaction
    nobody will end. The marker drops the guard, so the batch no longer matches."""
    psm = ProducerStateManager(str(tmp_path))
    first = psm.maybe_start_verification(1, 0, 0, now_ms=0)
    run(psm, [(header(0, 1), None)], guard=first)
    run(psm, [(header(1, 1, control=True), abort())], COORDINATOR)
    late = psm.maybe_start_verification(1, 1, 0, now_ms=0)
    assert late is not None and late is not first
    run(psm, [(header(2, 1, control=True), abort())], COORDINATOR)  # the next transaction aborted too
    assert error_of(psm, [(header(3, 1, seq=1), None)], guard=late) == "invalid_txn_state"
    psm.on_high_watermark_updated(3)
    assert not psm.producers[1].has_ongoing_txn and psm.first_unstable_offset() is None


def test_a_pending_verification_holds_back_higher_sequences(tmp_path: Path) -> None:
    """Kafka's VerificationStateEntry.lowestSequence: while sequence 5 waits for its
    verification, sequence 6 may not be written first (its verification came back sooner)."""
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(0, 1, seq=4, txn=False), None)], guard=None)
    low = psm.maybe_start_verification(1, 5, 0, now_ms=0)
    assert psm.maybe_start_verification(1, 6, 0, now_ms=0) is low
    assert error_of(psm, [(header(1, 1, seq=6), None)], guard=low) == "out_of_order_sequence_number"
    run(psm, [(header(1, 1, seq=5), None)], guard=low)
    run(psm, [(header(2, 1, seq=6), None)], guard=None)
    # A new epoch starts the lowest sequence over.
    psm2 = ProducerStateManager(str(tmp_path))
    psm2.maybe_start_verification(1, 9, 0, now_ms=0)
    bumped = psm2.maybe_start_verification(1, 0, 1, now_ms=0)
    run(psm2, [(header(0, 1, epoch=1), None)], guard=bumped)


def test_unverified_entries_expire_with_producers(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    stale = psm.maybe_start_verification(1, 0, 0, now_ms=0)
    psm.remove_expired(now_ms=999, expiration_ms=1000)
    assert psm.verification_guard(1) is stale
    psm.remove_expired(now_ms=1000, expiration_ms=1000)
    assert psm.verification_guard(1) is None
    assert error_of(psm, [(header(0, 1), None)], guard=stale) == "invalid_txn_state"


def test_the_later_batches_of_an_append_that_opens_the_transaction_follow_it(tmp_path: Path) -> None:
    """Two batches of one producer for one partition in one request (clients send one):
    the second follows the first, which opened the transaction, and is not held back by
    the pending verification's lowest sequence."""
    psm = ProducerStateManager(str(tmp_path))
    guard = psm.maybe_start_verification(1, 0, 0, now_ms=0)
    run(psm, [(header(0, 1, n=2), None), (header(2, 1, seq=2), None)], guard=guard)
    assert psm.producers[1].last_seq == 2 and psm.verification_guard(1) is None


def test_a_reload_keeps_pending_verifications(tmp_path: Path) -> None:
    """A truncation reloads producer state while a verification waits for the coordinator;
    the verification still holds (as Kafka's), or the legitimate write it guards would be
    refused INVALID_TXN_STATE, which clients take as fatal."""
    psm = ProducerStateManager(str(tmp_path))
    guard = psm.maybe_start_verification(1, 0, 0, now_ms=0)
    psm.load_latest_snapshot(0)
    run(psm, [(header(0, 1), None)], guard=guard)


def test_snapshots_keep_each_batch_timestamp_and_older_versions_take_the_last_timestamp(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(0, 1, seq=0, ts=5000, txn=False), None)])
    run(psm, [(header(1, 1, seq=1, ts=6000, txn=False), None)])
    psm.take_snapshot(2)
    loaded = ProducerStateManager(str(tmp_path))
    assert loaded.load_latest_snapshot(10) == 2
    assert [b.timestamp for b in loaded.producers[1].batches] == [5000, 6000]
    body = json.dumps([[7, 2, 1234, [[0, 4, 10, 14], [5, 6, 15, 16]], -1, -1]], separators=(",", ":")).encode()
    (tmp_path / f"{20:020d}.snapshot").write_bytes(
        json.dumps({"version": 2, "crc": crc32c(body)}).encode() + b"\n" + body)
    old = ProducerStateManager(str(tmp_path))
    assert old.load_latest_snapshot(100) == 20
    assert [b.timestamp for b in old.producers[7].batches] == [-1, 1234]


def test_last_timestamp_is_the_last_batchs_and_a_producer_expires_at_the_bound(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(0, 1, seq=0, ts=5000, txn=False), None)])
    run(psm, [(header(1, 1, seq=1, ts=1000, txn=False), None)])
    assert psm.producers[1].last_timestamp == 1000  # Kafka's lastTimestamp: not the highest seen
    psm.remove_expired(now_ms=1099, expiration_ms=100)
    assert list(psm.producers) == [1]
    psm.remove_expired(now_ms=1100, expiration_ms=100)  # idle for exactly the expiration
    assert psm.producers == {}


def test_a_snapshot_load_leaves_out_the_producers_expired_by_then(tmp_path: Path) -> None:
    psm = ProducerStateManager(str(tmp_path))
    run(psm, [(header(0, 1, ts=1000, txn=False), None), (header(1, 2, ts=1000), None),
              (header(2, 3, ts=5000, txn=False), None)])
    psm.take_snapshot(3)
    loaded = ProducerStateManager(str(tmp_path))
    assert loaded.load_latest_snapshot(10, now_ms=6000, expiration_ms=5000) == 3
    # 1 is 5000 ms idle; 2 as well, but its transaction is open; 3 is 1000 ms idle.
    assert sorted(loaded.producers) == [2, 3]
    assert loaded.ongoing_transactions() == [TxnMetadata(2, 1)]
