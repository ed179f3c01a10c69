"""A Hypothesis state machine of a leader Log and a follower copying it, checked against a model.

Several producers interleave transactional batches, commits and aborts (as
WriteTxnMarkers writes them), idempotent and plain batches; the coordinator's
epoch moves, producers are fenced, zombies and stale coordinators are refused;
the high watermark moves; the leader is truncated, reopened cleanly or after a
crash (unflushed transaction indexes and snapshots lost, sometimes a torn last
batch). After every step, for the leader and the follower: the log end offset,
the first unstable and last stable offsets, the aborted transactions of several
ranges, each producer's epoch / last sequence / coordinator epoch / open
transaction, and what a read_committed consumer reads, all as the model says.

The model is a list of batches; everything else is folded from it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from dmq.record.batch import InvalidRecordError
from dmq.storage.log import Log
from dmq.storage.producer_state import AppendOrigin
from tests.support.transactions import (
    append,
    data_batch,
    make_log,
    marker_batch,
    raw_batches,
    read_committed,
)

TXN_PIDS = (1, 2, 3)
IDEMPOTENT_PID = 9
SEGMENT_BYTES = "420"


@pytest.fixture(autouse=True)
def _log_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Log's clock at these tests' record timestamps (1970, a few seconds in): a
    producer a reload takes from a snapshot expires producer.id.expiration.ms after its
    last batch (as in Kafka), so at today's time every one of them would be gone."""
    monkeypatch.setattr("dmq.storage.log.now_ms", lambda: 10_000)


@dataclass
class MBatch:
    offset: int
    count: int
    pid: int = -1
    epoch: int = -1
    seq: int = -1
    txn: bool = False
    values: list[bytes] = field(default_factory=list)
    marker: bool = False
    commit: bool = False
    coordinator_epoch: int = -1

    @property
    def next_offset(self) -> int:
        return self.offset + self.count


@dataclass
class MProducer:
    epoch: int = -1
    last_seq: int = -1
    coordinator_epoch: int = -1
    txn_first: int = -1


@dataclass
class Folded:
    producers: dict[int, MProducer]
    completed: list[tuple[int, int, int, bool]]  # (pid, first offset, marker offset, aborted)
    txn_of: dict[int, tuple[int, int]]  # data batch offset -> (pid, transaction's first offset)


def fold(batches: list[MBatch]) -> Folded:
    producers: dict[int, MProducer] = {}
    completed: list[tuple[int, int, int, bool]] = []
    txn_of: dict[int, tuple[int, int]] = {}
    for b in batches:
        if b.pid < 0:
            continue
        p = producers.setdefault(b.pid, MProducer())
        if b.epoch != p.epoch:
            p.epoch, p.last_seq = b.epoch, -1
        if b.marker:
            if p.txn_first >= 0:
                completed.append((b.pid, p.txn_first, b.offset, not b.commit))
            p.coordinator_epoch, p.txn_first = b.coordinator_epoch, -1
        else:
            p.last_seq = b.seq + b.count - 1
            if b.txn:
                if p.txn_first < 0:
                    p.txn_first = b.offset
                txn_of[b.offset] = (b.pid, p.txn_first)
    return Folded(producers, completed, txn_of)


def model_offsets(batches: list[MBatch], hw: int) -> tuple[int | None, int]:
    """(first unstable offset, last stable offset)."""
    f = fold(batches)
    firsts = [p.txn_first for p in f.producers.values() if p.txn_first >= 0]
    firsts += [first for _pid, first, marker, _a in f.completed if marker >= hw]
    fuo = min(firsts) if firsts else None
    return fuo, fuo if fuo is not None and fuo < hw else hw


class LogTransactions(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="dmq-txn-model-")
        self.leader = make_log(os.path.join(self.dir, "l", "t-0"), **{"segment.bytes": SEGMENT_BYTES})
        self.follower = make_log(os.path.join(self.dir, "f", "t-0"), **{"segment.bytes": SEGMENT_BYTES})
        self.batches: list[MBatch] = []
        self.hw = 0
        self.follower_hw = 0
        self.leader.update_high_watermark(0)
        self.follower.update_high_watermark(0)
        self.coordinator_epoch = 0
        self.counter = 0

    def teardown(self) -> None:
        for lg in (getattr(self, "leader", None), getattr(self, "follower", None)):
            if lg is not None:
                lg.close()
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------- helpers

    @property
    def leo(self) -> int:
        return self.batches[-1].next_offset if self.batches else 0

    def producer(self, pid: int) -> MProducer:
        return fold(self.batches).producers.get(pid, MProducer(epoch=0))

    def next_seq(self, pid: int, epoch: int) -> int:
        p = self.producer(pid)
        return p.last_seq + 1 if p.epoch == epoch else 0

    def values(self, n: int) -> list[bytes]:
        self.counter += 1
        return [b"v%d-%d" % (self.counter, i) for i in range(n)]

    def expect_refused(self, error: str, data: bytearray, origin: AppendOrigin) -> None:
        leo = self.leader.log_end_offset
        try:
            append(self.leader, data, origin)
        except InvalidRecordError as e:
            assert e.error == error, (e.error, error)
        else:
            raise AssertionError(f"expected {error}")
        assert self.leader.log_end_offset == leo

    def send(self, pid: int, n: int, txn: bool) -> None:
        epoch = max(self.producer(pid).epoch, 0) if pid >= 0 else -1
        seq = self.next_seq(pid, epoch) if pid >= 0 else -1
        values = self.values(n)
        result = append(self.leader, data_batch(pid, epoch, seq, values, transactional=txn))
        assert result.first_offset == self.leo and not result.duplicate
        self.batches.append(MBatch(self.leo, n, pid, epoch, seq, txn, values))

    def marker(self, pid: int, epoch: int, commit: bool) -> None:
        offset = self.leader.append_end_txn_marker(pid, epoch, self.coordinator_epoch, commit, 0,
                                                   timestamp=1000).first_offset
        assert offset == self.leo
        self.batches.append(MBatch(offset, 1, pid, epoch, marker=True, commit=commit,
                                   coordinator_epoch=self.coordinator_epoch))

    # --------------------------------------------------------------- rules

    @rule(pid=st.sampled_from(TXN_PIDS), n=st.integers(1, 3))
    def transactional_send(self, pid: int, n: int) -> None:
        self.send(pid, n, txn=True)

    @rule(pid=st.sampled_from(TXN_PIDS), n=st.integers(1, 3), commit=st.booleans())
    def whole_transaction(self, pid: int, n: int, commit: bool) -> None:
        self.send(pid, n, txn=True)
        self.send(pid, 1, txn=True)
        self.marker(pid, max(self.producer(pid).epoch, 0), commit)

    @rule(n=st.integers(1, 3), plain=st.booleans())
    def non_transactional_send(self, n: int, plain: bool) -> None:
        self.send(-1 if plain else IDEMPOTENT_PID, n, txn=False)

    @rule(pid=st.sampled_from(TXN_PIDS), commit=st.booleans())
    def end_transaction(self, pid: int, commit: bool) -> None:
        self.marker(pid, max(self.producer(pid).epoch, 0), commit)

    @rule()
    def new_coordinator(self) -> None:
        self.coordinator_epoch += 1

    @rule(pid=st.sampled_from(TXN_PIDS))
    def fence_producer(self, pid: int) -> None:
        """InitProducerId bumps the epoch and aborts whatever was open, with the new epoch."""
        self.marker(pid, max(self.producer(pid).epoch, 0) + 1, commit=False)

    @rule(pid=st.sampled_from(TXN_PIDS))
    def zombie_send(self, pid: int) -> None:
        epoch = self.producer(pid).epoch
        if epoch > 0:
            self.expect_refused("invalid_producer_epoch", data_batch(pid, epoch - 1, 0, [b"zombie"]),
                                AppendOrigin.CLIENT)
            self.expect_refused("invalid_producer_epoch", marker_batch(pid, epoch - 1, True, self.coordinator_epoch),
                                AppendOrigin.COORDINATOR)

    @rule(pid=st.sampled_from(TXN_PIDS))
    def stale_coordinator_marker(self, pid: int) -> None:
        p = self.producer(pid)
        if p.coordinator_epoch > 0:
            self.expect_refused("transaction_coordinator_fenced",
                                marker_batch(pid, p.epoch, False, p.coordinator_epoch - 1),
                                AppendOrigin.COORDINATOR)

    @rule(pid=st.sampled_from(TXN_PIDS))
    def plain_batch_inside_transaction(self, pid: int) -> None:
        p = self.producer(pid)
        if p.txn_first >= 0:
            data = data_batch(pid, p.epoch, p.last_seq + 1, [b"plain"], transactional=False)
            self.expect_refused("invalid_txn_state", data, AppendOrigin.CLIENT)

    @rule(data=st.data())
    def move_high_watermark(self, data: st.DataObject) -> None:
        # Followers fetch whole batches: the high watermark is a batch boundary.
        self.hw = data.draw(st.sampled_from([self.hw] + [b.next_offset for b in self.batches
                                                         if b.next_offset > self.hw]))
        assert self.leader.update_high_watermark(self.hw) == self.hw
        self.follower_hw = min(self.hw, self.follower.log_end_offset)
        self.follower.update_high_watermark(self.follower_hw)

    @rule(data=st.data())
    def replicate(self, data: st.DataObject) -> None:
        pending = raw_batches(self.leader, self.follower.log_end_offset)
        pending = [b for b in pending if int.from_bytes(b[:8], "big") >= self.follower.log_end_offset]
        if not pending:
            return
        n = data.draw(st.integers(1, len(pending)))
        self.follower.append_as_follower(b"".join(pending[:n]))
        self.follower_hw = min(self.hw, self.follower.log_end_offset)
        self.follower.update_high_watermark(self.follower_hw)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        # A diverged follower loses its last few batches.
        i = data.draw(st.integers(max(0, len(self.batches) - 4), len(self.batches) - 1))
        offset = self.batches[i].offset
        del self.batches[i:]
        self.leader.truncate_to(offset)
        self.hw = min(self.hw, offset)
        if self.follower.log_end_offset > offset:
            self.follower.truncate_to(offset)
            self.follower_hw = min(self.follower_hw, offset)

    @rule()
    def roll(self) -> None:
        self.leader.roll()

    @rule()
    def flush(self) -> None:
        self.leader.flush()

    @rule(crash=st.booleans(), tear=st.booleans())
    def reopen(self, crash: bool, tear: bool) -> None:
        path = self.leader.directory
        recovery_point = self.leader.recovery_point
        if not crash:
            self.leader.flush()
        self.leader.close()
        if crash:
            # What the crash loses: unflushed transaction indexes and snapshots.
            for name in os.listdir(path):
                if name.endswith((".txnindex", ".snapshot")) and int(name[:20]) > recovery_point:
                    os.unlink(os.path.join(path, name))
            if tear and self.batches and self.batches[-1].offset >= recovery_point:
                last = self.leader.active_segment
                if last.size:
                    with open(last.log_path, "r+b") as f:
                        f.truncate(last.size - 3)
                    self.batches.pop()
        self.leader = make_log(path, clean_shutdown=not crash, recovery_point=recovery_point,
                               **{"segment.bytes": SEGMENT_BYTES})
        # The partition's checkpointed high watermark is its end: what a single replica has.
        self.hw = self.leo
        self.leader.update_high_watermark(self.hw)
        if self.follower.log_end_offset > self.leo:
            self.follower.truncate_to(self.leo)
            self.follower_hw = min(self.follower_hw, self.leo)

    # ---------------------------------------------------------- invariants

    def check(self, lg: Log, batches: list[MBatch], hw: int) -> None:
        leo = batches[-1].next_offset if batches else 0
        assert lg.log_end_offset == leo
        assert lg.high_watermark == hw
        fuo, lso = model_offsets(batches, hw)
        assert (lg.first_unstable_offset(), lg.last_stable_offset()) == (fuo, lso)
        f = fold(batches)
        got = {pid: (e.epoch, e.last_seq, e.coordinator_epoch, e.current_txn_first_offset)
               for pid, e in lg.producer_state.producers.items()}
        want = {pid: (p.epoch, p.last_seq, p.coordinator_epoch, p.txn_first) for pid, p in f.producers.items()}
        assert got == want
        aborted = [(pid, first, marker) for pid, first, marker, is_aborted in f.completed if is_aborted]
        points = sorted({0, lso, leo, leo // 2, (lso + leo) // 2})
        for start in points:
            for upper in points:
                if upper <= start:
                    continue
                expected = [(pid, first) for pid, first, marker in aborted if marker >= start and first < upper]
                assert lg.collect_aborted_transactions(start, upper) == expected, (start, upper)
        committed = {(pid, first) for pid, first, _m, is_aborted in f.completed if not is_aborted}
        visible = [(b.offset + i, v) for b in batches if not b.marker and b.offset < lso
                   and (not b.txn or f.txn_of[b.offset] in committed)
                   for i, v in enumerate(b.values) if b.offset + i < lso]
        assert read_committed(lg) == visible
        assert read_committed(lg, max_bytes=1) == visible

    @invariant()
    def leader_matches_model(self) -> None:
        if hasattr(self, "leader"):
            self.check(self.leader, self.batches, self.hw)

    @invariant()
    def follower_matches_model(self) -> None:
        if hasattr(self, "follower"):
            leo = self.follower.log_end_offset
            self.check(self.follower, [b for b in self.batches if b.offset < leo], self.follower_hw)


LogTransactions.TestCase.settings = settings(
    max_examples=80, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_log_transactions_model = LogTransactions.TestCase
