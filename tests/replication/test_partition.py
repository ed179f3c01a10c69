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
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support.replication import open_log_manager, records

from dmq.record.batch import validate_batches
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
