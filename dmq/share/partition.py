"""SharePartition: the delivery state of one share-partition (share group x topic-partition)
on the partition's leader, as a pure state machine (Kafka's ``SharePartition``, KIP-932).

Every record of the partition from the share-partition start offset (SPSO) on is in one
of four states (Kafka's ``RecordState``; the numbers are persisted)::

    AVAILABLE (0)     may be handed to a consumer
    ACQUIRED (1)      handed to one member, locked until a deadline; never persisted
    ACKNOWLEDGED (2)  accepted by the consumer: done
    ARCHIVED (4)      done without being accepted: rejected, delivered too often, a gap
                      (a control record, an offset compaction removed) or below the log start
    ARCHIVING (100)   dmq's: rejected or delivered too often in a group with a dead-letter
                      topic, waiting for its dead letter to be written; never persisted

Legal moves (``TRANSITIONS``; ``InFlightRange.transition_to()`` is the only way a
record's state changes)::

    AVAILABLE -> ACQUIRED (delivery count + 1), ARCHIVED, ARCHIVING
    ACQUIRED  -> AVAILABLE, ACKNOWLEDGED, ARCHIVED, ARCHIVING
    ARCHIVING -> ARCHIVED (its dead letter is written, or can never be)
    ACKNOWLEDGED, ARCHIVED: terminal

A record moving to AVAILABLE (a RELEASE acknowledgement, its lock expiring, its member's
session closing) whose delivery count has reached ``delivery_count_limit`` is ARCHIVED
instead, so a record is delivered at most ``delivery_count_limit`` times. With
``dead_letter`` set (the group has a dead-letter topic), a record that would be archived
for a reason (REJECT, the delivery limit) goes to ARCHIVING instead, and is reported in
``StateChange.archived``; the caller writes its dead letter and then calls
``dead_lettered``. ARCHIVING is not terminal: the start offset waits for it, no one
acquires or acknowledges it. Durably it is what it was (AVAILABLE with its delivery
count), so a new leader knows nothing of it: see docs/share-groups.md on the dead-letter
topic's ordering. Offsets past
the in-flight window have never been read; the window grows as ``acquire`` reads them,
each entering as AVAILABLE with delivery count 0 and moving on at once (to ACQUIRED, or
to ARCHIVED for control batches and offsets the log does not have).

The in-flight window is ``[start_offset, end)``: a sorted list of ``InFlightRange``
runs, each a range of offsets sharing state, delivery count, owner and lock deadline.
Adjacent equal runs are merged, so the usual whole-batch acquisitions and
acknowledgements keep the list short; a per-offset acknowledgement splits runs only where
the state differs.

dmq differs from Kafka in a few places, on purpose:

- Control batches (transaction markers) and offsets missing from the log (compaction)
  are ARCHIVED when they are read instead of being acquired for the client to
  acknowledge as GAP. A GAP acknowledgement still archives, as in Kafka.
- ``snapshot()`` is the whole window, each ACQUIRED record persisted as AVAILABLE with
  its delivery count (see ``snapshot``); Kafka writes only changed ranges and leaves
  acquired records out.
- Persisted AVAILABLE records whose delivery count has reached the limit are archived
  when loaded (Kafka would deliver them once more).
- Records acquired that the log start moves past are dropped from the window at once
  (Kafka leaves them acquired until their lock expires; acknowledgements of offsets
  below the start are ignored either way).

Only the task owning a share-partition calls it (the share-partition manager serialises
operations per share-partition); nothing here awaits, reads a clock or touches the log:
the caller passes ``now_ms``, the log batches it read and the log start.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum, IntEnum
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from dmq.share.records import UNKNOWN_DELIVERY_COMPLETE_COUNT, StateBatch


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4
    ARCHIVING = 100  # dmq's, in memory only

    @property
    def terminal(self) -> bool:
        return self in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


S = RecordState
TRANSITIONS: dict[RecordState, frozenset[RecordState]] = {
    S.AVAILABLE: frozenset({S.ACQUIRED, S.ARCHIVED, S.ARCHIVING}),
    S.ACQUIRED: frozenset({S.AVAILABLE, S.ACKNOWLEDGED, S.ARCHIVED, S.ARCHIVING}),
    S.ARCHIVING: frozenset({S.ARCHIVED}),
    S.ACKNOWLEDGED: frozenset(),
    S.ARCHIVED: frozenset(),
}


class AcknowledgeType(IntEnum):
    """ShareFetch/ShareAcknowledge AcknowledgeTypes (RENEW: v2, ``is_renew_ack`` only)."""
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class ArchiveReason(Enum):
    """Why records holding data were archived (what a dead-letter topic needs to know)."""
    REJECTED = "rejected"              # a REJECT acknowledgement
    DELIVERY_LIMIT = "delivery-limit"  # released or timed out with the delivery count at the limit


class IllegalStateTransition(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class SharePartitionConfig:
    max_in_flight_records: int = 2000  # group.share.partition.max.record.locks
    delivery_count_limit: int = 5      # group.share.delivery.count.limit
    lock_duration_ms: int = 30_000     # share.record.lock.duration.ms (group.share.record.lock.duration.ms)


@dataclass(frozen=True, slots=True)
class InFlightRange:
    """Offsets ``first..last`` (inclusive) sharing one state, delivery count and, while
    ACQUIRED, one owner, lock deadline and acquiring session.

    ``session_id`` tells apart acquisitions of one member made in different share
    sessions (its connection dropped and it opened a new one): a session that goes
    releases only what it acquired. It is None when not ACQUIRED, or when the
    acquisition named no session; it is never persisted. Acknowledgements go by
    ``member_id`` alone, as Kafka's."""
    first: int
    last: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    deadline_ms: int | None = None
    session_id: int | None = None

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def transition_to(self, target: RecordState, *, delivery_count: int | None = None,
                      member_id: str | None = None, deadline_ms: int | None = None,
                      session_id: int | None = None) -> InFlightRange:
        """The records in ``target``: an owner and a deadline exactly when ACQUIRED (and
        the acquiring session, if any, only then)."""
        if target not in TRANSITIONS[self.state]:
            raise IllegalStateTransition(
                f"offsets {self.first}-{self.last}: illegal transition {self.state.name} -> {target.name}")
        acquired = target is S.ACQUIRED
        if acquired and (member_id is None or deadline_ms is None):
            raise IllegalStateTransition("ACQUIRED records need an owner and a lock deadline")
        return InFlightRange(self.first, self.last, target,
                             self.delivery_count if delivery_count is None else delivery_count,
                             member_id if acquired else None, deadline_ms if acquired else None,
                             session_id if acquired else None)

    def renewed(self, deadline_ms: int) -> InFlightRange:
        """A RENEW acknowledgement: the lock restarts, the state stays ACQUIRED."""
        if self.state is not S.ACQUIRED:
            raise IllegalStateTransition(f"offsets {self.first}-{self.last}: only ACQUIRED locks renew")
        return replace(self, deadline_ms=deadline_ms)

    def _same_run(self, other: InFlightRange) -> bool:
        return (self.state, self.delivery_count, self.member_id, self.deadline_ms, self.session_id) == \
            (other.state, other.delivery_count, other.member_id, other.deadline_ms, other.session_id)


class LogBatch(NamedTuple):
    """A record batch of the log, as read: its offsets and whether it is a control batch
    (never delivered; see ``SharePartition.acquire``)."""
    base_offset: int
    last_offset: int
    is_control: bool = False


def aborted_as_control(batches: Sequence[tuple[LogBatch, int, bool]],
                       aborted: Sequence[tuple[int, int]]) -> list[LogBatch]:
    """read_committed: ``batches`` (a log batch, its producer id, whether it is
    transactional) as ``acquire`` takes them, every batch of an aborted transaction made a
    control batch (archived, never delivered), as Kafka's share-partition does.
    ``aborted``: the read's aborted transactions, (producer id, first offset), as a
    read_committed fetch returns them. A producer's batches are aborted from its
    transaction's first offset until its ABORT marker (Kafka's consumer-side rule)."""
    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    k = 0
    out: list[LogBatch] = []
    for batch, producer_id, transactional in batches:
        if not transactional:
            out.append(batch)
            continue
        while k < len(pending) and pending[k][1] <= batch.last_offset:
            aborting.add(pending[k][0])
            k += 1
        if batch.is_control:
            aborting.discard(producer_id)  # its marker ends the transaction, whatever its kind
            out.append(batch)
        elif producer_id in aborting:
            out.append(batch._replace(is_control=True))
        else:
            out.append(batch)
    return out


class AckBatch(NamedTuple):
    """An AcknowledgementBatch: one type for the whole range, or one per offset."""
    first: int
    last: int
    types: Sequence[int]


class AcquiredRange(NamedTuple):
    """An AcquiredRecords entry of a ShareFetch response."""
    first: int
    last: int
    delivery_count: int


class ArchivedRange(NamedTuple):
    first: int
    last: int
    reason: ArchiveReason
    delivery_count: int


@dataclass(frozen=True, slots=True)
class PersistedState:
    """A share-partition's durable state (what a ShareSnapshot holds): start offset -1 is
    "not initialized" (the reset policy decides where to start)."""
    start_offset: int
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT


@dataclass(frozen=True, slots=True)
class StateChange:
    """What an operation did. ``changed``: the new durable state of the offsets it changed
    (coalesced, ShareUpdate-style batches; a full ``snapshot()`` covers them too).
    ``archived``: records archived because of a REJECT or the delivery limit, for a
    dead-letter topic. ``error``: an acknowledgement's error; nothing changed then."""
    error: ErrorCode = ErrorCode.none
    changed: tuple[StateBatch, ...] = ()
    archived: tuple[ArchivedRange, ...] = ()

    @property
    def persist(self) -> bool:
        return bool(self.changed)


@dataclass(frozen=True, slots=True)
class AcquireResult:
    """Records acquired, in AcquiredRecords ranges; ``changed``: offsets archived while
    reading (control batches, offsets missing from the log) — worth persisting, though
    lazily is fine (a reload only reads and archives them again)."""
    ranges: tuple[AcquiredRange, ...] = ()
    changed: tuple[StateBatch, ...] = ()

    @property
    def persist(self) -> bool:
        return bool(self.changed)

    @property
    def count(self) -> int:
        return sum(r.last - r.first + 1 for r in self.ranges)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The whole in-memory state, to undo an acknowledgement whose write failed."""
    start: int
    end: int
    runs: tuple[InFlightRange, ...]


def validate_acknowledgement_batches(batches: Sequence[AckBatch], is_renew_ack: bool = False) -> ErrorCode:
    """Kafka's per-partition checks of a request's AcknowledgementBatches (KafkaApis
    ``validateAcknowledgementBatches``): INVALID_REQUEST, else NONE."""
    prev_last = -1
    max_type = AcknowledgeType.RENEW if is_renew_ack else AcknowledgeType.REJECT
    for b in batches:
        if b.first > b.last or b.first < prev_last or not b.types:
            return ErrorCode.invalid_request
        if len(b.types) > 1 and b.last - b.first + 1 != len(b.types):
            return ErrorCode.invalid_request
        if any(t < 0 or t > max_type for t in b.types):
            return ErrorCode.invalid_request
        prev_last = b.last
    return ErrorCode.none


def _first(r: InFlightRange) -> int:
    return r.first


class _Changes:
    def __init__(self) -> None:
        self.changed: list[InFlightRange] = []
        self.archived: list[ArchivedRange] = []

    def add(self, r: InFlightRange, reason: ArchiveReason | None = None) -> InFlightRange:
        if r.state is not S.ARCHIVING:  # durably still what it was: nothing to write yet
            self.changed.append(r)
        if reason is not None:
            self.archived.append(ArchivedRange(r.first, r.last, reason, r.delivery_count))
        return r

    def batches(self) -> tuple[StateBatch, ...]:
        return _coalesced_batches(sorted(self.changed, key=_first))

    def result(self) -> StateChange:
        archived: list[ArchivedRange] = []
        for a in sorted(self.archived, key=lambda a: a.first):
            if archived and archived[-1].last + 1 == a.first and archived[-1][2:] == a[2:]:
                archived[-1] = archived[-1]._replace(last=a.last)
            else:
                archived.append(a)
        return StateChange(ErrorCode.none, self.batches(), tuple(archived))


def _coalesced_batches(runs: Sequence[InFlightRange]) -> tuple[StateBatch, ...]:
    """Runs in their durable form: ACQUIRED is written as AVAILABLE with its delivery count."""
    out: list[StateBatch] = []
    for r in runs:
        state = S.AVAILABLE if r.state in (S.ACQUIRED, S.ARCHIVING) else r.state
        if out and out[-1].last_offset + 1 == r.first and out[-1].delivery_state == state \
                and out[-1].delivery_count == r.delivery_count:
            out[-1] = replace(out[-1], last_offset=r.last)
        else:
            out.append(StateBatch(r.first, r.last, int(state), r.delivery_count))
    return tuple(out)


class SharePartition:
    """One share-partition's in-flight records.

    Invariants (after every operation):

    - The runs are sorted, contiguous and cover exactly ``[start_offset, end)``; every
      offset below ``start_offset`` is done. When the window is not empty its first
      record is not terminal: ``start_offset`` <= every non-terminal offset, and the
      start moves over leading terminal records as soon as they appear.
    - A record is ACQUIRED exactly when it has an owner (member id) and a lock deadline;
      no record has two owners. Only ACQUIRED records carry a session id.
    - An AVAILABLE record's delivery count is below ``delivery_count_limit``; an ACQUIRED
      one's is at most the limit (acquiring adds one). Delivery counts never exceed the
      limit unless a persisted state loaded had them so.
    - ``acquire`` extends the window (by a log batch, or by offsets the read shows missing)
      only while it holds fewer than ``max_in_flight_records`` offsets and the request's
      record budget is not spent: the window exceeds the limit by at most its last
      extension (whole batches are acquired), or when a loaded state was already larger;
      inside a full window it acquires only released records.
    - ACKNOWLEDGED records are never acquired again, and ARCHIVED records are never
      delivered again.

    Only the task owning the share-partition calls it; nothing is thread-safe or async.
    """

    def __init__(self, config: SharePartitionConfig | None = None, *, dead_letter: bool = False) -> None:
        self.config = config or SharePartitionConfig()
        # The group has a dead-letter topic: records archived for a reason go to ARCHIVING
        # (the caller may change it between operations, as the group's config changes).
        self.dead_letter = dead_letter
        self._start = -1
        self._end = -1  # one past the last in-flight offset; == _start when nothing is in flight
        self._runs: list[InFlightRange] = []
        self._initialized = False

    # ------------------------------------------------------------------ loading

    def initialize(self, state: PersistedState | None, reset_offset: int) -> StateChange:
        """Load a persisted state, or start afresh at ``reset_offset`` (what the caller
        resolved from ``share.auto.offset.reset``) when there is none or it is not
        initialized (start offset -1). Replaces whatever was in memory.

        Persisted batches below the start offset are dropped (they are done), offsets
        between batches are AVAILABLE with delivery count 0 (never delivered, as far as
        the state says), ACQUIRED (1) loads as AVAILABLE, and AVAILABLE records at the
        delivery limit are archived (reported: their last delivery's fate is unknown, so
        it counts). Raises ValueError for an unusable state: an unknown delivery state, a
        negative delivery count, a batch ending before it starts, overlapping batches.
        """
        start = state.start_offset if state is not None and state.start_offset >= 0 else reset_offset
        if start < 0:
            raise ValueError(f"no start offset: persisted {state} and reset offset {reset_offset}")
        runs: list[InFlightRange] = []
        end = start
        for b in sorted(state.state_batches if state is not None else (), key=lambda b: b.first_offset):
            if b.last_offset < b.first_offset:
                raise ValueError(f"state batch {b} ends before it starts")
            try:
                persisted = RecordState(b.delivery_state)
            except ValueError:
                raise ValueError(f"state batch {b} has an unknown delivery state") from None
            if b.delivery_count < 0:
                raise ValueError(f"state batch {b} has a negative delivery count")
            if b.last_offset < start:
                continue
            first = max(b.first_offset, start)
            if first < end:
                raise ValueError(f"state batch {b} overlaps an earlier one")
            if first > end:
                runs.append(InFlightRange(end, first - 1, S.AVAILABLE, 0))
            runs.append(InFlightRange(first, b.last_offset,
                                      S.AVAILABLE if persisted is S.ACQUIRED else persisted, b.delivery_count))
            end = b.last_offset + 1
        self._start, self._end, self._runs = start, end, runs
        self._initialized = True
        changes = _Changes()
        limit = self.config.delivery_count_limit
        for i, r in enumerate(self._runs):
            if r.state is S.AVAILABLE and r.delivery_count >= limit:
                self._runs[i] = changes.add(r.transition_to(self._archive_target), ArchiveReason.DELIVERY_LIMIT)
        self._settle()
        return changes.result()

    @property
    def initialized(self) -> bool:
        return self._initialized

    def _require_initialized(self) -> None:
        if not self._initialized:
            raise RuntimeError("the share-partition is not initialized")

    # ------------------------------------------------------------------ reading

    @property
    def start_offset(self) -> int:
        """SPSO: every offset below it is done."""
        return self._start

    @property
    def end_offset(self) -> int:
        """SPEO as Kafka reports it: the last in-flight offset, or the start offset when
        nothing is in flight."""
        return self._end - 1 if self._runs else self._start

    def next_fetch_offset(self) -> int:
        """Where the next log read starts: the first AVAILABLE record in flight, else the
        first offset past the window."""
        self._require_initialized()
        for r in self._runs:
            if r.state is S.AVAILABLE:
                return r.first
        return self._end

    def next_lock_deadline(self) -> int | None:
        """The earliest lock deadline of an ACQUIRED record, for the caller's timer."""
        deadlines = [r.deadline_ms for r in self._runs if r.deadline_ms is not None]
        return min(deadlines) if deadlines else None

    def in_flight(self) -> tuple[InFlightRange, ...]:
        """The window's runs, in offset order."""
        return tuple(self._runs)

    def state_of(self, offset: int) -> InFlightRange | None:
        """The run holding ``offset``; None outside the window."""
        if not self._start <= offset < self._end:
            return None
        return self._runs[self._index(offset)]

    @property
    def in_flight_records(self) -> int:
        return self._end - self._start

    @property
    def acquired_records(self) -> int:
        return sum(r.size for r in self._runs if r.state is S.ACQUIRED)

    @property
    def delivery_complete_count(self) -> int:
        """Offsets at or past the start offset whose delivery is complete (KIP-1226)."""
        return sum(r.size for r in self._runs if r.state.terminal)

    def lag(self, high_watermark: int) -> int:
        """DescribeShareGroupOffsets' lag: records below the high watermark still to be
        delivered (never negative)."""
        return max(0, high_watermark - self._start - self.delivery_complete_count)

    def snapshot(self) -> PersistedState:
        """The durable form of the whole window, to be written as a ShareSnapshot.

        ACQUIRED records are written as AVAILABLE with their delivery count. A new leader
        has none of this leader's sessions or locks, so for it they are available again;
        keeping the count (the delivery was made and may have crashed its consumer)
        keeps a record from being delivered more than ``delivery_count_limit`` times
        across leader changes, and writing them keeps the snapshot free of holes, so a
        reload needs no gap tracking. Records acquired after the last write are not in
        it and count from 1 again after a reload, as in Kafka.
        """
        self._require_initialized()
        return PersistedState(self._start, _coalesced_batches(self._runs), self.delivery_complete_count)

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self._start, self._end, tuple(self._runs))

    def restore(self, checkpoint: Checkpoint) -> None:
        """Back to a checkpoint: an acknowledgement whose write failed is undone (Kafka
        rolls the records back to ACQUIRED; a lock that expired meanwhile is then expired
        by the next ``expire_locks``)."""
        self._start, self._end, self._runs = checkpoint.start, checkpoint.end, list(checkpoint.runs)

    # ------------------------------------------------------------------ acquiring

    def acquire(self, member_id: str, fetch_offset: int, batches: Sequence[LogBatch], max_records: int,
                batch_size: int, now_ms: int, *, lock_duration_ms: int | None = None,
                session_id: int | None = None) -> AcquireResult:
        """Acquire records for ``member_id`` from ``batches``: the log batches (whole,
        ascending, as a log read returns them) read from ``fetch_offset``, normally
        ``next_fetch_offset()``, up to the high watermark (or the last stable offset).

        As Kafka: the record budget is ``max_records`` less what the window lacks for
        ``max_in_flight_records`` (a full window acquires only released records inside
        it); batch by batch, AVAILABLE records in flight are re-acquired (delivery count
        + 1) and records past the window are acquired (delivery count 1), whole log batches
        at a time until the budget is spent (a soft limit: the last batch is taken
        whole). The ranges are split at log batch boundaries once they hold
        ``batch_size`` records. Control batches, and offsets the read shows missing
        (before the first batch and between batches), are archived, never delivered;
        under read_committed the caller passes aborted transactions' batches as control
        batches (Kafka archives those too). Each acquired record is locked until
        ``now_ms + lock_duration_ms`` and tagged with ``session_id`` (the share session
        of the fetch; see ``release_member``). A read from past the window's end (the state moved
        back since it started, e.g. a re-initialization) acquires nothing. Raises
        ValueError for batches out of order and a batch size below 1.
        """
        self._require_initialized()
        if batch_size < 1:
            raise ValueError(f"batch size {batch_size}")
        for prev, cur in zip(batches, batches[1:], strict=False):
            if cur.base_offset <= prev.last_offset:
                raise ValueError("log batches must ascend without overlapping")
        if any(b.base_offset > b.last_offset for b in batches):
            raise ValueError("a log batch ends before it starts")
        if fetch_offset > self._end:
            return AcquireResult()  # read from past the window (the state changed since): it proves nothing
        if not batches or max_records <= 0 or batches[-1].last_offset < self._start:
            return AcquireResult()
        budget = min(max_records, self.config.max_in_flight_records - self.in_flight_records)
        last_to_acquire = batches[-1].last_offset
        if budget <= 0:
            if not self._runs or fetch_offset >= self._end:
                return AcquireResult()  # the window is full: nothing past it until records are done
            budget = min(max_records, self._end - fetch_offset)
            last_to_acquire = min(last_to_acquire, self._end - 1)
        deadline = now_ms + (self.config.lock_duration_ms if lock_duration_ms is None else lock_duration_ms)
        changes = _Changes()
        # Records in flight between the read's start and its first batch are gone from the log
        # (compaction): archived whatever the budget, or a full window could wait for them
        # forever (Kafka's maybeArchiveStaleBatches).
        if batches[0].base_offset > fetch_offset:
            self._archive_missing(max(fetch_offset, self._start), min(batches[0].base_offset, self._end) - 1,
                                  changes)
        pieces: list[tuple[InFlightRange, bool]] = []  # acquired runs; starting a log batch?
        count = 0
        prev_last = fetch_offset - 1
        for batch in batches:
            if count >= budget or batch.base_offset > last_to_acquire:
                break
            if batch.base_offset > prev_last + 1:
                count += self._archive_missing(max(prev_last + 1, self._start), batch.base_offset - 1,
                                               changes)
                if count >= budget:
                    break
            prev_last = max(prev_last, batch.last_offset)
            lo, hi = max(batch.base_offset, self._start), min(batch.last_offset, last_to_acquire)
            if lo <= hi:
                count += self._acquire_batch(lo, hi, batch, member_id, session_id, deadline, changes,
                                             pieces)
        ranges = _acquired_ranges(pieces, batch_size)
        self._settle()
        return AcquireResult(ranges, changes.batches())

    def _archive_missing(self, first: int, last: int, changes: _Changes) -> int:
        """Offsets ``first..last`` are not in the log: AVAILABLE ones in flight and new ones
        are archived. Returns how much of the budget the new ones use: all of them, as
        Kafka counts holes in flight, unless nothing before them is pending (then the
        start offset moves past them at once)."""
        if first > last:
            return 0
        assert first <= self._end, "a read never skips offsets past the window"
        inside = min(last, self._end - 1)
        if first <= inside:
            i, j = self._slice(first, inside)
            for k in range(i, j):
                if self._runs[k].state is S.AVAILABLE:
                    self._runs[k] = changes.add(self._runs[k].transition_to(S.ARCHIVED))
        if last < self._end:
            return 0
        new = self._end
        pending = any(not r.state.terminal for r in self._runs)
        self._extend(changes.add(InFlightRange(new, last, S.AVAILABLE, 0).transition_to(S.ARCHIVED)))
        return last - new + 1 if pending else 0

    def _acquire_batch(self, lo: int, hi: int, batch: LogBatch, member_id: str, session_id: int | None,
                       deadline: int, changes: _Changes, pieces: list[tuple[InFlightRange, bool]]) -> int:
        """Offsets ``lo..hi`` of one log batch. Returns the offsets it used of the budget."""
        used = 0
        inside = min(hi, self._end - 1)
        if lo <= inside:
            i, j = self._slice(lo, inside)
            for k in range(i, j):
                r = self._runs[k]
                if r.state is not S.AVAILABLE:
                    continue
                if batch.is_control:
                    self._runs[k] = changes.add(r.transition_to(S.ARCHIVED))
                    continue
                self._runs[k] = r.transition_to(S.ACQUIRED, delivery_count=r.delivery_count + 1,
                                                member_id=member_id, deadline_ms=deadline,
                                                session_id=session_id)
                pieces.append((self._runs[k], r.first == batch.base_offset))
                used += r.size
        if hi < self._end:
            return used
        assert lo <= self._end, "a batch past the window starts where the window ends"
        fresh = InFlightRange(self._end, hi, S.AVAILABLE, 0)
        if batch.is_control:
            self._extend(changes.add(fresh.transition_to(S.ARCHIVED)))
        else:
            acquired = fresh.transition_to(S.ACQUIRED, delivery_count=1, member_id=member_id,
                                           deadline_ms=deadline, session_id=session_id)
            self._extend(acquired)
            pieces.append((acquired, acquired.first == batch.base_offset))
        return used + fresh.size

    # ------------------------------------------------------------------ acknowledging

    def acknowledge(self, member_id: str, batches: Sequence[AckBatch], now_ms: int, *,
                    is_renew_ack: bool = False, lock_duration_ms: int | None = None) -> StateChange:
        """Apply one partition's acknowledgements, all or nothing.

        INVALID_REQUEST for malformed batches (``validate_acknowledgement_batches``) or
        offsets past the window; INVALID_RECORD_STATE for offsets not ACQUIRED by
        ``member_id`` (or nothing in flight). Batches wholly below the start offset are
        ignored, as are the offsets of a batch below it. GAP and REJECT archive, ACCEPT
        acknowledges, RELEASE makes records available again (archived at the delivery
        limit), RENEW restarts their lock (and changes nothing durable).
        """
        self._require_initialized()
        error = validate_acknowledgement_batches(batches, is_renew_ack)
        if error is not ErrorCode.none:
            return StateChange(error)
        saved = self.checkpoint()
        changes = _Changes()
        deadline = now_ms + (self.config.lock_duration_ms if lock_duration_ms is None else lock_duration_ms)
        for b in batches:
            error = self._acknowledge_batch(member_id, b, deadline, changes)
            if error is not ErrorCode.none:
                self.restore(saved)
                return StateChange(error)
        self._settle()
        return changes.result()

    def _acknowledge_batch(self, member_id: str, b: AckBatch, deadline: int, changes: _Changes) -> ErrorCode:
        if b.last < self._start:
            return ErrorCode.none  # already done
        if not self._runs:
            return ErrorCode.invalid_record_state
        first = max(b.first, self._start)
        if b.last >= self._end:
            return ErrorCode.invalid_request
        k = self._index(first)
        while k < len(self._runs) and self._runs[k].first <= b.last:
            r = self._runs[k]
            if r.state is not S.ACQUIRED or r.member_id != member_id:
                return ErrorCode.invalid_record_state
            k += 1
        if len(b.types) == 1:
            self._apply_ack(first, b.last, b.types[0], deadline, changes)
            return ErrorCode.none
        seg = first
        for offset in range(first + 1, b.last + 2):
            if offset > b.last or b.types[offset - b.first] != b.types[seg - b.first]:
                self._apply_ack(seg, offset - 1, b.types[seg - b.first], deadline, changes)
                seg = offset
        return ErrorCode.none

    def _apply_ack(self, first: int, last: int, ack_type: int, deadline: int, changes: _Changes) -> None:
        i, j = self._slice(first, last)
        for k in range(i, j):
            r = self._runs[k]
            if ack_type == AcknowledgeType.ACCEPT:
                self._runs[k] = changes.add(r.transition_to(S.ACKNOWLEDGED))
            elif ack_type == AcknowledgeType.RELEASE:
                self._runs[k] = self._release(r, changes)
            elif ack_type == AcknowledgeType.REJECT:
                self._runs[k] = changes.add(r.transition_to(self._archive_target), ArchiveReason.REJECTED)
            elif ack_type == AcknowledgeType.GAP:
                self._runs[k] = changes.add(r.transition_to(S.ARCHIVED))
            else:
                self._runs[k] = r.renewed(deadline)

    def _release(self, r: InFlightRange, changes: _Changes) -> InFlightRange:
        """ACQUIRED -> AVAILABLE, or ARCHIVED once delivered ``delivery_count_limit`` times."""
        if r.delivery_count >= self.config.delivery_count_limit:
            return changes.add(r.transition_to(self._archive_target), ArchiveReason.DELIVERY_LIMIT)
        return changes.add(r.transition_to(S.AVAILABLE))

    @property
    def _archive_target(self) -> RecordState:
        return S.ARCHIVING if self.dead_letter else S.ARCHIVED

    # ------------------------------------------------------------------ dead letters

    def dead_lettered(self, first: int, last: int) -> StateChange:
        """The dead letters of offsets ``first..last`` are written (or can never be): their
        ARCHIVING records are ARCHIVED; others are left alone (the log start may have
        passed them)."""
        self._require_initialized()
        first, last = max(first, self._start), min(last, self._end - 1)
        changes = _Changes()
        if first <= last:
            i, j = self._slice(first, last)
            for k in range(i, j):
                if self._runs[k].state is S.ARCHIVING:
                    self._runs[k] = changes.add(self._runs[k].transition_to(S.ARCHIVED))
        self._settle()
        return StateChange(ErrorCode.none, changes.batches())

    @property
    def archiving_records(self) -> int:
        return sum(r.size for r in self._runs if r.state is S.ARCHIVING)

    # ------------------------------------------------------------------ releasing

    def release_member(self, member_id: str, session_id: int | None = None) -> StateChange:
        """The member's share session closed (ShareFetch/ShareAcknowledge epoch -1, its
        connection dropped, it left the group): its records are available again (or
        archived at the delivery limit), their delivery counts unchanged. With
        ``session_id``, only the records that session acquired: what the same member
        acquired in another (newer) session stays ACQUIRED."""
        if session_id is None:
            return self._release_where(lambda r: r.member_id == member_id)
        return self._release_where(lambda r: r.member_id == member_id and r.session_id == session_id)

    def expire_locks(self, now_ms: int) -> StateChange:
        """Records whose lock deadline has come are available again (or archived at the
        delivery limit). The change stands even if writing it fails, as in Kafka."""
        return self._release_where(lambda r: r.deadline_ms is not None and r.deadline_ms <= now_ms)

    def _release_where(self, matches: Callable[[InFlightRange], bool]) -> StateChange:
        self._require_initialized()
        changes = _Changes()
        for k, r in enumerate(self._runs):
            if r.state is S.ACQUIRED and matches(r):
                self._runs[k] = self._release(r, changes)
        self._settle()
        return changes.result()

    def log_start_moved(self, log_start_offset: int) -> StateChange:
        """The log start moved (retention, DeleteRecords, or a read answered
        OFFSET_OUT_OF_RANGE): records below it are gone, the start offset follows.
        Nothing is archived for a dead-letter topic and nothing needs writing at once:
        the next write carries the new start offset, as in Kafka."""
        self._require_initialized()
        if log_start_offset <= self._start:
            return StateChange()
        if log_start_offset >= self._end:
            self._start = self._end = log_start_offset
            self._runs = []
            return StateChange()
        del self._runs[:self._split(log_start_offset)]
        self._start = log_start_offset
        self._settle()
        return StateChange()

    # ------------------------------------------------------------------ the runs

    def _index(self, offset: int) -> int:
        """The index of the run holding ``offset`` (inside the window)."""
        return bisect.bisect_right(self._runs, offset, key=_first) - 1

    def _split(self, offset: int) -> int:
        """Make a run start at ``offset`` (start <= offset <= end); its index."""
        if offset >= self._end:
            return len(self._runs)
        i = self._index(offset)
        r = self._runs[i]
        if r.first == offset:
            return i
        self._runs[i:i + 1] = [replace(r, last=offset - 1), replace(r, first=offset)]
        return i + 1

    def _slice(self, first: int, last: int) -> tuple[int, int]:
        """Split so that runs ``i..j-1`` cover exactly ``first..last`` (inside the window)."""
        i = self._split(first)
        return i, self._split(last + 1)

    def _extend(self, r: InFlightRange) -> None:
        assert r.first == self._end
        self._runs.append(r)
        self._end = r.last + 1

    def _settle(self) -> None:
        """Merge equal neighbours and move the start offset over leading terminal records."""
        merged: list[InFlightRange] = []
        for r in self._runs:
            if merged and merged[-1]._same_run(r):
                merged[-1] = replace(merged[-1], last=r.last)
            else:
                merged.append(r)
        k = 0
        while k < len(merged) and merged[k].state.terminal:
            k += 1
        self._runs = merged[k:]
        self._start = self._runs[0].first if self._runs else self._end


def _acquired_ranges(pieces: list[tuple[InFlightRange, bool]], batch_size: int) -> tuple[AcquiredRange, ...]:
    """AcquiredRecords: contiguous acquired records with one delivery count, cut at a log
    batch boundary once a range holds ``batch_size`` records (Kafka's createBatches)."""
    out: list[AcquiredRange] = []
    for r, starts_batch in pieces:
        if out:
            cur = out[-1]
            cut = starts_batch and cur.last - cur.first + 1 >= batch_size
            if cur.last + 1 == r.first and cur.delivery_count == r.delivery_count and not cut:
                out[-1] = cur._replace(last=r.last)
                continue
        out.append(AcquiredRange(r.first, r.last, r.delivery_count))
    return tuple(out)
