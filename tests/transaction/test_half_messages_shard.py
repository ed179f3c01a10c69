"""Half-message check-back in the transaction shard, without an event loop."""

from __future__ import annotations

import logging
import struct

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode
from support.coordinator import ShardDriver, replay_into

from dmq.transaction import records as rec
from dmq.transaction.metadata import TransactionState
from dmq.transaction.shard import (
    NO_ANSWER,
    CheckAnswer,
    CheckPoll,
    InitResult,
    Resolution,
    SendMarkers,
    TransactionConfig,
    TransactionShard,
)

S = TransactionState
HALF = rec.half_transactional_id("orders", "p1")


def driver(**kw: int) -> ShardDriver:
    config = {"check_delay_ms": 6000, "check_interval_ms": 1000, "check_max": 3, "abort_interval_ms": 500, **kw}
    d = ShardDriver(TransactionShard(0, 5, TransactionConfig(**config)))
    d.apply(d.shard.on_loaded(d.now))
    return d


def open_half(d: ShardDriver, txn: str = HALF, new_id: int = 1000) -> None:
    result = d.run(d.shard.init_producer_id, txn, 60_000, -1, -1, new_id)
    assert isinstance(result, InitResult) and result.error == ErrorCode.none
    assert d.run(d.shard.add_partitions, txn, new_id, 0, [("orders", 2)]) == ErrorCode.none


def poll(d: ShardDriver, *answers: tuple[str, int], group: str = "orders") -> list[str]:
    result = d.run(d.shard.poll_checks, group, [CheckAnswer(t, 1000, 0, r) for t, r in answers])
    assert isinstance(result, CheckPoll) and result.error == ErrorCode.none
    return [h.meta.transactional_id for h in result.transactions]


def test_half_ids_name_their_group_and_share_its_coordinator_partition() -> None:
    assert rec.half_group(HALF) == "orders"
    assert rec.half_group(rec.half_transactional_id("a/b", "x")) == "a/b"
    assert rec.half_group("orders") is None and rec.half_group("__dmq_half/orders") is None
    partitions = {rec.partition_for(rec.half_transactional_id("orders", str(i)), 50) for i in range(20)}
    assert len(partitions) == 1
    with pytest.raises(ValueError):
        rec.half_transactional_id("orders", "a/b")


def test_first_check_after_the_delay_then_every_interval_and_commit_ends_it() -> None:
    d = driver()
    open_half(d)
    assert poll(d) == []  # not due before transaction.check.delay.ms
    d.now += 6000
    assert poll(d) == [HALF]
    assert poll(d) == []  # handed out: the next is due an interval later
    d.now += 1000
    assert poll(d) == [HALF]
    assert d.shard.check_state(HALF).checks == 2  # type: ignore[union-attr]
    assert poll(d, (HALF, Resolution.COMMIT)) == []
    assert d.shard.transactions[HALF].state == S.PREPARE_COMMIT
    assert d.effects[-1] == SendMarkers(HALF, 1000, 0, True, 5, frozenset({("orders", 2)}))
    d.run(d.shard.complete, d.effects[-1])
    half = d.shard.check_state(HALF)
    assert half is not None and half.meta.state == S.COMPLETE_COMMIT
    assert (half.checks, half.last_answer) == (2, Resolution.COMMIT)
    reloaded = replay_into(TransactionShard(0, 6, d.shard.config), d.log)
    again = reloaded.check_state(HALF)
    assert again is not None and (again.checks, again.last_answer) == (2, Resolution.COMMIT)


def test_rollback_answer_aborts() -> None:
    d = driver()
    open_half(d)
    d.now += 6000
    assert poll(d) == [HALF]
    poll(d, (HALF, Resolution.ROLLBACK))
    assert d.shard.transactions[HALF].state == S.PREPARE_ABORT
    assert d.effects[-1].commit is False


def test_unknown_answers_until_the_limit_then_rolled_back_with_a_log_line(
        caplog: pytest.LogCaptureFixture) -> None:
    d = driver()
    open_half(d)
    d.now += 6000
    for n in range(3):
        assert poll(d) == [HALF], n
        assert poll(d, (HALF, Resolution.UNKNOWN)) == []
        assert d.shard.check_state(HALF).last_answer == Resolution.UNKNOWN  # type: ignore[union-attr]
        d.now += 1000
    with caplog.at_level(logging.WARNING, logger="dmq.transaction"):
        assert poll(d) == []  # the limit: rolled back, not checked a fourth time
    meta = d.shard.transactions[HALF]
    assert meta.state == S.PREPARE_ABORT and meta.producer_epoch == 1  # fenced
    assert "3 checks made" in caplog.text and HALF in caplog.text


def test_exhausted_checks_roll_back_from_the_timer_too() -> None:
    d = driver(check_max=1)
    open_half(d)
    d.now += 6000
    assert poll(d) == [HALF]
    d.advance(1000)
    assert d.shard.transactions[HALF].state == S.PREPARE_ABORT


def test_no_checker_no_check_counted_and_no_timeout_abort() -> None:
    d = driver()
    open_half(d)
    d.advance(120_000)  # far past the 60 s transaction timeout and the check delay
    meta = d.shard.transactions[HALF]
    assert meta.state == S.ONGOING
    assert d.shard.check_state(HALF).checks == 0  # type: ignore[union-attr]
    assert poll(d) == [HALF]  # a checker comes: the check is made at once


def test_an_ordinary_transaction_still_times_out_and_is_never_checked() -> None:
    d = driver()
    open_half(d, "plain")
    d.now += 6000
    assert poll(d) == []
    d.advance(61_000)
    assert d.shard.transactions["plain"].state == S.PREPARE_ABORT


def test_stale_and_foreign_answers_are_ignored() -> None:
    d = driver()
    open_half(d)
    other = rec.half_transactional_id("payments", "p9")
    open_half(d, other, new_id=1001)
    d.now += 6000
    assert poll(d) == [HALF]
    # An answer for another group's transaction, a wrong epoch, an unknown id, a bad resolution.
    d.run(d.shard.poll_checks, "orders", [CheckAnswer(other, 1001, 0, Resolution.COMMIT),
                                          CheckAnswer(HALF, 1000, 7, Resolution.COMMIT),
                                          CheckAnswer("nope", 1, 0, Resolution.COMMIT),
                                          CheckAnswer(HALF, 1000, 0, 9)])
    assert d.shard.transactions[HALF].state == S.ONGOING
    assert d.shard.transactions[other].state == S.ONGOING
    assert d.shard.check_state(HALF).last_answer == NO_ANSWER  # type: ignore[union-attr]
    assert [h.meta.transactional_id for h in d.shard.half_transactions("payments")] == [other]


def test_a_check_in_flight_is_not_handed_out_twice() -> None:
    shard = TransactionShard(0, 5, TransactionConfig(check_delay_ms=0))
    d = ShardDriver(shard)
    open_half(d)
    d.now += 1
    first = shard.poll_checks("orders", [], d.now)
    assert [h.meta.transactional_id for h in first.response.transactions] == [HALF]
    second = shard.poll_checks("orders", [], d.now)
    assert second.response.transactions == []
    assert first.failed is not None
    first.failed(shard, ErrorCode.not_coordinator, d.now)
    assert [h.meta.transactional_id for h in shard.poll_checks("orders", [], d.now).response.transactions] == [HALF]


def next_transaction(d: ShardDriver, commit: bool = True) -> None:
    """The producer ends its transaction itself and begins the next one, keeping its
    producer id and epoch (as Kafka's producer does)."""
    assert d.run(d.shard.end_txn, HALF, 1000, 0, commit) == ErrorCode.none
    d.run(d.shard.complete, [e for e in d.effects if isinstance(e, SendMarkers)][-1])
    d.now += 100
    assert d.run(d.shard.add_partitions, HALF, 1000, 0, [("orders", 2)]) == ErrorCode.none
    assert d.shard.transactions[HALF].state == S.ONGOING


def answer(d: ShardDriver, resolution: Resolution, start_ms: int | None) -> None:
    d.run(d.shard.poll_checks, "orders", [CheckAnswer(HALF, 1000, 0, resolution, start_ms)])


@pytest.mark.parametrize("start", ["v1", "v0"])
def test_an_answer_to_an_ended_transaction_is_not_applied_to_the_next_one(start: str) -> None:
    d = driver(check_interval_ms=60_000)
    open_half(d)
    d.now += 6000
    assert poll(d) == [HALF]  # transaction 1 handed out for a check
    first_start = d.shard.transactions[HALF].start_ms
    next_transaction(d)  # the producer commits it and begins transaction 2
    d.now += 100
    answer(d, Resolution.ROLLBACK, first_start if start == "v1" else None)
    # Transaction 2 was never checked (100 ms old): the answer was to transaction 1.
    assert d.shard.transactions[HALF].state == S.ONGOING
    assert d.shard.check_state(HALF).checks == 0  # type: ignore[union-attr]


def test_a_v1_answer_is_applied_to_the_transaction_it_names_only() -> None:
    d = driver(check_interval_ms=60_000)
    open_half(d)
    d.now += 6000
    assert poll(d) == [HALF]
    first_start = d.shard.transactions[HALF].start_ms
    next_transaction(d)
    d.now += 6000
    assert poll(d) == [HALF]  # transaction 2 handed out too
    second_start = d.shard.transactions[HALF].start_ms
    assert second_start > first_start
    answer(d, Resolution.ROLLBACK, first_start)  # the late answer about transaction 1
    assert d.shard.transactions[HALF].state == S.ONGOING
    answer(d, Resolution.COMMIT, second_start)
    assert d.shard.transactions[HALF].state == S.PREPARE_COMMIT


def test_a_v0_answer_waits_while_an_earlier_transactions_check_may_still_be_answered() -> None:
    d = driver(check_interval_ms=60_000)
    open_half(d)
    d.now += 6000
    assert poll(d) == [HALF]
    next_transaction(d)  # transaction 1's check is still unanswered
    d.now += 6000
    assert poll(d) == [HALF]  # transaction 2 handed out
    checked_at = d.now
    answer(d, Resolution.ROLLBACK, None)  # from transaction 1's checker, or 2's: cannot tell
    assert d.shard.transactions[HALF].state == S.ONGOING
    # A new coordinator knows it too: the window is in the check record.
    reloaded = ShardDriver(replay_into(TransactionShard(0, 6, d.shard.config), d.log), d.now)
    for x in (d, reloaded):
        x.now = checked_at + 60_000  # both checks are past their interval: 1's is taken as lost
        assert [h.meta.transactional_id for h in x.run(x.shard.poll_checks, "orders", []).transactions] == [HALF]
        x.run(x.shard.poll_checks, "orders", [CheckAnswer(HALF, 1000, 0, Resolution.COMMIT)])
        assert x.shard.transactions[HALF].state == S.PREPARE_COMMIT


def test_a_v0_answer_is_applied_when_only_the_current_transaction_was_checked() -> None:
    d = driver(check_interval_ms=60_000)
    open_half(d)
    d.now += 6000
    assert poll(d) == [HALF]
    answer(d, Resolution.UNKNOWN, None)  # transaction 1's check answered
    next_transaction(d)
    d.now += 6000
    assert poll(d) == [HALF]
    answer(d, Resolution.UNKNOWN, None)
    assert d.shard.check_state(HALF).last_answer == Resolution.UNKNOWN  # type: ignore[union-attr]
    answer(d, Resolution.COMMIT, None)  # its check was answered already: nothing outstanding
    assert d.shard.transactions[HALF].state == S.ONGOING
    d.now += 60_000
    assert poll(d) == [HALF]
    answer(d, Resolution.COMMIT, None)
    assert d.shard.transactions[HALF].state == S.PREPARE_COMMIT


def test_a_transaction_starts_after_the_last_one_of_its_producer_even_if_the_clock_goes_back() -> None:
    d = driver()
    open_half(d)
    d.now += 6000
    assert poll(d) == [HALF]
    first_start = d.shard.transactions[HALF].start_ms
    assert d.run(d.shard.end_txn, HALF, 1000, 0, True) == ErrorCode.none
    d.run(d.shard.complete, [e for e in d.effects if isinstance(e, SendMarkers)][-1])
    d.now = first_start - 5000  # a coordinator with a slower clock
    assert d.run(d.shard.add_partitions, HALF, 1000, 0, [("orders", 2)]) == ErrorCode.none
    assert d.shard.transactions[HALF].start_ms == first_start + 1


def test_check_records_of_version_0_are_still_read() -> None:
    old = struct.pack(">hqhqibq", 0, 1000, 0, 5000, 2, int(Resolution.UNKNOWN), 9000)
    assert rec.decode_check_value(old) == rec.CheckValue(1000, 0, 5000, 2, Resolution.UNKNOWN, 9000, True, -1)
    new = rec.CheckValue(1000, 0, 5000, 2, NO_ANSWER, 9000, False, 12_000)
    assert rec.decode_check_value(rec.encode_check_value(new)) == new


class HalfMessageMachine(RuleBasedStateMachine):
    """A half-message transactional id: its producer (inits, adds, ends), checkers polling
    with answers for current or stale epochs, markers completing, time passing.

    Invariants: only Ongoing transactions are handed out; no transaction is checked more
    than ``transaction.check.max`` times; a half transaction never times out (it is
    ended by its producer, an answer, or exhausted checks); a new coordinator replays
    the same check state."""

    def __init__(self) -> None:
        super().__init__()
        self.d = driver()
        self.epochs: list[tuple[int, int]] = []
        self.ended_by: str | None = None

    @rule()
    def init(self) -> None:
        result = self.d.run(self.d.shard.init_producer_id, HALF, 60_000, -1, -1, 1000)
        if result.error == ErrorCode.none:
            self.epochs.append((result.producer_id, result.producer_epoch))

    @rule()
    def add(self) -> None:
        if self.epochs:
            pid, epoch = self.epochs[-1]
            self.d.run(self.d.shard.add_partitions, HALF, pid, epoch, [("orders", 0)])

    @rule(commit=st.booleans())
    def producer_ends(self, commit: bool) -> None:
        if self.epochs:
            pid, epoch = self.epochs[-1]
            self.d.run(self.d.shard.end_txn, HALF, pid, epoch, commit)

    @rule(answer=st.sampled_from([None, *Resolution]), stale=st.booleans(),
          start=st.sampled_from(["v0", "current", "earlier"]))
    def checker_polls(self, answer: Resolution | None, stale: bool, start: str) -> None:
        answers = []
        meta = self.d.shard.transactions.get(HALF)
        if answer is not None and meta is not None:
            epoch = meta.producer_epoch - 1 if stale else meta.producer_epoch
            start_ms = {"v0": None, "current": meta.start_ms, "earlier": meta.start_ms - 1}[start]
            answers.append(CheckAnswer(HALF, meta.producer_id, epoch, answer, start_ms))
        before = self.d.shard.check_state(HALF)
        result = self.d.run(self.d.shard.poll_checks, "orders", answers)
        after = self.d.shard.transactions.get(HALF)
        if before is not None and before.meta.state == S.ONGOING and after is not None \
                and (before.checks == 0
                     or (start == "earlier" and before.checks < self.d.shard.config.check_max)):
            # An answer to no check of this transaction never ends it (nor do checks that
            # were never made run out).
            assert after.state == S.ONGOING
        for half in result.transactions:
            assert half.meta.state == S.ONGOING
            assert 1 <= half.checks <= self.d.shard.config.check_max

    @rule()
    def markers_written(self) -> None:
        asked = [e for e in self.d.effects if isinstance(e, SendMarkers)]
        if asked:  # the sender of the newest markers asked for finishes
            self.d.run(self.d.shard.complete, asked[-1])

    @rule(ms=st.integers(min_value=1, max_value=90_000))
    def time_passes(self, ms: int) -> None:
        meta = self.d.shard.transactions.get(HALF)
        before = self.d.shard.check_state(HALF)
        self.d.advance(ms)
        after = self.d.shard.transactions.get(HALF)
        if meta is not None and meta.state == S.ONGOING and after is not None and after.state != S.ONGOING:
            # Only exhausted checks end a half transaction while time passes.
            assert before is not None and before.checks >= self.d.shard.config.check_max

    @invariant()
    def checks_bounded_and_replayed(self) -> None:
        live = self.d.shard.check_state(HALF)
        fresh = replay_into(TransactionShard(0, 6, self.d.shard.config), self.d.log).check_state(HALF)
        if live is None:
            assert fresh is None
            return
        assert live.checks <= self.d.shard.config.check_max
        assert fresh is not None
        assert (fresh.meta.state, fresh.checks, fresh.last_answer) == (live.meta.state, live.checks, live.last_answer)


HalfMessageMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_half_message_state_machine = HalfMessageMachine.TestCase
