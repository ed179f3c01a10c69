"""SharePartitionManager under random fetches, acknowledgements, session closes, failed
and fenced writes and leader changes (a Hypothesis state machine over a real Log)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.errors import ErrorCode
from support.share import TP0, ShareEnv

from dmq.share.partition import AckBatch

MEMBERS = st.sampled_from(["a", "b", "c"])
ACCEPT, RELEASE, REJECT = 1, 2, 3
LIMIT = 5


class ManagerMachine(RuleBasedStateMachine):
    """Model: who holds which offsets, which are done. Checked on every fetch: nothing
    held is handed out again, nothing done is delivered again, counts stay in bounds."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.loop = asyncio.new_event_loop()
        self.env = ShareEnv(Path(self.dir.name))
        self.held: dict[int, str] = {}  # offset -> member
        self.done: set[int] = set()
        self.epoch = 0
        self.run(self.env.init_state())

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.env.manager.close()
        self.loop.close()
        self.env.lm.shutdown()
        self.dir.cleanup()

    @rule(n=st.integers(1, 6))
    def produce(self, n: int) -> None:
        self.env.produce(n)

    @rule(member=MEMBERS, max_records=st.integers(1, 8))
    def fetch(self, member: str, max_records: int) -> None:
        r = self.run(self.env.fetch(member, max_records=max_records, batch_size=3))[TP0]
        assert r.error == ErrorCode.none
        for a in r.acquired:
            assert 1 <= a.delivery_count <= LIMIT
            for offset in range(a.first, a.last + 1):
                assert offset not in self.held, f"{offset} held by {self.held[offset]}, given to {member}"
                assert offset not in self.done
                self.held[offset] = member

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), kind=st.sampled_from([ACCEPT, RELEASE, REJECT]),
          failure=st.sampled_from([None, None, None, ErrorCode.coordinator_not_available]))
    def acknowledge(self, data: st.DataObject, kind: int, failure: ErrorCode | None) -> None:
        offset = data.draw(st.sampled_from(sorted(self.held)))
        member = self.held[offset]
        last = offset
        while self.held.get(last + 1) == member and last - offset < 4:
            last += 1
        if failure is not None:
            self.env.persister.fail_writes.append(failure)
        errors = self.run(self.env.manager.acknowledge("g", member, {TP0: [AckBatch(offset, last, (kind,))]}))
        if failure is not None:
            assert errors == {TP0: ErrorCode.coordinator_not_available}
            self.env.persister.fail_writes.clear()
            return
        assert errors == {TP0: ErrorCode.none}
        for o in range(offset, last + 1):
            del self.held[o]
            if kind != RELEASE:
                self.done.add(o)

    @rule(member=MEMBERS)
    def close_session(self, member: str) -> None:
        self.run(self.env.manager.release_member("g", member, [TP0]))
        self.held = {o: m for o, m in self.held.items() if m != member}

    @precondition(lambda self: bool(self.held))
    @rule()
    def fenced_write(self) -> None:
        offset = min(self.held)
        self.env.persister.fail_writes.append(ErrorCode.fenced_leader_epoch)
        errors = self.run(self.env.manager.acknowledge("g", self.held[offset], {TP0: [AckBatch(offset, offset, (ACCEPT,))]}))
        assert errors == {TP0: ErrorCode.not_leader_or_follower}
        assert self.env.manager.share_partition("g", TP0[0], 0) is None
        self.held.clear()  # reloaded from the last write: held records are available again

    @rule()
    def new_leader_epoch(self) -> None:
        self.epoch += 1
        self.env.rm.become_leader("t", 0, TP0[0].hex, self.epoch, [1], [1])
        self.env.manager.partition_changed("t", 0)  # what the broker's metadata listener calls
        self.held.clear()

    @invariant()
    def start_is_below_everything_open(self) -> None:
        sp = self.env.manager.share_partition("g", TP0[0], 0)
        if sp is not None and sp.initialized:
            assert all(o >= sp.start_offset for o in self.held)
            assert sp.acquired_records == len(self.held)

    def drain(self) -> None:
        """Accept everything: the start reaches the log end."""
        for _ in range(200):
            r = self.run(self.env.fetch("z", max_records=50))[TP0]
            if not r.acquired:
                break
            for a in r.acquired:
                acks = self.run(self.env.manager.acknowledge("g", "z", {TP0: [AckBatch(a.first, a.last, (ACCEPT,))]}))
                assert acks == {TP0: ErrorCode.none}


class DrainingMachine(ManagerMachine):
    def teardown(self) -> None:
        try:
            for member in ("a", "b", "c"):
                self.run(self.env.manager.release_member("g", member, [TP0]))
            self.drain()
            sp = self.env.manager.share_partition("g", TP0[0], 0)
            end = self.env.rm.leader_partition("t", 0).high_watermark
            if sp is not None:
                assert sp.start_offset == end and sp.acquired_records == 0
        finally:
            super().teardown()


TestManagerMachine = DrainingMachine.TestCase
TestManagerMachine.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
