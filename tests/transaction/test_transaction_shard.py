"""The transaction coordinator's shard without an event loop."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode
from support.coordinator import ShardDriver, replay_into

from dmq.transaction.metadata import (
    MAX_PRODUCER_EPOCH,
    IllegalStateTransition,
    TransactionMetadata,
    TransactionState,
)
from dmq.transaction.shard import InitResult, SendMarkers, TransactionConfig, TransactionShard

S = TransactionState


def driver(**kw: int) -> ShardDriver:
    return ShardDriver(TransactionShard(0, 5, TransactionConfig(**kw)))


def reloaded(d: ShardDriver) -> TransactionShard:
    return replay_into(TransactionShard(0, 6, d.shard.config), d.log)  # type: ignore[no-any-return]


def init(d: ShardDriver, txn: str = "tx", timeout: int = 60_000, expected: tuple[int, int] = (-1, -1),
         new_id: int = 1000) -> InitResult:
    result = d.run(d.shard.init_producer_id, txn, timeout, expected[0], expected[1], new_id)
    assert isinstance(result, InitResult)
    return result


def test_transition_table_is_kafkas() -> None:
    meta = TransactionMetadata("t", 1, 0, 1000, S.EMPTY)
    with pytest.raises(IllegalStateTransition):
        meta.transition_to(S.PREPARE_COMMIT)
    ongoing = meta.transition_to(S.ONGOING)
    with pytest.raises(IllegalStateTransition):
        ongoing.transition_to(S.COMPLETE_COMMIT)
    with pytest.raises(IllegalStateTransition):
        ongoing.transition_to(S.PREPARE_EPOCH_FENCE).transition_to(S.PREPARE_COMMIT)
    done = ongoing.transition_to(S.PREPARE_COMMIT).transition_to(S.COMPLETE_COMMIT)
    assert done.transition_to(S.ONGOING).state == S.ONGOING
    with pytest.raises(IllegalStateTransition):
        done.transition_to(S.DEAD).transition_to(S.EMPTY)


def test_init_commit_and_the_markers() -> None:
    d = driver()
    first = init(d)
    assert first == InitResult(ErrorCode.none, 1000, 0)
    assert d.run(d.shard.add_partitions, "tx", 1000, 0, [("t", 0), ("t", 1)]) == ErrorCode.none
    assert d.shard.transactions["tx"].state == S.ONGOING
    assert d.run(d.shard.add_partitions, "tx", 1000, 0, [("t", 1)]) == ErrorCode.none
    assert d.run(d.shard.end_txn, "tx", 1000, 0, True) == ErrorCode.none
    assert d.shard.transactions["tx"].state == S.PREPARE_COMMIT
    assert d.effects == [SendMarkers("tx", 1000, 0, True, 5, frozenset({("t", 0), ("t", 1)}))]
    # A retried EndTxn while the markers are written; the wrong outcome is refused.
    assert d.run(d.shard.end_txn, "tx", 1000, 0, True) == ErrorCode.concurrent_transactions
    assert d.run(d.shard.end_txn, "tx", 1000, 0, False) == ErrorCode.invalid_txn_state
    d.run(d.shard.complete, d.effects[-1])
    meta = d.shard.transactions["tx"]
    assert meta.state == S.COMPLETE_COMMIT and meta.partitions == frozenset()
    assert d.run(d.shard.end_txn, "tx", 1000, 0, True) == ErrorCode.none  # a retry after completion
    assert reloaded(d).transactions["tx"] == TransactionMetadata(
        "tx", 1000, 0, 60_000, S.COMPLETE_COMMIT, frozenset(), meta.last_update_ms, meta.start_ms)


def test_a_new_init_fences_the_old_producer_and_aborts_its_open_transaction() -> None:
    d = driver()
    init(d)
    d.run(d.shard.add_partitions, "tx", 1000, 0, [("t", 0)])
    again = init(d)
    assert again.error == ErrorCode.concurrent_transactions  # the client retries
    meta = d.shard.transactions["tx"]
    assert meta.state == S.PREPARE_ABORT and meta.producer_epoch == 1
    assert d.effects == [SendMarkers("tx", 1000, 1, False, 5, frozenset({("t", 0)}))]
    # The zombie (epoch 0) is fenced everywhere.
    assert d.run(d.shard.end_txn, "tx", 1000, 0, True) == ErrorCode.producer_fenced
    assert d.run(d.shard.add_partitions, "tx", 1000, 0, [("t", 1)]) == ErrorCode.producer_fenced
    assert init(d).error == ErrorCode.concurrent_transactions  # until the abort completes
    d.run(d.shard.complete, d.effects[-1])
    assert init(d) == InitResult(ErrorCode.none, 1000, 2)


def test_kip360_bump_with_the_current_epoch_and_its_retry() -> None:
    d = driver()
    init(d)
    bumped = init(d, expected=(1000, 0))
    assert bumped == InitResult(ErrorCode.none, 1000, 1)
    assert init(d, expected=(1000, 0)) == InitResult(ErrorCode.none, 1000, 1)  # the same bump, retried
    assert init(d, expected=(1000, 7)).error == ErrorCode.producer_fenced
    assert init(d, expected=(999, 1)).error == ErrorCode.producer_fenced


def test_an_exhausted_epoch_rotates_the_producer_id() -> None:
    d = driver()
    init(d)
    d.shard.transactions["tx"] = d.shard.transactions["tx"].transition_to(
        S.EMPTY, producer_epoch=MAX_PRODUCER_EPOCH - 1)
    assert d.shard.needs_producer_id("tx")
    assert init(d, new_id=2000) == InitResult(ErrorCode.none, 2000, 0)


def at_epoch(d: ShardDriver, epoch: int, txn: str = "tx") -> None:
    d.shard.transactions[txn] = d.shard.transactions[txn].transition_to(S.EMPTY, producer_epoch=epoch)


def test_a_fence_at_epoch_32766_bumps_to_32767() -> None:
    """A new instance fences a producer at 32766: the abort goes out under 32767, so the
    zombie's next request is refused (before, the abort kept 32766 and the zombie went on)."""
    d = driver()
    init(d)
    at_epoch(d, MAX_PRODUCER_EPOCH - 1)
    zombie = MAX_PRODUCER_EPOCH - 1
    assert d.run(d.shard.add_partitions, "tx", 1000, zombie, [("t", 0)]) == ErrorCode.none
    assert init(d, new_id=2000).error == ErrorCode.concurrent_transactions
    assert d.effects[-1] == SendMarkers("tx", 1000, MAX_PRODUCER_EPOCH, False, 5, frozenset({("t", 0)}))
    d.run(d.shard.complete, d.effects[-1])
    assert d.run(d.shard.add_partitions, "tx", 1000, zombie, [("t", 1)]) == ErrorCode.producer_fenced
    assert d.run(d.shard.end_txn, "tx", 1000, zombie, True) == ErrorCode.producer_fenced
    assert init(d, new_id=2000) == InitResult(ErrorCode.none, 2000, 0)  # the new instance


def test_a_timed_out_transaction_at_epoch_32766_cannot_be_half_committed() -> None:
    """The timeout abort removed the records sent to t-0; the slow producer must not go on
    to commit a transaction holding only t-1."""
    d = driver(abort_interval_ms=1000)
    d.apply(d.shard.on_loaded(d.now))
    init(d, timeout=5000)
    at_epoch(d, MAX_PRODUCER_EPOCH - 1)
    slow = MAX_PRODUCER_EPOCH - 1
    d.run(d.shard.add_partitions, "tx", 1000, slow, [("t", 0)])
    d.advance(7000)
    assert d.effects[-1] == SendMarkers("tx", 1000, MAX_PRODUCER_EPOCH, False, 5, frozenset({("t", 0)}))
    d.run(d.shard.complete, d.effects[-1])
    assert d.run(d.shard.add_partitions, "tx", 1000, slow, [("t", 1)]) == ErrorCode.producer_fenced
    assert init(d, expected=(1000, slow)).error == ErrorCode.producer_fenced


def test_rotating_an_exhausted_id_is_for_the_current_producer_and_can_be_retried() -> None:
    d = driver()
    init(d)
    at_epoch(d, MAX_PRODUCER_EPOCH - 1)
    current = MAX_PRODUCER_EPOCH - 1
    # A producer naming an epoch fenced long ago does not get the new id.
    assert init(d, expected=(1000, 5), new_id=2000).error == ErrorCode.producer_fenced
    assert d.shard.transactions["tx"].producer_id == 1000
    assert init(d, expected=(1000, current), new_id=2000) == InitResult(ErrorCode.none, 2000, 0)
    # Its answer was lost: the retry (old id, old epoch) gets the same id and epoch.
    assert init(d, expected=(1000, current), new_id=3000) == InitResult(ErrorCode.none, 2000, 0)
    assert init(d, expected=(2000, 0), new_id=3000) == InitResult(ErrorCode.none, 2000, 1)


def test_bad_timeouts_and_unknown_ids() -> None:
    d = driver(max_timeout_ms=1000)
    assert init(d, timeout=1001).error == ErrorCode.invalid_transaction_timeout
    assert init(d, timeout=0).error == ErrorCode.invalid_transaction_timeout
    assert d.run(d.shard.add_partitions, "nope", 1, 0, [("t", 0)]) == ErrorCode.invalid_producer_id_mapping
    assert d.run(d.shard.end_txn, "nope", 1, 0, True) == ErrorCode.invalid_producer_id_mapping
    init(d, timeout=1000)
    assert d.run(d.shard.add_partitions, "tx", 999, 0, [("t", 0)]) == ErrorCode.invalid_producer_id_mapping
    assert d.run(d.shard.end_txn, "tx", 1000, 0, True) == ErrorCode.invalid_txn_state  # nothing open


def test_a_transaction_open_past_its_timeout_is_fenced_and_aborted() -> None:
    d = driver(abort_interval_ms=1000)
    d.apply(d.shard.on_loaded(d.now))
    init(d, timeout=5000)
    d.run(d.shard.add_partitions, "tx", 1000, 0, [("t", 0)])
    d.advance(5000)
    assert d.shard.transactions["tx"].state == S.ONGOING
    d.advance(1000)
    meta = d.shard.transactions["tx"]
    assert meta.state == S.PREPARE_ABORT and meta.producer_epoch == 1
    assert d.effects[-1] == SendMarkers("tx", 1000, 1, False, 5, frozenset({("t", 0)}))
    assert d.run(d.shard.end_txn, "tx", 1000, 0, True) == ErrorCode.producer_fenced


def test_a_loaded_shard_finishes_prepared_transactions() -> None:
    d = driver()
    init(d)
    d.run(d.shard.add_partitions, "tx", 1000, 0, [("t", 3)])
    d.run(d.shard.end_txn, "tx", 1000, 0, True)
    loaded = reloaded(d)
    result = loaded.on_loaded(0)
    assert result.effects == [SendMarkers("tx", 1000, 0, True, 6, frozenset({("t", 3)}))]


def test_idle_ids_expire() -> None:
    d = driver(id_expiration_ms=10_000, expire_interval_ms=1000)
    d.apply(d.shard.on_loaded(d.now))
    init(d)
    d.advance(10_000)
    assert "tx" in d.shard.transactions
    d.advance(1000)
    assert "tx" not in d.shard.transactions and "tx" not in reloaded(d).transactions


def test_a_concurrent_request_waits_for_the_write_in_flight() -> None:
    shard = TransactionShard(0, 5, TransactionConfig())
    first = shard.init_producer_id("tx", 60_000, -1, -1, 1000, 0)
    assert first.records and "tx" in shard.pending
    assert shard.init_producer_id("tx", 60_000, -1, -1, 1001, 0).response.error == \
        ErrorCode.concurrent_transactions
    assert first.failed is not None
    first.failed(shard, ErrorCode.coordinator_not_available, 0)
    assert "tx" not in shard.pending and "tx" not in shard.transactions


class TransactionMachine(RuleBasedStateMachine):
    """Producers of one transactional id: inits (zombies keep their old epoch), adds,
    commits, aborts, markers completing and time passing.

    Invariants: only the newest epoch gets anything done; a Prepare state always has
    its markers asked for; the state a new coordinator replays is the live one."""

    def __init__(self) -> None:
        super().__init__()
        self.d = driver(abort_interval_ms=1000)
        self.d.apply(self.d.shard.on_loaded(self.d.now))
        self.epochs: list[tuple[int, int]] = []

    @rule()
    def init(self) -> None:
        result = init(self.d)
        if result.error == ErrorCode.none:
            self.epochs.append((result.producer_id, result.producer_epoch))

    @rule(i=st.integers(min_value=0, max_value=50), p=st.integers(min_value=0, max_value=3))
    def add(self, i: int, p: int) -> None:
        if self.epochs:
            pid, epoch = self.epochs[i % len(self.epochs)]
            error = self.d.run(self.d.shard.add_partitions, "tx", pid, epoch, [("t", p)])
            if (pid, epoch) != self.epochs[-1]:
                assert error != ErrorCode.none

    @rule(i=st.integers(min_value=0, max_value=50), commit=st.booleans())
    def end(self, i: int, commit: bool) -> None:
        if self.epochs:
            pid, epoch = self.epochs[i % len(self.epochs)]
            error = self.d.run(self.d.shard.end_txn, "tx", pid, epoch, commit)
            if (pid, epoch) != self.epochs[-1]:
                assert error != ErrorCode.none

    @rule()
    def markers_written(self) -> None:
        asked = [e for e in self.d.effects if isinstance(e, SendMarkers)]
        if asked:  # the sender of the newest markers asked for finishes
            self.d.run(self.d.shard.complete, asked[-1])

    @rule(ms=st.integers(min_value=1, max_value=70_000))
    def time_passes(self, ms: int) -> None:
        self.d.advance(ms)

    @invariant()
    def prepared_transactions_have_markers_asked_for(self) -> None:
        meta = self.d.shard.transactions.get("tx")
        if meta is not None and meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            wanted = SendMarkers("tx", meta.producer_id, meta.producer_epoch, meta.state == S.PREPARE_COMMIT,
                                 5, meta.partitions)
            # Markers that can complete this Prepare (prepared_ms is not compared by ==).
            assert any(e == wanted and e.prepared_ms == meta.last_update_ms for e in self.d.effects)
            assert meta.partitions

    @invariant()
    def replay_builds_the_live_state(self) -> None:
        live: Any = self.d.shard.transactions.get("tx")
        fresh: Any = reloaded(self.d).transactions.get("tx")
        if live is None:
            assert fresh is None
        else:
            assert fresh is not None
            assert (fresh.producer_id, fresh.producer_epoch, fresh.state, fresh.partitions) == \
                (live.producer_id, live.producer_epoch, live.state, live.partitions)


TransactionMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_transaction_state_machine = TransactionMachine.TestCase


def test_completing_an_earlier_transactions_markers_does_not_complete_the_next_one() -> None:
    """The markers of T1 written (its completion retried after a timed-out write that was
    applied after all) while T2 of the same producer id and epoch is prepared: T2 is not
    completed, none of its markers being written."""
    for second in ([("t", 1)], [("t", 0)]):  # other partitions, and the same ones later
        d = driver()
        init(d)
        d.run(d.shard.add_partitions, "tx", 1000, 0, [("t", 0)])
        d.run(d.shard.end_txn, "tx", 1000, 0, True)
        t1 = d.effects[-1]
        d.run(d.shard.complete, t1)
        d.advance(10)
        d.run(d.shard.add_partitions, "tx", 1000, 0, second)
        d.run(d.shard.end_txn, "tx", 1000, 0, True)
        t2 = d.effects[-1]
        assert t2.prepared_ms > t1.prepared_ms
        d.run(d.shard.complete, t1)  # T1's retried completion
        assert d.shard.transactions["tx"].state == S.PREPARE_COMMIT
        d.run(d.shard.complete, t2)
        assert d.shard.transactions["tx"].state == S.COMPLETE_COMMIT
