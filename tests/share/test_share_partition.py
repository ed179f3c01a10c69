"""SharePartition, rule by rule (Kafka 4.2's SharePartition semantics, KIP-932)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from dmq.share.partition import (
    AckBatch,
    AcquiredRange,
    AcquireResult,
    ArchivedRange,
    ArchiveReason,
    IllegalStateTransition,
    InFlightRange,
    LogBatch,
    PersistedState,
    RecordState,
    SharePartition,
    SharePartitionConfig,
    StateChange,
    validate_acknowledgement_batches,
)
from dmq.share.records import StateBatch

S = RecordState
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
LOCK = 30_000


def batches(*sizes: int, start: int = 0, control: tuple[int, ...] = ()) -> list[LogBatch]:
    """Consecutive log batches of the given sizes; ``control``: indexes of control batches."""
    out, base = [], start
    for i, n in enumerate(sizes):
        out.append(LogBatch(base, base + n - 1, i in control))
        base += n
    return out


def fresh(start: int = 0, **config: int) -> SharePartition:
    sp = SharePartition(SharePartitionConfig(**config))
    sp.initialize(None, start)
    return sp


def fetch(sp: SharePartition, member: str, log: list[LogBatch], max_records: int = 500,
          batch_size: int = 500, now: int = 0) -> tuple[AcquiredRange, ...]:
    """What the fetch path does: read the log from the next fetch offset, acquire."""
    offset = sp.next_fetch_offset()
    read = [b for b in log if b.last_offset >= offset]
    return sp.acquire(member, offset, read, max_records, batch_size, now).ranges


def ack(sp: SharePartition, member: str, first: int, last: int, *types: int, now: int = 0) -> StateChange:
    return sp.acknowledge(member, [AckBatch(first, last, list(types))], now)


def states(sp: SharePartition) -> list[tuple[int, int, RecordState, int, str | None]]:
    return [(r.first, r.last, r.state, r.delivery_count, r.member_id) for r in sp.in_flight()]


# ------------------------------------------------------------------------ the state table


def test_transition_table_is_kafkas() -> None:
    available = InFlightRange(0, 4, S.AVAILABLE, 0)
    with pytest.raises(IllegalStateTransition):
        available.transition_to(S.ACKNOWLEDGED)
    with pytest.raises(IllegalStateTransition):
        available.transition_to(S.ACQUIRED)  # no owner, no deadline
    acquired = available.transition_to(S.ACQUIRED, delivery_count=1, member_id="m", deadline_ms=5)
    assert (acquired.member_id, acquired.deadline_ms) == ("m", 5)
    for target in (S.AVAILABLE, S.ACKNOWLEDGED, S.ARCHIVED):
        done = acquired.transition_to(target)
        assert done.member_id is None and done.deadline_ms is None and done.delivery_count == 1
    for terminal in (acquired.transition_to(S.ACKNOWLEDGED), acquired.transition_to(S.ARCHIVED)):
        for target in RecordState:
            with pytest.raises(IllegalStateTransition):
                terminal.transition_to(target, member_id="m", deadline_ms=1)
    assert available.transition_to(S.ARCHIVED).state is S.ARCHIVED
    with pytest.raises(IllegalStateTransition):
        available.renewed(10)


def test_operations_need_an_initialized_partition() -> None:
    sp = SharePartition()
    assert not sp.initialized
    with pytest.raises(RuntimeError):
        sp.next_fetch_offset()
    with pytest.raises(RuntimeError):
        sp.acquire("m", 0, batches(1), 10, 10, 0)


# ----------------------------------------------------------------------------- acquiring


def test_a_fresh_partition_starts_at_the_reset_offset_and_acquires_whole_batches() -> None:
    sp = fresh(100)
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (100, 100, 100)
    log = batches(5, 5, start=100)
    result = sp.acquire("m", 100, log, 500, 500, 1000)
    assert result.ranges == (AcquiredRange(100, 109, 1),) and result.count == 10
    assert not result.changed  # acquisitions are not persisted
    assert states(sp) == [(100, 109, S.ACQUIRED, 1, "m")]
    assert sp.next_lock_deadline() == 1000 + LOCK
    assert (sp.end_offset, sp.next_fetch_offset(), sp.in_flight_records, sp.acquired_records) == \
        (109, 110, 10, 10)
    # Nothing more to read: nothing more acquired.
    assert fetch(sp, "m", log) == ()


def test_the_batch_holding_the_reset_offset_is_acquired_from_the_reset_offset() -> None:
    sp = fresh(3)
    assert sp.acquire("m", 3, batches(10), 500, 500, 0).ranges == (AcquiredRange(3, 9, 1),)


def test_max_records_is_a_soft_limit_rounded_up_to_whole_log_batches() -> None:
    sp = fresh()
    log = batches(10, 10, 10, 10)
    # first + 15 - 1 = 14 is in the second batch: both are taken whole.
    assert fetch(sp, "a", log, max_records=15) == (AcquiredRange(0, 19, 1),)
    assert fetch(sp, "b", log, max_records=1) == (AcquiredRange(20, 29, 1),)
    assert fetch(sp, "c", log, max_records=0) == ()


def test_acquired_ranges_split_at_batch_boundaries_every_batch_size_records() -> None:
    sp = fresh()
    log = batches(10, 10, 10, 10, 10)
    # Kafka's createBatches: a cut before a batch once the range holds >= batch_size records.
    assert fetch(sp, "m", log, batch_size=25) == (AcquiredRange(0, 29, 1), AcquiredRange(30, 49, 1))
    sp = fresh()
    assert fetch(sp, "m", batches(7, 7), batch_size=3) == (AcquiredRange(0, 6, 1), AcquiredRange(7, 13, 1))


def test_max_in_flight_records_bounds_the_window_except_for_the_last_whole_batch() -> None:
    sp = fresh(max_in_flight_records=100)
    log = batches(30, 30, 30, 30, 30, 30)
    assert fetch(sp, "a", log) == (AcquiredRange(0, 119, 1),)  # 4 batches: past 100 by a batch
    assert fetch(sp, "b", log) == ()  # full: nothing past the window
    # Released records inside a full window are acquired again, and only those.
    assert ack(sp, "a", 30, 59, RELEASE).persist
    assert sp.next_fetch_offset() == 30
    assert fetch(sp, "b", log) == (AcquiredRange(30, 59, 2),)
    assert sp.end_offset == 119
    # Completing the head frees the window.
    ack(sp, "a", 0, 29, ACCEPT)
    assert sp.start_offset == 30 and sp.in_flight_records == 90
    assert fetch(sp, "c", log) == (AcquiredRange(120, 149, 1),)


def test_a_full_window_acquires_released_records_only_up_to_its_end() -> None:
    sp = fresh(max_in_flight_records=100)
    log = batches(50, 50, 50)
    assert fetch(sp, "a", log) == (AcquiredRange(0, 99, 1),)
    ack(sp, "a", 90, 99, RELEASE)
    # The read from 90 returns the batch 50-99 and the next one; nothing past 99 is taken.
    assert fetch(sp, "b", log) == (AcquiredRange(90, 99, 2),)
    assert sp.end_offset == 99


def test_control_batches_are_archived_when_read_never_delivered() -> None:
    sp = fresh()
    log = batches(5, 1, 4, 1, control=(1, 3))  # 0-4 data, 5 marker, 6-9 data, 10 marker
    result = sp.acquire("m", 0, log, 500, 500, 0)
    assert result.ranges == (AcquiredRange(0, 4, 1), AcquiredRange(6, 9, 1))
    assert result.changed == (StateBatch(5, 5, 4, 0), StateBatch(10, 10, 4, 0))
    assert sp.state_of(5) == InFlightRange(5, 5, S.ARCHIVED, 0)
    ack(sp, "m", 0, 4, ACCEPT)
    ack(sp, "m", 6, 9, ACCEPT)
    assert (sp.start_offset, sp.in_flight_records, sp.next_fetch_offset()) == (11, 0, 11)
    # A read of markers alone moves the start past them.
    sp = fresh()
    result = sp.acquire("m", 0, batches(1, 1, control=(0, 1)), 500, 500, 0)
    assert result.ranges == () and result.changed == (StateBatch(0, 1, 4, 0),)
    assert (sp.start_offset, sp.next_fetch_offset()) == (2, 2)


def test_a_gap_acknowledgement_archives_without_a_dead_letter_report() -> None:
    sp = fresh()
    fetch(sp, "m", batches(10))
    change = sp.acknowledge("m", [AckBatch(0, 3, [ACCEPT]), AckBatch(4, 5, [GAP]),
                                  AckBatch(6, 9, [ACCEPT])], 0)
    assert change.changed == (StateBatch(0, 3, 2, 1), StateBatch(4, 5, 4, 1), StateBatch(6, 9, 2, 1))
    assert change.archived == ()
    assert sp.start_offset == 10 and sp.in_flight() == ()


def test_offsets_missing_from_the_log_are_archived() -> None:
    # Compaction: 5-9 and 15-19 are gone; a released record (12) that is gone too.
    sp = fresh()
    log = [LogBatch(0, 4), LogBatch(10, 14), LogBatch(20, 24)]
    assert fetch(sp, "m", log) == (AcquiredRange(0, 4, 1), AcquiredRange(10, 14, 1),
                                   AcquiredRange(20, 24, 1))
    assert [(r.first, r.last, r.state) for r in sp.in_flight()] == [
        (0, 4, S.ACQUIRED), (5, 9, S.ARCHIVED), (10, 14, S.ACQUIRED), (15, 19, S.ARCHIVED),
        (20, 24, S.ACQUIRED)]
    ack(sp, "m", 10, 14, RELEASE)
    # The log is compacted again: the read from 10 starts at 20.
    assert sp.acquire("n", 10, [LogBatch(20, 24)], 500, 500, 0).ranges == ()
    assert sp.state_of(10) == InFlightRange(10, 14, S.ARCHIVED, 1)


def test_offsets_missing_from_the_log_count_against_the_budget_unless_nothing_is_pending() -> None:
    # Nothing pending before the hole: the start moves past it and the batch after it is read.
    sp = fresh()
    assert sp.acquire("m", 0, [LogBatch(10, 14)], 1, 500, 0).ranges == (AcquiredRange(10, 14, 1),)
    assert sp.start_offset == 10
    # Behind records in flight the hole is in flight too (as Kafka counts it): it uses the
    # budget, and a spent budget stops the read before the next batch.
    sp = fresh()
    fetch(sp, "m", batches(5), max_records=1)
    result = sp.acquire("n", 5, [LogBatch(10, 14), LogBatch(15, 19)], 5, 500, 0)
    assert result.ranges == () and result.changed == (StateBatch(5, 9, 4, 0),)
    assert sp.in_flight_records == 10 and sp.next_fetch_offset() == 10
    assert sp.acquire("n", 10, [LogBatch(10, 14), LogBatch(15, 19)], 5, 500, 0).ranges == \
        (AcquiredRange(10, 14, 1),)


def test_markers_a_loaded_state_left_available_are_archived_when_read() -> None:
    # A state written elsewhere may have holes over markers: they are not delivered.
    sp = SharePartition()
    sp.initialize(PersistedState(0, (StateBatch(0, 1, 2, 1), StateBatch(5, 5, 2, 1))), 0)
    log = [LogBatch(0, 1), LogBatch(2, 2, True), LogBatch(3, 4), LogBatch(5, 5), LogBatch(6, 6, True)]
    result = sp.acquire("m", sp.next_fetch_offset(), log[1:], 500, 500, 0)
    assert result.ranges == (AcquiredRange(3, 4, 1),)
    assert result.changed == (StateBatch(2, 2, 4, 0), StateBatch(6, 6, 4, 0))
    assert (sp.start_offset, sp.end_offset) == (3, 6)


def test_a_released_record_is_acquired_again_with_delivery_count_two() -> None:
    sp = fresh()
    log = batches(10)
    fetch(sp, "a", log)
    change = ack(sp, "a", 3, 3, RELEASE)
    assert change.changed == (StateBatch(3, 3, 0, 1),) and change.archived == ()
    assert sp.next_fetch_offset() == 3
    # The read returns the whole batch 0-9; only 3 is available.
    assert fetch(sp, "b", log) == (AcquiredRange(3, 3, 2),)
    assert sp.state_of(3) == InFlightRange(3, 3, S.ACQUIRED, 2, "b", LOCK)
    assert sp.next_fetch_offset() == 10


def test_a_record_is_archived_at_the_delivery_count_limit() -> None:
    sp = fresh(delivery_count_limit=5)
    log = batches(1, 1)
    for count in range(1, 6):
        assert fetch(sp, "m", log, max_records=1) == (AcquiredRange(0, 0, count),)
        change = ack(sp, "m", 0, 0, RELEASE)
    assert change.archived == (ArchivedRange(0, 0, ArchiveReason.DELIVERY_LIMIT, 5),)
    assert change.changed == (StateBatch(0, 0, 4, 5),)
    # Never delivered a sixth time: the next fetch moves on.
    assert sp.start_offset == 1
    assert fetch(sp, "m", log) == (AcquiredRange(1, 1, 1),)


def test_reject_archives_with_a_dead_letter_report() -> None:
    sp = fresh()
    fetch(sp, "m", batches(10))
    change = ack(sp, "m", 2, 4, REJECT)
    assert change.archived == (ArchivedRange(2, 4, ArchiveReason.REJECTED, 1),)
    assert sp.state_of(2) == InFlightRange(2, 4, S.ARCHIVED, 1)


def test_per_offset_acknowledge_types() -> None:
    sp = fresh()
    fetch(sp, "m", batches(6))
    change = ack(sp, "m", 0, 5, ACCEPT, ACCEPT, RELEASE, REJECT, GAP, ACCEPT)
    assert change.changed == (StateBatch(0, 1, 2, 1), StateBatch(2, 2, 0, 1), StateBatch(3, 4, 4, 1),
                              StateBatch(5, 5, 2, 1))
    assert change.archived == (ArchivedRange(3, 3, ArchiveReason.REJECTED, 1),)
    assert sp.start_offset == 2 and sp.next_fetch_offset() == 2


# ------------------------------------------------------------------------- acknowledging


@pytest.mark.parametrize("bad", [
    [AckBatch(5, 4, [ACCEPT])],                              # first > last
    [AckBatch(4, 6, [ACCEPT]), AckBatch(2, 3, [ACCEPT])],    # not ascending
    [AckBatch(0, 3, [])],                                    # no types
    [AckBatch(0, 3, [ACCEPT, ACCEPT])],                      # per-offset types of the wrong length
    [AckBatch(0, 0, [5])],                                   # unknown type
    [AckBatch(0, 0, [-1])],
    [AckBatch(0, 0, [RENEW])],                               # RENEW without is_renew_ack
])
def test_malformed_acknowledgement_batches_are_invalid_requests(bad: list[AckBatch]) -> None:
    assert validate_acknowledgement_batches(bad) == ErrorCode.invalid_request
    sp = fresh()
    fetch(sp, "m", batches(10))
    before = sp.in_flight()
    assert sp.acknowledge("m", bad, 0) == StateChange(ErrorCode.invalid_request)
    assert sp.in_flight() == before


def test_kafkas_validation_lets_a_batch_start_on_the_previous_last_offset() -> None:
    # KafkaApis checks first < previous last: an overlap of one offset passes validation,
    # and the second transition of that offset fails in the share-partition.
    both = [AckBatch(0, 3, [ACCEPT]), AckBatch(3, 5, [ACCEPT])]
    assert validate_acknowledgement_batches(both) == ErrorCode.none
    sp = fresh()
    fetch(sp, "m", batches(10))
    assert sp.acknowledge("m", both, 0).error == ErrorCode.invalid_record_state
    assert states(sp) == [(0, 9, S.ACQUIRED, 1, "m")]


def test_acknowledging_records_not_acquired_by_the_member() -> None:
    sp = fresh()
    log = batches(5, 5)
    fetch(sp, "a", log, max_records=1)
    fetch(sp, "b", log, max_records=1)
    assert ack(sp, "b", 0, 4, ACCEPT).error == ErrorCode.invalid_record_state  # a's
    assert ack(sp, "a", 3, 6, ACCEPT).error == ErrorCode.invalid_record_state  # partly b's
    ack(sp, "a", 0, 1, ACCEPT)
    assert ack(sp, "a", 0, 4, ACCEPT).error == ErrorCode.none  # 0-1 are below the start now
    assert sp.start_offset == 5
    ack(sp, "b", 7, 7, RELEASE)
    assert ack(sp, "b", 7, 7, ACCEPT).error == ErrorCode.invalid_record_state  # AVAILABLE
    ack(sp, "b", 8, 8, ACCEPT)
    assert ack(sp, "b", 8, 8, ACCEPT).error == ErrorCode.invalid_record_state  # ACKNOWLEDGED
    # Past the window: an invalid request; nothing in flight: an invalid record state.
    assert ack(sp, "b", 9, 10, ACCEPT).error == ErrorCode.invalid_request
    assert ack(sp, "b", 50, 50, ACCEPT).error == ErrorCode.invalid_request
    assert ack(fresh(), "b", 0, 0, ACCEPT).error == ErrorCode.invalid_record_state


def test_acknowledgements_are_all_or_nothing() -> None:
    sp = fresh()
    fetch(sp, "a", batches(10))
    before = sp.in_flight()
    result = sp.acknowledge("a", [AckBatch(0, 4, [ACCEPT]), AckBatch(5, 10, [ACCEPT])], 0)
    assert result == StateChange(ErrorCode.invalid_request)
    assert sp.in_flight() == before and sp.start_offset == 0


def test_batches_below_the_start_offset_are_ignored() -> None:
    sp = fresh(10)
    fetch(sp, "m", batches(20))
    assert sp.in_flight()[0].first == 10
    change = sp.acknowledge("m", [AckBatch(0, 5, [REJECT]), AckBatch(6, 12, [ACCEPT])], 0)
    assert change.error == ErrorCode.none and change.changed == (StateBatch(10, 12, 2, 1),)
    assert sp.start_offset == 13


def test_renew_restarts_the_lock_only_in_a_renew_acknowledgement() -> None:
    sp = fresh()
    fetch(sp, "m", batches(4), now=0)
    change = sp.acknowledge("m", [AckBatch(0, 3, [RENEW, RENEW, ACCEPT, RENEW])], 10_000,
                            is_renew_ack=True)
    assert change.changed == (StateBatch(2, 2, 2, 1),)
    assert sp.state_of(0) == InFlightRange(0, 1, S.ACQUIRED, 1, "m", 10_000 + LOCK)
    assert sp.state_of(3) == InFlightRange(3, 3, S.ACQUIRED, 1, "m", 10_000 + LOCK)
    assert not sp.expire_locks(LOCK).persist
    assert sp.expire_locks(10_000 + LOCK).persist


# -------------------------------------------------------------------- the start offset


def test_the_start_offset_moves_over_leading_terminal_records() -> None:
    sp = fresh()
    fetch(sp, "m", batches(10, 10, 10))
    ack(sp, "m", 10, 19, ACCEPT)
    assert sp.start_offset == 0 and sp.delivery_complete_count == 10
    ack(sp, "m", 0, 4, REJECT)
    assert sp.start_offset == 5 and sp.delivery_complete_count == 10
    ack(sp, "m", 5, 9, ACCEPT)
    assert sp.start_offset == 20 and sp.delivery_complete_count == 0
    ack(sp, "m", 20, 29, GAP)
    assert (sp.start_offset, sp.end_offset, sp.in_flight(), sp.next_fetch_offset()) == (30, 30, (), 30)


def test_lag_is_the_high_watermark_less_the_start_and_the_completed_records() -> None:
    sp = fresh()
    fetch(sp, "m", batches(10, 10))
    assert sp.lag(50) == 50
    ack(sp, "m", 5, 14, ACCEPT)
    assert sp.lag(50) == 40
    ack(sp, "m", 0, 4, ACCEPT)
    assert sp.start_offset == 15 and sp.lag(50) == 35
    assert sp.lag(10) == 0


# ------------------------------------------------------------------- locks and sessions


def test_locks_expire_at_their_deadline() -> None:
    sp = fresh(lock_duration_ms=1000)
    log = batches(5, 5)
    fetch(sp, "a", log, max_records=1, now=0)
    fetch(sp, "b", log, max_records=1, now=500)
    assert sp.next_lock_deadline() == 1000
    assert sp.expire_locks(999) == StateChange()
    change = sp.expire_locks(1000)
    assert change.changed == (StateBatch(0, 4, 0, 1),) and change.archived == ()
    assert states(sp) == [(0, 4, S.AVAILABLE, 1, None), (5, 9, S.ACQUIRED, 1, "b")]
    assert sp.next_lock_deadline() == 1500
    assert ack(sp, "a", 0, 4, ACCEPT).error == ErrorCode.invalid_record_state  # too late
    assert fetch(sp, "c", log, now=2000) == (AcquiredRange(0, 4, 2),)


def test_an_expired_lock_at_the_delivery_limit_archives() -> None:
    sp = fresh(delivery_count_limit=2, lock_duration_ms=10)
    log = batches(3)
    fetch(sp, "m", log, now=0)
    sp.expire_locks(10)
    fetch(sp, "m", log, now=10)
    change = sp.expire_locks(20)
    assert change.archived == (ArchivedRange(0, 2, ArchiveReason.DELIVERY_LIMIT, 2),)
    assert sp.start_offset == 3 and sp.next_lock_deadline() is None


def test_release_member_frees_only_that_members_records() -> None:
    sp = fresh()
    log = batches(5, 5, 5)
    fetch(sp, "a", log, max_records=1)
    fetch(sp, "b", log, max_records=1)
    fetch(sp, "a", log, max_records=1)
    change = sp.release_member("a")
    assert change.changed == (StateBatch(0, 4, 0, 1), StateBatch(10, 14, 0, 1))
    assert states(sp) == [(0, 4, S.AVAILABLE, 1, None), (5, 9, S.ACQUIRED, 1, "b"),
                          (10, 14, S.AVAILABLE, 1, None)]
    assert sp.release_member("a") == StateChange()
    assert fetch(sp, "b", log) == (AcquiredRange(0, 4, 2), AcquiredRange(10, 14, 2))


def test_release_member_of_one_session_leaves_the_members_other_session_alone() -> None:
    """A member whose connection dropped opens a new share session while the old one's
    release (or a fetch of the old session still waiting) has yet to run. Releasing by
    member id alone made the records the new session had just acquired AVAILABLE again:
    another member got them while the first still held them (duplicate delivery).
    Released by session, only the old session's records go."""
    sp = fresh()
    log = batches(5, 5)
    offset = sp.next_fetch_offset()
    sp.acquire("a", offset, [b for b in log if b.last_offset >= offset], 1, 500, 0, session_id=2)
    offset = sp.next_fetch_offset()
    sp.acquire("a", offset, [b for b in log if b.last_offset >= offset], 1, 500, 0, session_id=1)
    assert sp.release_member("a", session_id=1) == StateChange(changed=(StateBatch(5, 9, 0, 1),))
    assert states(sp) == [(0, 4, S.ACQUIRED, 1, "a"), (5, 9, S.AVAILABLE, 1, None)]
    assert sp.state_of(0) == InFlightRange(0, 4, S.ACQUIRED, 1, "a", LOCK, session_id=2)
    # The new session acknowledges as the member; a RENEW keeps the session's tag.
    assert sp.acknowledge("a", [AckBatch(0, 4, [RENEW])], 10, is_renew_ack=True).error == ErrorCode.none
    assert sp.state_of(0) == InFlightRange(0, 4, S.ACQUIRED, 1, "a", 10 + LOCK, session_id=2)
    assert sp.release_member("a", session_id=1) == StateChange()
    assert sp.release_member("a", session_id=2).changed == (StateBatch(0, 4, 0, 1),)


# --------------------------------------------------------------------- the log start


def test_the_log_start_moving_drops_what_is_below_it() -> None:
    sp = fresh()
    log = batches(5, 5, 5, 5)
    fetch(sp, "a", log, max_records=1)                  # 0-4 a
    fetch(sp, "b", log, max_records=6)                  # 5-14 b
    ack(sp, "b", 5, 9, RELEASE)                         # 5-9 available
    assert sp.log_start_moved(3) == StateChange()       # nothing to persist at once
    assert sp.start_offset == 3 and sp.in_flight()[0] == InFlightRange(3, 4, S.ACQUIRED, 1, "a", LOCK)
    sp.log_start_moved(12)
    assert sp.start_offset == 12 and states(sp) == [(12, 14, S.ACQUIRED, 1, "b")]
    assert ack(sp, "a", 0, 4, ACCEPT).error == ErrorCode.none  # below the start: ignored
    sp.log_start_moved(100)
    assert (sp.start_offset, sp.in_flight(), sp.next_fetch_offset()) == (100, (), 100)
    sp.log_start_moved(50)
    assert sp.start_offset == 100


# ------------------------------------------------------------------ persisting, loading


def test_snapshot_then_initialize_gives_the_same_observable_state() -> None:
    sp = fresh(10)
    log = batches(5, 5, 5, 5, 1, start=10, control=(4,))
    fetch(sp, "a", log, max_records=1)                  # 10-14
    fetch(sp, "b", log, max_records=6)                  # 15-24
    ack(sp, "b", 15, 19, RELEASE)
    fetch(sp, "c", log, max_records=5)                  # 15-19 again (count 2)
    ack(sp, "a", 12, 12, ACCEPT)
    ack(sp, "c", 17, 17, REJECT)
    fetch(sp, "c", log)                                 # 25-29, 30 a marker
    snap = sp.snapshot()
    assert snap == PersistedState(10, (
        StateBatch(10, 11, 0, 1), StateBatch(12, 12, 2, 1), StateBatch(13, 14, 0, 1),
        StateBatch(15, 16, 0, 2), StateBatch(17, 17, 4, 2), StateBatch(18, 19, 0, 2),
        StateBatch(20, 29, 0, 1), StateBatch(30, 30, 4, 0)), 3)
    loaded = SharePartition()
    assert loaded.initialize(snap, 0) == StateChange()
    # The same records, none acquired: a new leader has no sessions.
    assert _expanded(loaded) == _expanded(sp)
    assert loaded.acquired_records == 0 and sp.acquired_records == 18
    assert loaded.snapshot() == snap
    assert (loaded.start_offset, loaded.end_offset, loaded.delivery_complete_count, loaded.lag(31)) == \
        (sp.start_offset, sp.end_offset, sp.delivery_complete_count, sp.lag(31))
    assert loaded.next_fetch_offset() == 10
    # Delivery counts carry on: 15-16 were delivered twice.
    assert fetch(loaded, "d", log) == (AcquiredRange(10, 11, 2), AcquiredRange(13, 14, 2),
                                       AcquiredRange(15, 16, 3), AcquiredRange(18, 19, 3),
                                       AcquiredRange(20, 29, 2))


def _expanded(sp: SharePartition) -> dict[int, tuple[RecordState, int]]:
    return {o: (S.AVAILABLE if r.state is S.ACQUIRED else r.state, r.delivery_count)
            for r in sp.in_flight() for o in range(r.first, r.last + 1)}


def test_initialize_from_kafkas_state() -> None:
    # Uninitialized (start -1): the reset offset decides.
    sp = SharePartition()
    sp.initialize(PersistedState(-1), 42)
    assert (sp.start_offset, sp.next_fetch_offset()) == (42, 42)
    # Gaps between persisted batches were never delivered; ACQUIRED (1) loads as AVAILABLE;
    # batches below the start are done; AVAILABLE at the limit is archived (and reported).
    state = PersistedState(10, (StateBatch(0, 11, 2, 1), StateBatch(12, 12, 0, 2),
                                StateBatch(15, 16, 1, 3), StateBatch(17, 17, 0, 5),
                                StateBatch(18, 19, 4, 1)))
    change = sp.initialize(state, 0)
    assert change.archived == (ArchivedRange(17, 17, ArchiveReason.DELIVERY_LIMIT, 5),)
    assert change.changed == (StateBatch(17, 17, 4, 5),)
    assert (sp.start_offset, sp.end_offset) == (12, 19)
    assert [(r.first, r.last, r.state, r.delivery_count) for r in sp.in_flight()] == [
        (12, 12, S.AVAILABLE, 2), (13, 14, S.AVAILABLE, 0), (15, 16, S.AVAILABLE, 3),
        (17, 17, S.ARCHIVED, 5), (18, 19, S.ARCHIVED, 1)]
    log = batches(30)
    assert fetch(sp, "m", log) == (AcquiredRange(12, 12, 3), AcquiredRange(13, 14, 1),
                                   AcquiredRange(15, 16, 4), AcquiredRange(20, 29, 1))


@pytest.mark.parametrize("bad", [
    PersistedState(0, (StateBatch(0, 1, 3, 1),)),                          # unknown state
    PersistedState(0, (StateBatch(0, 1, 0, -1),)),                         # negative count
    PersistedState(0, (StateBatch(2, 1, 0, 1),)),                          # ends before it starts
    PersistedState(0, (StateBatch(0, 5, 2, 1), StateBatch(5, 6, 2, 1))),   # overlap
])
def test_an_unusable_state_is_refused(bad: PersistedState) -> None:
    with pytest.raises(ValueError):
        SharePartition().initialize(bad, 0)


def test_a_checkpoint_undoes_an_acknowledgement_whose_write_failed() -> None:
    sp = fresh()
    fetch(sp, "m", batches(10))
    saved = sp.checkpoint()
    assert ack(sp, "m", 0, 9, ACCEPT).persist
    assert sp.start_offset == 10
    sp.restore(saved)
    assert states(sp) == [(0, 9, S.ACQUIRED, 1, "m")] and sp.start_offset == 0


def test_a_read_must_start_inside_the_window() -> None:
    sp = fresh()
    fetch(sp, "m", batches(10))
    # Read from past the window: offset 10 is not known to be missing, nothing is acquired.
    assert sp.acquire("m", 11, batches(5, start=11), 10, 10, 0) == AcquireResult()
    assert sp.end_offset == 9
    with pytest.raises(ValueError):
        sp.acquire("m", 10, [LogBatch(10, 12), LogBatch(12, 14)], 10, 10, 0)
    with pytest.raises(ValueError):
        sp.acquire("m", 10, batches(5, start=10), 10, 0, 0)
