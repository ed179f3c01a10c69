"""Delayed records in the Log (dmq.storage.delayed) and their delivery (dmq.replication.delayed):
a leader and a follower against a model, through produce, delivery, replication, reloads,
truncation and snapshots."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from dmq.config import BrokerConfig, LogConfig
from dmq.record.batch import validate_batches
from dmq.record.records import decode_batch, encode_batch
from dmq.replication.delayed import DelayedDelivery
from dmq.replication.replica_manager import ReplicaManager
from dmq.storage import log as log_module
from dmq.storage.delayed import DelayedRecords
from dmq.storage.log import Log
from dmq.storage.log_manager import LogManager

T0 = 1_800_000_000_000


def records_in(log: Log) -> list[tuple[int, bytes]]:
    """(offset, value) of every record a consumer would read (control batches skipped)."""
    out = []
    for segment, pos, header in log.batches_from(log.log_start_offset):
        if header.is_control:
            continue
        out += [(r.offset, r.value or b"") for r in decode_batch(segment.read_batch(pos, header))[1]]
    return out


class LeaderAndFollower(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        # The Log reads its clock for the delay of a dmq-deliver-at header: this test's clock.
        self._real_now_ms = log_module.now_ms
        log_module.now_ms = lambda: self.now
        self.dir = Path(tempfile.mkdtemp(prefix="dmq-delayed-"))
        self.lm = LogManager(str(self.dir / "leader"), lambda t: LogConfig(BrokerConfig(), {"segment.bytes": "1500"}))
        self.lm.load_logs(lambda t, p: "id")
        self.rm = ReplicaManager(1, self.lm)
        self.partition = self.rm.become_leader("t", 0, "id", 0, replicas=[1], isr=[1])
        self.delivery = DelayedDelivery(self.rm)
        self.follower = self._open_follower()
        self.n = 0
        self.seq = 0
        self.due: dict[bytes, int] = {}  # produced with a delay, not delivered: value -> time
        self.plain: set[bytes] = set()
        self.delivered: dict[bytes, int] = {}  # value -> when delivered

    def _open_follower(self, clean: bool = True) -> Log:
        return Log(str(self.dir / "follower" / "t-0"), "t", 0, LogConfig(BrokerConfig(), {"segment.bytes": "1500"}),
                   clean_shutdown=clean)

    @property
    def leader(self) -> Log:
        return self.partition.log

    def teardown(self) -> None:
        log_module.now_ms = self._real_now_ms
        self.follower.close()
        self.lm.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(delays=st.lists(st.none() | st.integers(-1000, 5000), min_size=1, max_size=4),
          idempotent=st.booleans(), codec=st.sampled_from([0, 4]))
    def produce(self, delays: list[int | None], idempotent: bool, codec: int) -> None:
        recs = []
        for d in delays:
            self.n += 1
            value = b"r%d" % self.n
            headers = [] if d is None else [("dmq-deliver-at", str(self.now + d).encode())]
            recs.append((None, value, headers))
            if d is None or d <= 0:
                self.plain.add(value)
            else:
                self.due[value] = self.now + d
        seq = self.seq if idempotent else -1
        if idempotent:
            self.seq += len(delays)
        data = encode_batch(recs, timestamp=self.now, codec=codec, producer_id=5 if idempotent else -1,
                            producer_epoch=0 if idempotent else -1, base_sequence=seq)
        self.partition.append_records_to_leader(data, validate_batches(data, 1 << 20), 1)

    @rule(ms=st.integers(1, 3000))
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule()
    def tick(self) -> None:
        self.delivery.tick(self.now)
        for value in [v for v, at in self.due.items() if at <= self.now]:
            self.delivered[value] = self.now
            del self.due[value]

    @rule()
    def replicate(self) -> None:
        start = self.follower.log_end_offset
        if start >= self.leader.log_end_offset:
            return
        data = self.leader.read(start, 1 << 30, self.leader.log_end_offset)
        assert data is not None
        self.follower.append_as_follower(data.read())

    @rule(back=st.integers(1, 6))
    def truncate_follower(self, back: int) -> None:
        """Cut the follower's last ``back`` batches (a diverged follower truncates at a
        batch boundary: where a leader epoch starts)."""
        bases = [h.base_offset for _, _, h in self.follower.batches_from(self.follower.log_start_offset)]
        if bases:
            self.follower.truncate_to(bases[max(0, len(bases) - back)])

    @rule(clean=st.booleans())
    def reopen_follower(self, clean: bool) -> None:
        if clean:
            self.follower.flush()
        self.follower.close()
        self.follower = self._open_follower(clean)

    @rule()
    def flush_leader(self) -> None:
        self.leader.flush()

    @invariant()
    def a_caught_up_follower_has_the_leaders_pending_records(self) -> None:
        """What a follower would deliver if it took over now."""
        if self.follower.log_end_offset == self.leader.log_end_offset:
            assert sorted(self.follower.delayed.entries()) == sorted(self.leader.delayed.entries())

    @invariant()
    def pending_is_the_model(self) -> None:
        values = {}
        from dmq.replication.delayed import read_delayed
        entries = list(self.leader.delayed.entries())
        found = read_delayed(self.leader, [o for _, o, _ in entries])
        for deliver_at, offset, _ in entries:
            values[found[offset].value] = deliver_at
        assert values == self.due

    @invariant()
    def each_record_is_visible_once_and_never_early(self) -> None:
        # A record still pending in the model (its time not come at the last tick) that
        # showed up would be an early delivery; one delivered twice shows up twice.
        seen = [v for _, v in records_in(self.leader)]
        assert sorted(seen) == sorted([*self.plain, *self.delivered])

    @rule(clean=st.booleans())
    def restart_leader_copy(self, clean: bool) -> None:
        """A copy of the leader's files opened as a restarted broker would (after a clean
        shutdown: its snapshot and what follows; after a crash: the control batches read
        again) holds the same pending records."""
        if clean:
            self.leader.flush()
        copy = self.dir / "copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(self.leader.directory, copy / "t-0")
        again = Log(str(copy / "t-0"), "t", 0, LogConfig(BrokerConfig(), {"segment.bytes": "1500"}),
                    clean_shutdown=clean)
        try:
            assert sorted(again.delayed.entries()) == sorted(self.leader.delayed.entries())
        finally:
            again.close()


TestDelayedLog = LeaderAndFollower.TestCase
TestDelayedLog.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])


def test_pending_records_survive_a_restart_and_hold_retention(tmp_path: Path) -> None:
    config = LogConfig(BrokerConfig(), {"segment.bytes": "400", "retention.ms": "1000"})
    log = Log(str(tmp_path / "t-0"), "t", 0, config)
    data = encode_batch([(b"k", b"late", [("dmq-deliver-at", str(T0 + 10_000).encode())])], timestamp=T0)
    log.append_as_leader(data, validate_batches(data, 1 << 20), 0, timestamp=T0)
    for _ in range(20):
        plain = encode_batch([(None, b"x" * 50, [])], timestamp=T0)
        log.append_as_leader(plain, validate_batches(plain, 1 << 20), 0, timestamp=T0)
    assert len(log.segments) > 3
    log.delete_old_segments(now=T0 + 5_000)  # every segment is past retention.ms
    assert log.segments[0].base_offset == 0  # the one holding the pending record stays
    assert log.delayed.pending == 1
    log.close()  # unclean: no snapshot, the control batches are read again
    again = Log(str(tmp_path / "t-0"), "t", 0, config)
    assert [(at, o) for at, o, _ in again.delayed.entries()] == [(T0 + 10_000, 0)]
    assert again.delayed.due(T0 + 9_999, 10) == []
    assert again.delayed.due(T0 + 10_000, 10) == [(T0 + 10_000, 0)]
    again.close()


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 5000), st.integers(-1, 2)),
    st.tuples(st.just("remove"), st.lists(st.integers(0, 40), max_size=6), st.just(0)),
    st.tuples(st.just("settle"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("due"), st.integers(0, 6000), st.integers(1, 10))), max_size=60))
def test_delayed_records_against_a_model(ops: list[tuple[Any, Any, Any]]) -> None:
    """Buckets, the heap, sorted prefixes and the filter path: the same entries as a dict."""
    d = DelayedRecords(tempfile.mkdtemp())
    pending: dict[int, int] = {}  # offset -> deliver_at
    awaiting: dict[int, list[tuple[int, int]]] = {}
    offset = 0
    for op, a, b in ops:
        if op == "add":
            d.add(offset, a, b)
            if b >= 0:
                awaiting.setdefault(b, []).append((a, offset))
            else:
                pending[offset] = a
            offset += 1
        elif op == "remove":
            named = [(o, pending[o]) for o in set(a) if o in pending]
            assert d.remove(named) == len(named)
            for o, _ in named:
                del pending[o]
        elif op == "settle":
            d.settle(a, b)
            for at, o in awaiting.pop(a, []):
                if b:
                    pending[o] = at
        else:
            expected = sorted((at, o) for o, at in pending.items() if at <= a)[:b]
            assert d.due(a, b) == expected
        assert d.pending == len(pending)
        assert sorted((at, o) for at, o, pid in d.entries() if pid < 0) == sorted(
            (at, o) for o, at in pending.items())
        assert d.earliest() == (min(pending.values()) if pending else None)
        assert d.min_offset() == min([*pending, *(o for w in awaiting.values() for _, o in w)], default=None)
