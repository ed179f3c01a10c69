"""Partition's ISR and high watermark as a state machine (Hypothesis), without an event loop.

The model plays ZooKeeper (the partition state znode: ISR and version), the
controller (which may drop a replica from the ISR behind the leader's back),
the watch (which delivers the znode's current state late) and the network
(writes that land, are refused, or end with an unknown outcome). The safety
property is the one finding 1 of issue 9 broke: every replica in the ISR that
ZooKeeper holds has every record below the leader's high watermark, so
whichever of them is elected keeps every acknowledged record.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support.replication import open_log_manager, records

from dmq.record.batch import validate_batches
from dmq.replication import partition as partition_module
from dmq.replication.partition import Partition

REPLICAS = [1, 2, 3]


class PartitionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.lm = open_log_manager(self.dir)
        log = self.lm.get_or_create("t", 0, "id")
        self.p = Partition("t", 0, "id", log, 1)
        self.zk_isr = [1, 2]
        self.zk_version = 0
        self.p.make_leader(0, REPLICAS, self.zk_isr, self.zk_version)
        self.follower_leo = {2: 0, 3: 0}
        self.write: tuple[int, list[int], int] | None = None  # (epoch, isr, expected version)
        self.last_hw = 0

    def teardown(self) -> None:
        self.lm.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(n=st.integers(1, 5))
    def produce(self, n: int) -> None:
        buf = bytearray(records(n))
        self.p.append_records_to_leader(buf, validate_batches(buf, 1 << 20), 1)

    @rule(replica=st.sampled_from([2, 3]), data=st.data())
    def follower_fetches(self, replica: int, data: st.DataObject) -> None:
        leo = self.p.log.log_end_offset
        offset = data.draw(st.integers(self.follower_leo[replica], leo))
        self.follower_leo[replica] = offset
        self.p.update_follower_fetch(replica, offset)
        expanded = self.p.isr_after_expand()
        if expanded is not None:
            self._propose(expanded)

    @rule(replica=st.sampled_from([2, 3]))
    def leader_shrinks(self, replica: int) -> None:
        if replica in self.p.isr:
            self._propose([r for r in self.p.isr if r != replica])

    def _propose(self, isr: list[int]) -> None:
        proposal = self.p.propose_isr(isr)
        if proposal is not None:
            assert self.write is None, "only one ISR change at a time"
            self.write = (proposal[0], isr, proposal[1])

    def _apply_in_zookeeper(self) -> bool:
        assert self.write is not None
        epoch, isr, expected = self.write
        if expected != self.zk_version:
            return False
        self.zk_isr, self.zk_version = list(isr), self.zk_version + 1
        return True

    @precondition(lambda self: self.write is not None)
    @rule()
    def write_completes(self) -> None:
        assert self.write is not None
        landed = self._apply_in_zookeeper()
        epoch, isr, _ = self.write
        self.write = None
        self.p.isr_written(epoch, isr, self.zk_version if landed else None)

    @precondition(lambda self: self.write is not None)
    @rule(landed=st.booleans())
    def write_outcome_unknown(self, landed: bool) -> None:
        assert self.write is not None
        if landed:
            self._apply_in_zookeeper()
        epoch, isr, _ = self.write
        self.write = None
        self.p.isr_write_failed(epoch, isr, retry_ms=0)

    @rule()
    def retry(self) -> None:
        again = self.p.retry_isr_write()
        if again is not None:
            assert self.write is None
            self.write = (again[0], again[2], again[1])

    @rule(replica=st.sampled_from([2, 3]))
    def controller_drops(self, replica: int) -> None:
        if replica in self.zk_isr:
            self.zk_isr = [r for r in self.zk_isr if r != replica]
            self.zk_version += 1

    @rule()
    def watch_delivers(self) -> None:
        self.p.make_leader(0, REPLICAS, self.zk_isr, self.zk_version)

    @invariant()
    def zookeepers_isr_holds_every_acknowledged_record(self) -> None:
        hw = self.p.high_watermark
        for r in self.zk_isr:
            if r != 1:
                assert self.follower_leo[r] >= hw, (
                    f"replica {r} is in ZooKeeper's ISR {self.zk_isr} with log end "
                    f"{self.follower_leo[r]} below the high watermark {hw}")

    @invariant()
    def high_watermark_never_moves_back(self) -> None:
        assert self.last_hw <= self.p.high_watermark <= self.p.log.log_end_offset
        self.last_hw = self.p.high_watermark

    @invariant()
    def the_leader_acts_only_on_confirmed_states(self) -> None:
        # The ISR the leader counts for acks is one ZooKeeper held at some version.
        assert 1 in self.p.isr


TestPartitionIsr = PartitionMachine.TestCase
TestPartitionIsr.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


# ------------------------------------------------- followers about to join the ISR


class Clock:
    """Stands in for ``partition.now_ms``: milliseconds that move only when told."""

    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(partition_module, "now_ms", c)
    return c


def leader(tmp_path: Path, isr: list[int], replicas: list[int] | None = None, lag_ms: int = 10_000,
           eligible: Callable[[int], bool] = lambda r: True) -> Partition:
    """Broker 1 leading t-0 with ten records (committed: the high watermark is 10)."""
    lm = open_log_manager(tmp_path)
    p = Partition("t", 0, "id", lm.get_or_create("t", 0, "id"), 1, replica_lag_time_max_ms=lag_ms,
                  replica_eligible=eligible)
    p.make_leader(0, replicas or [1, 2], isr)
    produce(p, 10)
    for r in isr:
        if r != 1:
            p.update_follower_fetch(r, 10)
    assert p.high_watermark == 10
    return p


def produce(p: Partition, n: int) -> None:
    buf = bytearray(records(n))
    p.append_records_to_leader(buf, validate_batches(buf, 1 << 20), 1)


def test_a_caught_up_follower_rejoins_under_a_steady_produce_stream(tmp_path: Path, clock: Clock) -> None:
    """KAFKA-4485: the ISR shrank to the leader; follower 2 fetches at the log end each
    answer gave it, and every time a produce has landed meanwhile. With the high
    watermark over the ISR alone it is always past 2's fetch offset, and 2 never
    rejoins; holding it at the caught-up follower lets 2 back in."""
    p = leader(tmp_path, isr=[1])
    given = 0  # 2 comes back from far behind
    for _ in range(3):
        p.update_follower_fetch(2, given)
        fetched, given = given, p.log.log_end_offset  # the answer carries 2 to the log end
        clock.ms += 100
        produce(p, 5)
    assert p.isr_after_expand() == [1, 2]
    assert p.high_watermark == fetched == 15 < p.log.log_end_offset  # held at 2, not the leader's end


def test_a_follower_outside_the_isr_holds_the_high_watermark_only_while_caught_up(
        tmp_path: Path, clock: Clock) -> None:
    p = leader(tmp_path, isr=[1], lag_ms=10_000)
    p.update_follower_fetch(2, 10)  # caught up at 10
    produce(p, 5)
    assert p.high_watermark == 10  # held at 2, caught up 0 ms ago
    clock.ms += 10_000
    produce(p, 5)
    assert p.high_watermark == 10  # the lag bound itself still counts (Kafka's <=)
    clock.ms += 1
    produce(p, 5)
    assert p.high_watermark == 25  # 2 lags beyond replica.lag.time.max.ms: no longer waited for


def test_a_follower_that_has_never_caught_up_does_not_hold_the_high_watermark(
        tmp_path: Path, clock: Clock) -> None:
    p = leader(tmp_path, isr=[1])
    p.update_follower_fetch(2, 3)  # far behind, and never at the leader's log end
    produce(p, 5)
    assert p.high_watermark == 15


def test_an_ineligible_follower_does_not_hold_the_high_watermark(tmp_path: Path, clock: Clock) -> None:
    """KIP-841: a broker shutting down (or unregistered) may not join the ISR, so
    nothing is held for it even though it is caught up."""
    eligible = {2: False, 3: True}
    p = leader(tmp_path, isr=[1], replicas=[1, 2, 3], eligible=eligible.__getitem__)
    p.update_follower_fetch(2, 10)
    produce(p, 5)
    assert p.high_watermark == 15
    p.update_follower_fetch(3, 15)
    produce(p, 5)
    assert p.high_watermark == 15  # 3 is eligible and caught up: held
    eligible[3] = False
    produce(p, 5)
    assert p.high_watermark == 25


def test_an_isr_member_holds_the_high_watermark_however_far_behind_or_ineligible(
        tmp_path: Path, clock: Clock) -> None:
    """ISR members count as before: the high watermark is held at the slowest of them
    whether it lags past the bound or not, and whether it is eligible or not, until
    the ISR is shrunk."""
    p = leader(tmp_path, isr=[1, 2], eligible=lambda r: False)
    clock.ms += 60_000
    produce(p, 5)
    assert p.high_watermark == 10
    p.update_follower_fetch(2, 12)
    assert p.high_watermark == 12
