"""SharePartition against a per-offset model, driven by Hypothesis: producers appending
data and marker batches, members fetching and acknowledging (well and badly), sessions
closing, locks expiring, the log start moving and the leader reloading its state from a
snapshot (the last one written, or one taken on the spot).

Checked at every step: the share-partition is the model, record for record (state,
delivery count, owner, lock deadline); no offset has two owners; no acknowledged or
archived record is acquired again; delivery counts stay within the limit; reports of
archived records (REJECT, the delivery limit) are exactly the model's; a snapshot loaded
at any step is the model with its acquisitions undone. At the end every offset below the
high watermark is accepted, archived for a reason, or deleted by the log start: none is
lost.

The same machine runs with a dead-letter topic (``DeadLetterMachine``): records archived
for a reason wait in ARCHIVING until their dead letters are written (a rule, in any order
and any grouping), are never acquired or acknowledged meanwhile, hold the start offset
back, and are durably what they were before (a reload undoes a REJECT whose dead letter
was not written; one at the delivery limit is archived, and reported, again; one read
after the last write is read again, as new; one the log start passed is deleted).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode

from dmq.share.partition import (
    AckBatch,
    AcquiredRange,
    ArchivedRange,
    ArchiveReason,
    LogBatch,
    PersistedState,
    RecordState,
    SharePartition,
    SharePartitionConfig,
    StateChange,
)

S = RecordState
CONFIG = SharePartitionConfig(max_in_flight_records=12, delivery_count_limit=3, lock_duration_ms=100)
MEMBERS = ("a", "b", "c")
MAX_BATCH = 6
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3


@dataclass(frozen=True)
class Rec:
    state: RecordState
    count: int
    owner: str | None = None
    deadline: int | None = None


Model = dict[int, Rec]


class SharePartitionMachine(RuleBasedStateMachine):
    DEAD_LETTER = False

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.log: list[LogBatch] = []
        self.hwm = 0
        self.log_start = 0
        self.sp = SharePartition(CONFIG, dead_letter=self.DEAD_LETTER)
        self.sp.initialize(None, 0)
        # The model: the window [start, end) offset by offset.
        self.model: Model = {}
        self.start = self.end = 0
        # What was written last (the caller writes a snapshot whenever an operation asks).
        self.persisted = PersistedState(-1)
        self.persisted_model: tuple[Model, int, int] = ({}, 0, 0)
        # How each offset ended: accepted, rejected, limit, gap, control.
        self.outcome: dict[int, str] = {}
        self.control: set[int] = set()
        self.missing: set[int] = set()  # offsets compaction removed

    # ------------------------------------------------------------------ the model

    def _settle(self) -> None:
        while self.start < self.end and self.model[self.start].state.terminal:
            del self.model[self.start]
            self.start += 1

    @property
    def _archived(self) -> RecordState:
        """Where a record archived for a reason goes."""
        return S.ARCHIVING if self.DEAD_LETTER else S.ARCHIVED

    def _release(self, o: int, reasons: dict[int, tuple[ArchiveReason, int]]) -> None:
        rec = self.model[o]
        if rec.count >= CONFIG.delivery_count_limit:
            self.model[o] = Rec(self._archived, rec.count)
            reasons[o] = (ArchiveReason.DELIVERY_LIMIT, rec.count)
            self.outcome[o] = "limit"
        else:
            self.model[o] = Rec(S.AVAILABLE, rec.count)

    def _next_fetch_offset(self) -> int:
        return min((o for o, r in self.model.items() if r.state is S.AVAILABLE), default=self.end)

    def _reloaded(self, model: Model, start: int, end: int) -> tuple[Model, int, int, dict[int, tuple[ArchiveReason, int]]]:
        """A snapshot of ``model`` loaded by a new leader: no owners, the limit applied."""
        out: Model = {}
        reasons: dict[int, tuple[ArchiveReason, int]] = {}
        for o, r in model.items():
            if r.state in (S.ACQUIRED, S.AVAILABLE, S.ARCHIVING):
                if r.count >= CONFIG.delivery_count_limit:
                    out[o] = Rec(self._archived, r.count)
                    reasons[o] = (ArchiveReason.DELIVERY_LIMIT, r.count)
                else:
                    out[o] = Rec(S.AVAILABLE, r.count)
            else:
                out[o] = r
        while start < end and out[start].state.terminal:
            del out[start]
            start += 1
        return out, start, end, reasons

    def _persist(self, change: StateChange | None = None) -> None:
        if change is None or change.changed:
            self.persisted = self.sp.snapshot()
            self.persisted_model = (dict(self.model), self.start, self.end)

    @staticmethod
    def _reports(archived: tuple[ArchivedRange, ...]) -> dict[int, tuple[ArchiveReason, int]]:
        out: dict[int, tuple[ArchiveReason, int]] = {}
        for a in archived:
            for o in range(a.first, a.last + 1):
                assert o not in out
                out[o] = (a.reason, a.delivery_count)
        return out

    # ------------------------------------------------------------------ producing

    @rule(n=st.integers(min_value=1, max_value=MAX_BATCH), control=st.booleans())
    def produce(self, n: int, control: bool) -> None:
        n = 1 if control else n
        self.log.append(LogBatch(self.hwm, self.hwm + n - 1, control))
        if control:
            self.control.add(self.hwm)
        self.hwm += n

    @rule(i=st.integers(min_value=0, max_value=30))
    def compact(self, i: int) -> None:
        """The cleaner removes a whole data batch: its offsets are gone from the log. It
        never cleans the active segment, so the log's last batch stays."""
        data = [b for b in self.log[:-1] if not b.is_control]
        if data:
            b = data[i % len(data)]
            self.log.remove(b)
            self.missing.update(range(b.base_offset, b.last_offset + 1))

    @rule(k=st.integers(min_value=1, max_value=8), tell=st.booleans())
    def delete_records(self, k: int, tell: bool) -> None:
        self.log_start = min(self.hwm, self.log_start + k)
        if tell:
            self._log_start_moved()

    def _log_start_moved(self) -> None:
        assert self.sp.log_start_moved(self.log_start) == StateChange()
        if self.log_start > self.start:
            for o in range(self.start, min(self.log_start, self.end)):
                if self.model[o].state is S.ARCHIVING:  # its archiving cannot finish: deleted
                    del self.outcome[o]
                del self.model[o]
            self.start = self.log_start
            self.end = max(self.end, self.start)
            self._settle()

    # ------------------------------------------------------------------ fetching

    def _fetch(self, member: str, max_records: int, batch_size: int) -> tuple[AcquiredRange, ...]:
        offset = self.sp.next_fetch_offset()
        assert offset == self._next_fetch_offset()
        if offset < self.log_start:  # the read answers OFFSET_OUT_OF_RANGE
            self._log_start_moved()
            offset = self.sp.next_fetch_offset()
            assert offset == self._next_fetch_offset()
        read = [b for b in self.log if b.last_offset >= offset]
        window_before = self.end - self.start
        available_before = sorted(o for o, r in self.model.items() if r.state is S.AVAILABLE)
        result = self.sp.acquire(member, offset, read, max_records, batch_size, self.now)
        acquired = [o for r in result.ranges for o in range(r.first, r.last + 1)]
        assert acquired == sorted(set(acquired))
        # The soft limit: whole batches, never a batch begun with the budget spent.
        assert result.count <= max_records + MAX_BATCH - 1
        for prev, cur in zip(result.ranges, result.ranges[1:], strict=False):
            if prev.last + 1 == cur.first and prev.delivery_count == cur.delivery_count:
                assert any(b.base_offset == cur.first for b in self.log)  # cut at a batch
                assert prev.last - prev.first + 1 >= batch_size
        deadline = self.now + CONFIG.lock_duration_ms
        for r in result.ranges:
            for o in range(r.first, r.last + 1):
                assert o not in self.outcome, f"offset {o} ({self.outcome.get(o)}) acquired again"
                assert o not in self.control and o not in self.missing and self.log_start <= o < self.hwm
                if o < self.end:
                    rec = self.model[o]
                    assert rec.state is S.AVAILABLE and r.delivery_count == rec.count + 1
                else:
                    assert r.delivery_count == 1
                assert r.delivery_count <= CONFIG.delivery_count_limit
                self.model[o] = Rec(S.ACQUIRED, r.delivery_count, member, deadline)
        # Available records not acquired stay so, unless the read showed them gone.
        for o in available_before:
            if self.model[o].state is S.AVAILABLE:
                now = self.sp.state_of(o)
                if now is None or now.state is S.ARCHIVED:
                    assert o in self.missing and o >= offset, f"offset {o} archived"
                    self.model[o] = Rec(S.ARCHIVED, self.model[o].count)
                    self.outcome[o] = "missing"
        # New offsets not acquired are markers or gone, archived; the window ends with a batch
        # or with the offsets missing before one.
        new_end = self.sp.start_offset + self.sp.in_flight_records
        for o in range(self.end, new_end):
            if o not in self.model:
                assert o in self.control or o in self.missing
                self.model[o] = Rec(S.ARCHIVED, 0)
                self.outcome[o] = "control" if o in self.control else "missing"
        assert all(o < new_end for o in acquired)
        if new_end > self.end:
            assert any(b.last_offset == new_end - 1 or b.base_offset == new_end for b in self.log)
            assert window_before < CONFIG.max_in_flight_records, "a full window grew"
        self.end = new_end
        self._settle()
        # No progress only when nothing can be delivered.
        if not result.ranges and not result.changed:
            assert not available_before
            assert self.end >= self.hwm or window_before >= CONFIG.max_in_flight_records
        self._persist(StateChange(changed=result.changed))
        return result.ranges

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(min_value=1, max_value=10),
          batch_size=st.integers(min_value=1, max_value=8))
    def fetch(self, member: str, max_records: int, batch_size: int) -> None:
        self._fetch(member, max_records, batch_size)

    # ------------------------------------------------------------------ acknowledging

    def _expected_ack(self, member: str, batches: list[AckBatch]) -> tuple[ErrorCode, dict[int, tuple[ArchiveReason, int]]]:
        """Kafka's rules, offset by offset, on a copy of the model; applied if they pass."""
        prev = -1
        for b in batches:
            if b.first > b.last or b.first < prev or not b.types or \
                    (len(b.types) > 1 and len(b.types) != b.last - b.first + 1) or \
                    any(t < 0 or t > REJECT for t in b.types):
                return ErrorCode.invalid_request, {}
            prev = b.last
        saved = (dict(self.model), dict(self.outcome))
        reasons: dict[int, tuple[ArchiveReason, int]] = {}
        for b in batches:
            if b.last < self.start:
                continue
            if self.start == self.end:
                error = ErrorCode.invalid_record_state
            elif b.last >= self.end:
                error = ErrorCode.invalid_request
            else:
                error = ErrorCode.none
                for o in range(max(b.first, self.start), b.last + 1):
                    rec = self.model[o]
                    if rec.state is not S.ACQUIRED or rec.owner != member:
                        error = ErrorCode.invalid_record_state
                        break
                    t = b.types[0] if len(b.types) == 1 else b.types[o - b.first]
                    if t == ACCEPT:
                        self.model[o] = Rec(S.ACKNOWLEDGED, rec.count)
                        self.outcome[o] = "accepted"
                    elif t == RELEASE:
                        self._release(o, reasons)
                    elif t == REJECT:
                        self.model[o] = Rec(self._archived, rec.count)
                        reasons[o] = (ArchiveReason.REJECTED, rec.count)
                        self.outcome[o] = "rejected"
                    else:
                        self.model[o] = Rec(S.ARCHIVED, rec.count)
                        self.outcome[o] = "gap"
            if error is not ErrorCode.none:
                self.model, self.outcome = saved
                return error, {}
        self._settle()
        return ErrorCode.none, reasons

    def _ack(self, member: str, batches: list[AckBatch]) -> None:
        change = self.sp.acknowledge(member, batches, self.now)
        error, reasons = self._expected_ack(member, batches)
        assert change.error == error, (batches, change)
        assert self._reports(change.archived) == reasons
        if error is not ErrorCode.none:
            assert change == StateChange(error)
        self._persist(change)

    @rule(data=st.data(), member=st.sampled_from(MEMBERS),
          spoil=st.sampled_from([None, None, "overlap", "past-end", "foreign"]))
    def acknowledge_own_records(self, data: st.DataObject, member: str, spoil: str | None) -> None:
        """Good acknowledgements of the member's records, maybe followed by a bad batch
        (then none of them counts)."""
        owned = sorted(o for o, r in self.model.items() if r.state is S.ACQUIRED and r.owner == member)
        batches: list[AckBatch] = []
        i = 0
        while i < len(owned) and len(batches) < 3:
            i = data.draw(st.integers(min_value=i, max_value=len(owned) - 1))
            j = i
            while j + 1 < len(owned) and owned[j + 1] == owned[j] + 1 and j - i < 6:
                j += 1
            j = data.draw(st.integers(min_value=i, max_value=j))
            n = owned[j] - owned[i] + 1
            types = data.draw(st.lists(st.sampled_from([GAP, ACCEPT, RELEASE, REJECT]),
                                       min_size=n, max_size=n) | st.lists(
                st.sampled_from([ACCEPT, ACCEPT, RELEASE, REJECT, GAP]), min_size=1, max_size=1))
            batches.append(AckBatch(owned[i], owned[j], types))
            i = j + 1 + data.draw(st.integers(min_value=0, max_value=2))
        if batches and spoil == "overlap":
            batches.append(AckBatch(batches[-1].last, batches[-1].last, [ACCEPT]))
        elif batches and spoil == "past-end":
            batches.append(AckBatch(max(batches[-1].last + 1, self.end - 1), self.end, [ACCEPT]))
        elif batches and spoil == "foreign":
            foreign = [o for o, r in self.model.items() if o > batches[-1].last and r.owner != member]
            if foreign:
                batches.append(AckBatch(foreign[0], foreign[0], [REJECT]))
        if batches:
            self._ack(member, batches)

    @rule(data=st.data(), member=st.sampled_from(MEMBERS), per_offset=st.booleans())
    def acknowledge_window_records(self, data: st.DataObject, member: str, per_offset: bool) -> None:
        """Well-formed acknowledgements of offsets around the window: other members'
        records, available or done ones, offsets below the start or past the end."""
        first = data.draw(st.integers(min_value=self.start - 3, max_value=self.end + 2))
        last = data.draw(st.integers(min_value=first, max_value=first + 5))
        kinds = st.sampled_from([GAP, ACCEPT, RELEASE, REJECT])
        n = last - first + 1 if per_offset else 1
        self._ack(member, [AckBatch(first, last, data.draw(st.lists(kinds, min_size=n, max_size=n)))])

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(min_value=1, max_value=10))
    def fetch_and_release(self, member: str, max_records: int) -> None:
        """A consumer that cannot process its records: they come back, and back."""
        ranges = self._fetch(member, max_records, 5)
        if ranges:
            self._ack(member, [AckBatch(r.first, r.last, [RELEASE]) for r in ranges])

    @rule(member=st.sampled_from(MEMBERS), first=st.integers(min_value=-2, max_value=40),
          length=st.integers(min_value=-1, max_value=5),
          types=st.lists(st.integers(min_value=-1, max_value=5), min_size=0, max_size=4),
          again=st.booleans())
    def acknowledge_anything(self, member: str, first: int, length: int, types: list[int], again: bool) -> None:
        batches = [AckBatch(first, first + length, types)]
        if again:
            batches.append(AckBatch(first + length, first + length + 2, [ACCEPT]))
        self._ack(member, batches)

    # ------------------------------------------------------------------ sessions and time

    @rule(member=st.sampled_from(MEMBERS))
    def release_member(self, member: str) -> None:
        change = self.sp.release_member(member)
        reasons: dict[int, tuple[ArchiveReason, int]] = {}
        for o, r in sorted(self.model.items()):
            if r.state is S.ACQUIRED and r.owner == member:
                self._release(o, reasons)
        self._settle()
        assert self._reports(change.archived) == reasons
        self._persist(change)

    @rule(ms=st.sampled_from([1, 50, 99, 100, 101, 150]))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    @rule()
    def expire_locks(self) -> None:
        expected = min((r.deadline for r in self.model.values() if r.deadline is not None), default=None)
        assert self.sp.next_lock_deadline() == expected
        change = self.sp.expire_locks(self.now)
        reasons: dict[int, tuple[ArchiveReason, int]] = {}
        for o, r in sorted(self.model.items()):
            if r.state is S.ACQUIRED and r.deadline is not None and r.deadline <= self.now:
                self._release(o, reasons)
        self._settle()
        assert self._reports(change.archived) == reasons
        self._persist(change)

    # ------------------------------------------------------------------ leader changes

    @rule(fresh=st.booleans())
    def reload(self, fresh: bool) -> None:
        """A new leader loads the snapshot written last (or one taken now): acquisitions
        since are undone, sessions are gone, and so is archiving whose dead letter was not
        written (ARCHIVING is never written): the record is durably what it was, AVAILABLE
        with its delivery count or, read after that snapshot, not read at all."""
        unwritten = {o for o, r in self.model.items() if r.state is S.ARCHIVING}
        snapshot = self.sp.snapshot() if fresh else self.persisted
        model, start, end = (dict(self.model), self.start, self.end) if fresh else self.persisted_model
        if snapshot.start_offset < 0:
            model, start, end = {}, self.log_start, self.log_start
        self.sp = SharePartition(CONFIG, dead_letter=self.DEAD_LETTER)
        change = self.sp.initialize(snapshot, self.log_start)
        self.model, self.start, self.end, reasons = self._reloaded(model, start, end)
        assert self._reports(change.archived) == reasons
        for o, r in self.model.items():  # archiving without its dead letter written: undone
            if r.state is S.AVAILABLE and self.outcome.get(o) in ("rejected", "limit"):
                del self.outcome[o]
        for o, (reason, _) in reasons.items():
            self.outcome[o] = "limit" if reason is ArchiveReason.DELIVERY_LIMIT else "rejected"
        # Offsets past the snapshot are new again: only markers can have ended there (they
        # are read and archived again), or archiving not written; anything accepted,
        # rejected... was written.
        for o in [o for o in self.outcome if o >= self.end]:
            assert self.outcome[o] in ("control", "missing") or o in unwritten, \
                f"offset {o} ({self.outcome[o]}) lost"
            del self.outcome[o]
        self._persist(change)

    # ------------------------------------------------------------------ dead letters

    @rule(data=st.data())
    def dead_letters_written(self, data: st.DataObject) -> None:
        """The caller wrote the dead letters of some archiving records (a range of offsets,
        which may take in others)."""
        archiving = sorted(o for o, r in self.model.items() if r.state is S.ARCHIVING)
        if not archiving:
            return
        first = data.draw(st.sampled_from(archiving)) - data.draw(st.integers(0, 2))
        last = data.draw(st.integers(first, first + 6))
        change = self.sp.dead_lettered(first, last)
        for o in archiving:
            if first <= o <= last:
                self.model[o] = Rec(S.ARCHIVED, self.model[o].count)
        self._settle()
        self._persist(change)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def the_share_partition_is_the_model(self) -> None:
        runs = self.sp.in_flight()
        assert (self.sp.start_offset, self.sp.in_flight_records) == (self.start, self.end - self.start)
        expanded: Model = {}
        for r in runs:
            assert (r.state is S.ACQUIRED) == (r.member_id is not None) == (r.deadline_ms is not None)
            for o in range(r.first, r.last + 1):
                expanded[o] = Rec(r.state, r.delivery_count, r.member_id, r.deadline_ms)
        assert expanded == self.model
        if runs:
            assert [r.first for r in runs] == [self.start] + [r.last + 1 for r in runs[:-1]]
            assert not runs[0].state.terminal
        for r in runs:
            assert r.delivery_count <= CONFIG.delivery_count_limit
            assert r.state is not S.AVAILABLE or r.delivery_count < CONFIG.delivery_count_limit
        # Past the limit by at most a batch, or by offsets missing from the log.
        missing = sum(o in self.missing for o in self.model)
        assert self.sp.in_flight_records <= CONFIG.max_in_flight_records + MAX_BATCH - 1 + missing
        assert self.sp.delivery_complete_count == sum(r.state.terminal for r in self.model.values())
        assert self.sp.acquired_records == sum(r.state is S.ACQUIRED for r in self.model.values())
        assert self.sp.archiving_records == sum(r.state is S.ARCHIVING for r in self.model.values())
        if not self.DEAD_LETTER:
            assert self.sp.archiving_records == 0
        assert self.sp.lag(self.hwm) == max(0, self.hwm - self.start - self.sp.delivery_complete_count)

    @invariant()
    def a_snapshot_loaded_now_is_the_model_without_acquisitions(self) -> None:
        probe = SharePartition(CONFIG, dead_letter=self.DEAD_LETTER)
        snapshot = self.sp.snapshot()
        change = probe.initialize(snapshot, 0)
        model, start, end, reasons = self._reloaded(self.model, self.start, self.end)
        assert self._reports(change.archived) == reasons
        assert probe.start_offset == start and probe.in_flight_records == end - start
        assert {o: Rec(r.state, r.delivery_count) for r in probe.in_flight()
                for o in range(r.first, r.last + 1)} == model
        assert snapshot.delivery_complete_count == self.sp.delivery_complete_count

    # ------------------------------------------------------------------ no loss

    def teardown(self) -> None:
        """Consumers that accept everything drain the partition: every offset below the
        high watermark ends accepted, archived for a reason, or deleted."""
        self.now += 10 * CONFIG.lock_duration_ms
        self.expire_locks()
        for _ in range(self.hwm + 5):
            self.sp.dead_lettered(self.start, self.end)  # every dead letter gets written
            for o, r in list(self.model.items()):
                if r.state is S.ARCHIVING:
                    self.model[o] = Rec(S.ARCHIVED, r.count)
            self._settle()
            ranges = self._fetch("drainer", 10, 4)
            if ranges:
                self._ack("drainer", [AckBatch(r.first, r.last, [ACCEPT]) for r in ranges])
            elif self.sp.next_fetch_offset() >= self.hwm:
                break
        assert self.sp.start_offset == max(self.hwm, self.log_start), "records left undelivered"
        for o in range(self.hwm):
            assert o in self.outcome or o < self.log_start, f"offset {o} lost"
            if o in self.control:
                assert self.outcome.get(o, "control") == "control"


SharePartitionMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
test_share_partition_state_machine = SharePartitionMachine.TestCase


class DeadLetterMachine(SharePartitionMachine):
    DEAD_LETTER = True


DeadLetterMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
test_share_partition_state_machine_with_a_dead_letter_topic = DeadLetterMachine.TestCase


def test_a_reload_does_not_redeliver_accepted_records() -> None:
    """The property's core, spelled out: accept, reload the written state, fetch."""
    sp = SharePartition(CONFIG)
    sp.initialize(None, 0)
    log = [LogBatch(0, 4), LogBatch(5, 9)]
    sp.acquire("a", 0, log, 10, 10, 0)
    change = sp.acknowledge("a", [AckBatch(0, 2, [ACCEPT]), AckBatch(3, 4, [RELEASE])], 0)
    assert change.persist
    written = sp.snapshot()
    reloaded = SharePartition(CONFIG)
    reloaded.initialize(written, 0)
    ranges = reloaded.acquire("b", reloaded.next_fetch_offset(), log, 10, 10, 0).ranges
    assert ranges == (AcquiredRange(3, 9, 2),)  # 5-9 were acquired, not written: counted
