"""Partition: one topic-partition hosted by this broker, as leader or follower.

Invariants:
- ``log.log_start_offset <= high_watermark <= log.log_end_offset``; consumers
  read only below the high watermark;
- as leader, the high watermark is the smallest log end offset in the ISR and
  among the followers about to join it (below), and never moves back; a
  follower joins the ISR only once its log end offset reaches the high
  watermark and the start of this leader's epoch, and is dropped after
  ``replica.lag.time.max.ms`` without catching up;
- a follower outside the ISR that is caught up (its log end reached the
  leader's within ``replica.lag.time.max.ms``) and eligible holds the high
  watermark too (KAFKA-4485): under a steady produce stream the high watermark
  would otherwise always be past its fetch offset, and it could never rejoin;
- as follower, the high watermark moves up to ``min(leader's high watermark, log
  end offset)`` and down only with a truncation (``update_follower_high_watermark``);
- the ISR here (``isr``) is what the metadata store has confirmed, at state
  version ``partition_version``; a leader proposes at most one change at a time
  (``propose_isr``), the ReplicaManager writes it with compare-and-set against
  that version, and only a confirmed write (``isr_written``) or a newer state
  from the store (``make_leader``) changes ``isr`` (KIP-497);
- while a change is in flight the high watermark is computed over the maximal
  ISR, the confirmed ISR plus the replicas the change adds, so a joining
  follower can never be confirmed into an ISR whose high watermark has
  already passed its log end offset;
- only eligible replicas (registered, not shutting down: KIP-841) join the ISR;
- ``acks=all`` and ``min.insync.replicas`` count the confirmed ISR only;
- a leader whose silent followers would take the ISR below
  ``min.insync.replicas`` while enough of them stay registered to form one
  without it (it is cut off from them, not they from the cluster) resigns
  instead, once per leader epoch (``lagging_followers``); it shrinks the ISR
  as Kafka does only if the controller has not replaced it a lag period later.

``visible_bytes`` grows by the size of every batch that moves below the high
watermark (consumers' delayed fetches wait on it); ``appended_bytes`` by every
batch appended (followers' delayed fetches wait on it). Each append leaves a mark
(its end offset, its size) that the high watermark passes; the records above the
high watermark that no append of this Partition marked (there at its creation, a
restart's tail above the checkpointed high watermark, or left by a truncation)
count by their positions in the log as the high watermark passes them. Event-loop
thread only.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from dmq.record.batch import HEADER_SIZE, ValidatedBatches, parse_header
from dmq.replication.stats import TopicStats
from dmq.storage.log import AppendResult, Log, OffsetOutOfRangeError
from dmq.storage.producer_state import SKIP_VERIFICATION, AppendOrigin, VerificationGuard
from dmq.storage.segment import FileSlice

log = logging.getLogger("dmq.replication")

NO_LEADER = -1


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class PartitionError(Exception):
    def __init__(self, error: ErrorCode, message: str = "") -> None:
        super().__init__(message or error.name)
        self.error = error


@dataclass(slots=True)
class ReadResult:
    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    data: FileSlice | None
    log_end_offset: int = -1
    aborted: list[tuple[int, int]] | None = None  # read_committed: (producer id, first offset)


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one follower (Kafka's Replica)."""

    log_end_offset: int = -1
    log_start_offset: int = -1  # as its last fetch said (-1: not known in this leader epoch)
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0


def _any_replica(broker_id: int) -> bool:
    return True


class Partition:
    def __init__(self, topic: str, index: int, topic_id: str, log: Log, broker_id: int, *,
                 replica_lag_time_max_ms: int = 30_000,
                 replica_eligible: Callable[[int], bool] = _any_replica) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.broker_id = broker_id
        # A follower caught up within this long, and eligible (registered, not shutting
        # down), holds the high watermark though outside the ISR (maybe_increment_high_watermark).
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.replica_eligible = replica_eligible
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.leader_epoch_start_offset = log.log_end_offset
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.partition_version = -1
        self.pending_isr: list[int] | None = None  # an ISR change not settled yet
        self._isr_write_in_flight = False
        self._write_version = -1  # the state version the change is written against
        self._refused = False  # the store refused it: wait for its newer state
        self._retry_at_ms = 0  # a write with an unknown outcome is retried after this
        self._resigned_at_ms = 0  # when this leader asked to be replaced in its epoch (0: never)
        self.followers: dict[int, ReplicaState] = {}
        self._high_watermark = -1
        self.high_watermark = log.log_end_offset
        self.visible_bytes = 0
        self.appended_bytes = 0
        self._marks: deque[tuple[int, int]] = deque()  # (end offset, size) of each append
        # Records in [high watermark, _unmarked_end) have no marks (see the module docstring).
        self._unmarked_end = log.log_end_offset
        self.stats = TopicStats()  # its topic's counters (the ReplicaManager shares one per topic)

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        """Every change reaches the Log too: its last stable offset depends on it."""
        self._high_watermark = offset
        self.log.update_high_watermark(offset)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def min_insync_replicas(self) -> int:
        return int(self.log.config["min.insync.replicas"])

    # ------------------------------------------------------------------ roles

    @property
    def isr_change_pending(self) -> bool:
        return self.pending_isr is not None

    @property
    def maximal_isr(self) -> list[int]:
        """The confirmed ISR plus any replica a change in flight adds (KIP-497)."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + [r for r in self.pending_isr if r not in self.isr]

    def make_leader(self, leader_epoch: int, replicas: list[int], isr: list[int],
                    version: int = -1) -> bool:
        """Take (or refresh) leadership; returns True when this is a new leader epoch.

        A refresh within the same epoch takes the store's ISR only when its version
        is not older than the one held (a leader never goes back to a state it has
        seen replaced). A newer state settles a change whose write had an unknown
        outcome: the store's ISR holds it or not.
        """
        new_epoch = not self.is_leader or leader_epoch != self.leader_epoch
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.replicas = list(replicas)
        now = now_ms()
        if new_epoch:
            self.isr = list(isr)
            self.partition_version = version
            self._clear_isr_change()
            self.leader_epoch_start_offset = self.log.log_end_offset
            self.log.leader_epochs.assign(leader_epoch, self.log.log_end_offset)
            self.followers = {}
            self._resigned_at_ms = 0
        elif version < 0 or version >= self.partition_version:
            self.isr = list(isr)
            self.partition_version = version
            self._settle_if_superseded()
        for r in replicas:
            if r != self.broker_id and r not in self.followers:
                # Followers in the ISR get a full lag period to show up.
                since = now if r in isr else 0
                self.followers[r] = ReplicaState(last_caught_up_ms=since, last_fetch_ms=since)
        for r in list(self.followers):
            if r not in replicas:
                del self.followers[r]
        self.high_watermark = min(max(self.high_watermark, self.log.log_start_offset),
                                  self.log.log_end_offset)
        self.maybe_increment_high_watermark()
        return new_epoch

    def make_follower(self, leader_id: int, leader_epoch: int, replicas: list[int],
                      isr: list[int], version: int = -1) -> bool:
        """Follow ``leader_id``; returns True when the leader or the epoch changed."""
        changed = leader_id != self.leader_id or leader_epoch != self.leader_epoch
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.partition_version = version
        self._clear_isr_change()
        self.followers = {}
        self._resigned_at_ms = 0
        return changed

    # ------------------------------------------------------------- ISR changes
    #
    # One change at a time. ``pending_isr`` stays set, and keeps counting in the
    # maximal ISR, for as long as the store might hold it without this leader
    # knowing; only a confirmed write or a state newer than the one the write was
    # made against settles it:
    #   none --propose_isr--> in flight
    #   in flight --isr_written(version)--> none (confirmed: ``isr`` is the change)
    #   in flight --isr_written(None) or isr_write_failed--> awaiting: refused (the
    #       state moved on) or unknown outcome (the write may have landed)
    #   awaiting --make_leader(state newer than the write's)--> none (the store's
    #       ISR, which holds the change or not, is the ISR)
    #   awaiting, unknown outcome, no newer state --retry_isr_write--> in flight

    def _clear_isr_change(self) -> None:
        self.pending_isr = None
        self._isr_write_in_flight = False
        self._write_version = -1
        self._refused = False
        self._retry_at_ms = 0

    def _settle_if_superseded(self) -> None:
        """A held state newer than the one the write was made against is authoritative."""
        if self.pending_isr is not None and not self._isr_write_in_flight \
                and self.partition_version > self._write_version:
            self._clear_isr_change()

    def propose_isr(self, new_isr: list[int]) -> tuple[int, int] | None:
        """Start an ISR change; returns (leader epoch, expected version) to write it with,
        or None while another change is not settled."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        self.pending_isr = list(new_isr)
        self._isr_write_in_flight = True
        self._write_version = self.partition_version
        self._refused = False
        return self.leader_epoch, self.partition_version

    def retry_isr_write(self) -> tuple[int, int, list[int]] | None:
        """After a write with an unknown outcome: (epoch, expected version, ISR) to write
        again once the backoff has passed, else None."""
        if self.pending_isr is None or self._isr_write_in_flight or self._refused \
                or now_ms() < self._retry_at_ms:
            return None
        self._isr_write_in_flight = True
        return self.leader_epoch, self._write_version, list(self.pending_isr)

    def isr_written(self, leader_epoch: int, new_isr: list[int], version: int | None) -> bool:
        """The outcome of a write: the new state version, or None when the store refused
        it because its state moved on. Returns True when the confirmed ISR changed."""
        if leader_epoch != self.leader_epoch or not self.is_leader or self.pending_isr != new_isr \
                or not self._isr_write_in_flight:
            return False  # leadership moved on, or a newer state settled it meanwhile
        self._isr_write_in_flight = False
        if version is None:
            # Refused. An earlier attempt with an unknown outcome may still have landed,
            # so the change counts until the newer state arrives.
            self._refused = True
            self._settle_if_superseded()
            self.maybe_increment_high_watermark()
            return False
        changed = version > self.partition_version
        if changed:
            self.isr = list(new_isr)
            self.partition_version = version
        self._clear_isr_change()
        self.maybe_increment_high_watermark()
        return changed

    def isr_write_failed(self, leader_epoch: int, new_isr: list[int], retry_ms: int) -> None:
        """The store could not be reached, so the write may or may not have landed: the
        change stays in the maximal ISR and is written again after ``retry_ms``."""
        if leader_epoch == self.leader_epoch and self.pending_isr == new_isr \
                and self._isr_write_in_flight:
            self._isr_write_in_flight = False
            self._retry_at_ms = now_ms() + retry_ms
            self._settle_if_superseded()
            self.maybe_increment_high_watermark()

    # ----------------------------------------------------------------- leader

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """KIP-320: a client's epoch newer than ours or older than ours is refused."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch > self.leader_epoch:
            raise PartitionError(ErrorCode.unknown_leader_epoch,
                                 f"leader epoch {current_leader_epoch} is newer than {self.leader_epoch}")
        raise PartitionError(ErrorCode.fenced_leader_epoch,
                             f"leader epoch {current_leader_epoch} is older than {self.leader_epoch}")

    def append_records_to_leader(self, records: bytes | bytearray | memoryview, batches: ValidatedBatches,
                                 required_acks: int,
                                 origin: AppendOrigin = AppendOrigin.CLIENT,
                                 verification: VerificationGuard | None = SKIP_VERIFICATION) -> AppendResult:
        self._check_leader_for_append(required_acks)
        result = self.log.append_as_leader(records, batches, self.leader_epoch, origin=origin,
                                           verification=verification)
        if not result.duplicate:
            stats = self.stats
            stats.messages_in += batches.record_count
            stats.bytes_in += batches.total_size
            self._track_append(batches.total_size)
            self.maybe_increment_high_watermark()
        return result

    def append_end_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                              commit: bool) -> AppendResult:
        """A transaction's marker (WriteTxnMarkers), written as the leader, acks=all."""
        self._check_leader_for_append(-1)
        size_before = self.log.size_in_bytes
        result = self.log.append_end_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                                self.leader_epoch)
        if self.log.size_in_bytes > size_before:
            self._track_append(self.log.size_in_bytes - size_before)
            self.maybe_increment_high_watermark()
        return result

    def _check_leader_for_append(self, required_acks: int) -> None:
        if not self.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"broker {self.broker_id} is not the leader of {self.topic}-{self.index}")
        min_isr = self.min_insync_replicas
        if required_acks == -1 and len(self.isr) < min_isr:
            raise PartitionError(
                ErrorCode.not_enough_replicas,
                f"The size of the current ISR {self.isr} is insufficient to satisfy "
                f"the min.isr requirement of {min_isr} for partition {self.topic}-{self.index}",
            )

    def _track_append(self, size: int) -> None:
        self.appended_bytes += size
        self._marks.append((self.log.log_end_offset, size))

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark to the smallest log end offset among the maximal ISR
        and the followers about to join it (Kafka's maybeIncrementLeaderHW, KAFKA-4485).

        A follower outside the maximal ISR counts when it is caught up (its log end
        reached the leader's within ``replica_lag_time_max_ms``: Kafka's
        ``isCaughtUp``) and ``replica_eligible``. Holding the high watermark at such a
        follower is what lets it rejoin: ``isr_after_expand`` wants its log end at the
        high watermark, and while records keep arriving between its fetches the
        leader's log end, and a high watermark over the ISR alone, is always past it.
        A follower that stops catching up stops counting after the lag bound, as it
        would have been dropped from the ISR.

        On every append and follower fetch: it allocates nothing, and reads the clock
        and asks ``replica_eligible`` only for a follower outside the ISR that is behind.
        """
        if not self.is_leader:
            return False
        candidate = self.log.log_end_offset
        broker_id = self.broker_id
        followers = self.followers
        for r in self.isr:
            if r != broker_id:
                state = followers.get(r)
                candidate = min(candidate, state.log_end_offset if state is not None else -1)
        pending = self.pending_isr
        if pending is not None:  # the maximal ISR: a member counted twice changes no minimum
            for r in pending:
                if r != broker_id:
                    state = followers.get(r)
                    candidate = min(candidate, state.log_end_offset if state is not None else -1)
        now = -1
        for r, state in followers.items():
            # Every maximal ISR member's log end is at or above the candidate by now, so a
            # follower below it is outside; and below the leader's log end, so caught up
            # only by time.
            if state.log_end_offset < candidate:
                if now < 0:
                    now = now_ms()
                if now - state.last_caught_up_ms <= self.replica_lag_time_max_ms and self.replica_eligible(r):
                    candidate = state.log_end_offset
        return self._set_high_watermark(candidate)

    def _set_high_watermark(self, offset: int) -> bool:
        old = self._high_watermark
        if offset <= old:
            return False
        self.high_watermark = offset
        if old < self._unmarked_end:  # rare: after a restart or a truncation
            self.visible_bytes += self.log.bytes_between(old, min(offset, self._unmarked_end))
        marks = self._marks
        while marks and marks[0][0] <= offset:
            self.visible_bytes += marks.popleft()[1]
        return True

    def update_follower_fetch(self, replica_id: int, fetch_offset: int, log_start_offset: int = -1) -> bool:
        """Record a follower's fetch (its log end and log start offsets); returns True when
        the high watermark moved."""
        state = self.followers.get(replica_id)
        if state is None:
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"broker {replica_id} is not a replica of {self.topic}-{self.index}")
        now = now_ms()
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now)
        elif fetch_offset >= state.last_fetch_leader_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.last_fetch_leader_leo = leo
        state.last_fetch_ms = now
        state.log_end_offset = fetch_offset
        state.log_start_offset = log_start_offset
        return self.maybe_increment_high_watermark()

    def isr_after_expand(self, eligible: Callable[[int], bool] = lambda r: True) -> list[int] | None:
        """The ISR with every caught-up, eligible follower added, or None when nothing changes.

        ``eligible`` says whether a broker may join an ISR at all: registered and not
        shutting down (KIP-841), so a leader never re-adds a replica the controller
        has just dropped for being gone.
        """
        if not self.is_leader:
            return None
        joining = [r for r, s in self.followers.items()
                   if r not in self.isr and r in self.replicas
                   and s.log_end_offset >= self.high_watermark
                   and s.log_end_offset >= self.leader_epoch_start_offset
                   and eligible(r)]
        return self.isr + sorted(joining) if joining else None

    def isr_after_shrink(self, lag_max_ms: int) -> list[int] | None:
        """The ISR without followers that have not caught up for ``lag_max_ms``."""
        if not self.is_leader:
            return None
        now = now_ms()
        leaving = [r for r in self.isr if r != self.broker_id
                   and now - self.followers.get(r, ReplicaState()).last_caught_up_ms > lag_max_ms]
        return [r for r in self.isr if r not in leaving] if leaving else None

    def lagging_followers(self, lag_max_ms: int, resign_after_ms: int,
                          eligible: Callable[[int], bool] = lambda r: True
                          ) -> tuple[str, list[int]] | None:
        """What to do about followers that have not caught up for ``lag_max_ms``:
        ("shrink", the ISR without them), ("resign", the ISR) or None (nothing, or wait).

        Kafka shrinks the ISR. When that would leave fewer than ``min.insync.replicas``
        (no acks=all write could succeed) although at least that many other ISR members
        are ``eligible`` (registered, not shutting down) and every follower dropped has
        sent no fetch at all for ``lag_max_ms``, this leader is likelier cut off from
        them than they from the cluster. It then waits until they have been silent for
        ``resign_after_ms`` (longer than a dead follower's session takes to expire, so
        dead followers are unregistered by then and it shrinks instead) and resigns,
        once per leader epoch; should the controller not replace it within a lag
        period, it shrinks after all.
        """
        shrunk = self.isr_after_shrink(lag_max_ms)
        if shrunk is None or self.pending_isr is not None:
            return None
        min_isr = self.min_insync_replicas
        if len(shrunk) >= min_isr:
            return "shrink", shrunk
        others = [r for r in self.isr if r != self.broker_id and eligible(r)]
        now = now_ms()
        dropped = [r for r in self.isr if r not in shrunk]
        silent_ms = min(now - self.followers.get(r, ReplicaState()).last_fetch_ms for r in dropped)
        if len(others) < min_isr or silent_ms <= lag_max_ms:
            return "shrink", shrunk  # followers gone, or fetching but slow: as Kafka
        if self._resigned_at_ms == 0:
            if silent_ms < resign_after_ms:
                return None
            self._resigned_at_ms = now
            return "resign", list(self.isr)
        if now - self._resigned_at_ms <= lag_max_ms:
            return None  # waiting for the controller
        return "shrink", shrunk

    def resignation_failed(self) -> None:
        """The request did not reach the controller: ask again next time."""
        self._resigned_at_ms = 0

    # --------------------------------------------------------------- follower

    def append_as_follower(self, records: bytes, leader_high_watermark: int) -> int:
        if records and self.log.log_end_offset == self.log.log_start_offset:
            # An empty log restarted at the leader's log start, which DeleteRecords may have
            # put inside a batch: the leader sends that whole batch. Start the log at the
            # batch's base instead (Kafka's UnexpectedAppendOffsetException handling); the
            # leader's log start offset in later answers moves this one's up again.
            first = parse_header(records, 0).base_offset if len(records) >= HEADER_SIZE else None
            if first is not None and first < self.log.log_end_offset:
                log.info("%s-%d: the leader's first batch starts at %d, below this empty log's start %d; "
                         "restarting the log there", self.topic, self.index, first, self.log.log_end_offset)
                self.truncate_fully_and_start_at(first)
        appended = self.log.append_as_follower(records) if records else 0
        if appended:
            self.stats.replication_bytes_in += appended
            self._track_append(appended)
        self.update_follower_high_watermark(leader_high_watermark)
        return appended

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """Move the high watermark up to ``min(leader_high_watermark, log end offset)``.

        Kafka's follower takes that value even when it is lower, as after an election
        whose new leader's high watermark lags the old one's. Here it stays: every record
        below it was below some leader's high watermark, so on each ISR member of that
        leader and of every later one (a clean election picks an ISR member, and a
        replica joins an ISR only past its leader's epoch start), unless a truncation
        removed it (an unclean election), which lowers the high watermark with it.
        Nothing serves consumers from a follower (Fetch, ListOffsets and queries go to
        the leader); as leader (``make_leader``) it starts from this value and shows
        committed records sooner. And the batches it passes count in ``visible_bytes``
        once: after going down and up again, delayed consumer fetches would not be
        woken by those batches.
        """
        target = min(leader_high_watermark, self.log.log_end_offset)
        if target > self.high_watermark:
            self._set_high_watermark(target)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        self._marks.clear()
        self._unmarked_end = self.log.log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self.high_watermark = offset
        self._marks.clear()
        self._unmarked_end = offset

    # ------------------------------------------------------------------- read

    def read(self, offset: int, max_bytes: int, min_one_batch: bool,
             for_replica: bool = False, read_committed: bool = False) -> ReadResult:
        """Followers read to the log end, read_uncommitted consumers below the high
        watermark, read_committed ones below the last stable offset, with the aborted
        transactions of what they read (Kafka's isolation levels)."""
        lso = self.log.last_stable_offset()
        if for_replica:
            max_offset = self.log.log_end_offset
        else:
            max_offset = lso if read_committed else self.high_watermark
        leo = self.log.log_end_offset
        try:
            data = self.log.read(offset, max_bytes, max_offset, min_one_batch)
        except OffsetOutOfRangeError:
            return ReadResult(ErrorCode.offset_out_of_range, self.high_watermark,
                              self.log.log_start_offset, lso, None, leo)
        aborted = self.log.aborted_transactions_for_read(offset, data, max_offset) if read_committed else None
        return ReadResult(ErrorCode.none, self.high_watermark, self.log.log_start_offset, lso,
                          data, leo, aborted)

    def low_watermark(self, alive: Callable[[int], bool]) -> int:
        """The smallest log start offset among this leader and its followers that are
        ``alive`` (registered), -1 while one has not told it in this leader epoch: Kafka's
        lowWatermarkIfLeader. DeleteRecords is done once it reaches the offset asked: a
        follower elected before moving its own log start would serve the records again."""
        if not self.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"broker {self.broker_id} is not the leader of {self.topic}-{self.index}")
        low = self.log.log_start_offset
        for r, state in self.followers.items():
            if state.log_start_offset < low and alive(r):
                low = state.log_start_offset
        return low

    def delete_records(self, offset: int) -> int:
        """Move this leader's log start offset (DeleteRecords); -1 means 'the high watermark'.
        Returns the offset asked (the high watermark for -1): the request is done once
        ``low_watermark`` reaches it."""
        if not self.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower)
        if "delete" not in self.log.config.cleanup_policy:
            # Kafka's deleteRecordsOnLeader: a compact-only topic keeps every key's latest
            # value (a Connect config topic, a Streams changelog), whatever the offset asked.
            raise PartitionError(ErrorCode.policy_violation, f"Records of partition {self.topic}-{self.index} "
                                 "can not be deleted due to the configured policy")
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise PartitionError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} is above the high watermark {self.high_watermark}",
            )
        self.log.delete_records_before(target)
        return target
