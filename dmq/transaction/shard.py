"""TransactionShard: the transactional ids of one ``__transaction_state`` partition,
as a pure coordinator shard (Kafka's TransactionCoordinator and TransactionStateManager).

Every request is a method ``(args..., now_ms) -> CoordinatorResult`` run by the
CoordinatorRuntime. A transition is computed from the committed metadata,
written as one record, and applied when the record replays; while it is in
flight the id is *pending* and other requests for it get
CONCURRENT_TRANSACTIONS, as in Kafka. After a PrepareCommit/PrepareAbort is
committed the shard asks for the markers to be written (a ``SendMarkers``
effect); ``complete()`` then writes CompleteCommit/CompleteAbort. A shard
loaded with a transaction in a Prepare state asks for its markers again.

Half messages (dmq's extension, docs/half-messages.md): a transaction whose
id names a producer group (``__dmq_half/<group>/<instance>``) is not aborted by
its timeout. From ``transaction.check.delay.ms`` after it began, and every
``transaction.check.interval.ms`` after a check, a checker of its group that
polls (``poll_checks``) is handed it; the checker's answer commits or rolls it
back, or (UNKNOWN) leaves it for the next check. After
``transaction.check.max`` checks it is rolled back. Checks are only made when
a checker polls, so with no live checker they wait. The checks made and the
last answer are written as dmq's check-state records.

Timers: ``("abort-timed-out",)`` every
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` fences and
aborts transactions open longer than their timeout; ``("expire-ids",)`` every
``transaction.remove.expired.transaction.cleanup.interval.ms`` removes ids idle
for ``transactional.id.expiration.ms``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from dmq.coordinator.runtime import CoordinatorResult, Record, Schedule
from dmq.protocol.extensions import Resolution
from dmq.transaction import records as rec
from dmq.transaction.metadata import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionState,
)

log = logging.getLogger("dmq.transaction")

S = TransactionState
ABORT_TIMER = ("abort-timed-out",)
EXPIRE_TIMER = ("expire-ids",)


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    num_partitions: int = 50
    max_timeout_ms: int = 900_000
    abort_interval_ms: int = 10_000
    id_expiration_ms: int = 7 * 24 * 3600 * 1000
    expire_interval_ms: int = 3_600_000
    check_delay_ms: int = 6_000
    check_interval_ms: int = 60_000
    check_max: int = 15


NO_ANSWER = -1


@dataclass(frozen=True, slots=True)
class CheckAnswer:
    """A checker's answer. ``start_ms``: the start time of the transaction it was handed
    (CheckTransactions v1+), which names it among the producer's transactions of one epoch;
    None from a v0 checker, whose answer is applied only when it cannot belong to another
    transaction (``TransactionShard.poll_checks``)."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    resolution: int
    start_ms: int | None = None


@dataclass(frozen=True, slots=True)
class HalfTransaction:
    """A half-message transaction as a checker (or ``describe``) sees it."""
    meta: TransactionMetadata
    checks: int
    last_answer: int
    last_check_ms: int


@dataclass(frozen=True, slots=True)
class CheckPoll:
    error: ErrorCode
    transactions: list[HalfTransaction] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class SendMarkers:
    """Write a COMMIT or ABORT marker of ``producer_id``/``producer_epoch`` to every
    partition, then call the shard's ``complete()``."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[tuple[str, int]]
    # Which prepared transaction: its Prepare record's last_update_ms. Another transaction of
    # the same producer id and epoch (after a timed-out completion applied late) is not this
    # one; ``complete()`` completes only the one these markers were written for.
    prepared_ms: int = field(default=-1, compare=False)


def _record(meta: TransactionMetadata) -> Record:
    partitions: dict[str, list[int]] = {}
    for topic, index in sorted(meta.partitions):
        partitions.setdefault(topic, []).append(index)
    value = rec.TxnValue(meta.producer_id, meta.producer_epoch, meta.timeout_ms, meta.state.id,
                         tuple((t, tuple(ids)) for t, ids in partitions.items()),
                         meta.last_update_ms, meta.start_ms)
    return rec.encode_key(meta.transactional_id), rec.encode_value(value)


class TransactionShard:
    """Invariants: ``transactions`` is what the committed records say (plus, from the
    live path, the last epochs KIP-360 retries need); an id is in ``pending`` exactly
    while one write for it is in flight. Called by the runtime only."""

    def __init__(self, partition: int, coordinator_epoch: int, config: TransactionConfig) -> None:
        self.partition = partition
        self.coordinator_epoch = coordinator_epoch
        self.config = config
        self.transactions: dict[str, TransactionMetadata] = {}
        self.pending: dict[str, TransactionState] = {}
        self.last_producer_ids: dict[str, int] = {}
        # Half messages: check state per transactional id (what the check records say) and
        # the ids whose check-state write is in flight.
        self.checks: dict[str, rec.CheckValue] = {}
        self.checks_pending: set[str] = set()

    # ------------------------------------------------------------------ replay

    def replay_marker(self, producer_id: int, commit: bool, *, loading: bool) -> None:
        """``__transaction_state`` holds no transactions' data: markers never land here."""

    def replay(self, key: bytes, value: bytes | None, *, loading: bool, producer_id: int = -1,
               offset: int = -1) -> None:
        try:
            version, txn_id = rec.decode_any_key(key)
            if version == rec.CHECK_KEY_VERSION:
                if value is None:
                    self.checks.pop(txn_id, None)
                else:
                    self.checks[txn_id] = rec.decode_check_value(value)
                return
            if value is None:
                self.transactions.pop(txn_id, None)
                return
            v = rec.decode_value(value)
            state = S.from_id(v.status)
        except (rec.RecordFormatError, ValueError) as e:
            log.warning("skipping unreadable __transaction_state record: %s", e)
            return
        old = self.transactions.get(txn_id)
        last_epoch = NO_PRODUCER_EPOCH
        if old is not None and old.producer_id == v.producer_id:
            last_epoch = old.last_producer_epoch
        self.transactions[txn_id] = TransactionMetadata(
            txn_id, v.producer_id, v.producer_epoch, v.timeout_ms, state,
            frozenset((t, p) for t, ids in v.partitions for p in ids), v.last_update_ms, v.start_ms,
            last_epoch)

    def on_loaded(self, now_ms: int) -> CoordinatorResult:
        """Transactions found half-way get their markers (again); the timers start."""
        effects = [self._markers(meta) for meta in self.transactions.values()
                   if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)]
        return CoordinatorResult(timers=[Schedule(ABORT_TIMER, self.config.abort_interval_ms),
                                         Schedule(EXPIRE_TIMER, self.config.expire_interval_ms)],
                                 effects=effects)

    def on_timer(self, key: Hashable, now_ms: int) -> CoordinatorResult:
        if key == ABORT_TIMER:
            result = self.abort_timed_out(now_ms)
            result.timers.append(Schedule(ABORT_TIMER, self.config.abort_interval_ms))
            return result
        if key == EXPIRE_TIMER:
            result = self.expire_ids(now_ms)
            result.timers.append(Schedule(EXPIRE_TIMER, self.config.expire_interval_ms))
            return result
        return CoordinatorResult()

    # ---------------------------------------------------------------- writing

    def _write(self, changes: list[TransactionMetadata], response: object,
               effects: Callable[[list[TransactionMetadata]], list[object]] | None = None,
               checks: dict[str, rec.CheckValue | None] | None = None) -> CoordinatorResult:
        """Write new metadata (and check states); applied on replay, pending until then."""
        check_writes = checks or {}
        for meta in changes:
            self.pending[meta.transactional_id] = meta.state
        self.checks_pending.update(check_writes)

        def committed(shard: TransactionShard, now: int) -> CoordinatorResult:
            for meta in changes:
                shard.pending.pop(meta.transactional_id, None)
                if meta.state != S.DEAD:
                    shard.transactions[meta.transactional_id] = meta
            shard.checks_pending.difference_update(check_writes)
            return CoordinatorResult(effects=effects(changes) if effects is not None else [])

        def failed(shard: TransactionShard, error: ErrorCode, now: int) -> CoordinatorResult:
            for meta in changes:
                shard.pending.pop(meta.transactional_id, None)
            shard.checks_pending.difference_update(check_writes)
            return CoordinatorResult()

        records = [_record(m) if m.state != S.DEAD else (rec.encode_key(m.transactional_id), None)
                   for m in changes]
        records += [(rec.encode_check_key(txn_id), rec.encode_check_value(v) if v is not None else None)
                    for txn_id, v in check_writes.items()]
        return CoordinatorResult(response=response, records=records, committed=committed, failed=failed)

    def _markers(self, meta: TransactionMetadata) -> SendMarkers:
        return SendMarkers(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                           meta.state == S.PREPARE_COMMIT, self.coordinator_epoch, meta.partitions,
                           meta.last_update_ms)

    def _prepare_end(self, meta: TransactionMetadata, commit: bool, now_ms: int) -> TransactionMetadata:
        return meta.transition_to(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, last_update_ms=now_ms)

    # -------------------------------------------------------------- requests

    def needs_producer_id(self, transactional_id: str) -> bool:
        meta = self.transactions.get(transactional_id)
        return meta is None or meta.epoch_exhausted

    def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int,
                         expected_epoch: int, new_producer_id: int, now_ms: int) -> CoordinatorResult:
        """InitProducerId with a transactional id: bump the epoch (fencing older ones)."""
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return CoordinatorResult(InitResult(ErrorCode.invalid_transaction_timeout))
        if transactional_id in self.pending:
            return CoordinatorResult(InitResult(ErrorCode.concurrent_transactions))
        meta = self.transactions.get(transactional_id)
        if meta is None:
            if new_producer_id < 0:
                return CoordinatorResult(InitResult(ErrorCode.coordinator_not_available))
            meta = TransactionMetadata(transactional_id, new_producer_id, NO_PRODUCER_EPOCH, timeout_ms,
                                       S.EMPTY, frozenset(), now_ms, -1)
        if expected_producer_id >= 0 and not self._valid_producer(meta, expected_producer_id, expected_epoch):
            return CoordinatorResult(InitResult(ErrorCode.producer_fenced))
        if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return CoordinatorResult(InitResult(ErrorCode.concurrent_transactions))
        if meta.state == S.ONGOING:
            # Fence the open transaction's producer and abort it under the new epoch; the
            # client retries (CONCURRENT_TRANSACTIONS) and gets an epoch bumped again.
            fenced = self._fence(meta, now_ms)
            return self._write([fenced], InitResult(ErrorCode.concurrent_transactions),
                               lambda ms: [self._markers(m) for m in ms])
        expects = expected_producer_id >= 0
        if meta.epoch_exhausted and (not expects or expected_epoch == meta.producer_epoch):
            # Kafka's prepareProducerIdRotation: a new id, and the old epoch kept as the last
            # one so that a retry of this request (old id, old epoch) gets the same answer.
            # A producer that names an older epoch is not the current one: it is refused below.
            if new_producer_id < 0:
                return CoordinatorResult(InitResult(ErrorCode.coordinator_not_available))
            self.last_producer_ids[transactional_id] = meta.producer_id
            bumped = meta.transition_to(S.EMPTY, producer_id=new_producer_id, producer_epoch=0,
                                        last_producer_epoch=meta.producer_epoch if expects else NO_PRODUCER_EPOCH,
                                        timeout_ms=timeout_ms, partitions=frozenset(),
                                        last_update_ms=now_ms, start_ms=-1)
        else:
            epochs = self._next_epoch(meta, expected_epoch if expects else None)
            if epochs is None:
                return CoordinatorResult(InitResult(ErrorCode.producer_fenced))
            bumped = meta.transition_to(S.EMPTY, producer_epoch=epochs[0], last_producer_epoch=epochs[1],
                                        timeout_ms=timeout_ms, partitions=frozenset(),
                                        last_update_ms=now_ms, start_ms=-1)
        return self._write([bumped], InitResult(ErrorCode.none, bumped.producer_id, bumped.producer_epoch))

    def _valid_producer(self, meta: TransactionMetadata, producer_id: int, epoch: int) -> bool:
        """KIP-360: a producer asking to bump must be the current one (or the previous id
        retrying a bump that rotated the id)."""
        return (meta.producer_epoch == NO_PRODUCER_EPOCH or producer_id == meta.producer_id
                or (producer_id == self.last_producer_ids.get(meta.transactional_id)
                    and epoch >= MAX_PRODUCER_EPOCH - 1))

    @staticmethod
    def _next_epoch(meta: TransactionMetadata, expected: int | None) -> tuple[int, int] | None:
        """(new epoch, last epoch) as Kafka's prepareIncrementProducerEpoch; None: fenced."""
        bumped = meta.producer_epoch + 1
        if expected is None or expected < 0:
            return bumped, NO_PRODUCER_EPOCH
        if meta.producer_epoch == NO_PRODUCER_EPOCH or expected == meta.producer_epoch:
            return bumped, meta.producer_epoch
        if expected == meta.last_producer_epoch:
            return meta.producer_epoch, meta.last_producer_epoch  # a retry of the last bump
        return None

    def _fence(self, meta: TransactionMetadata, now_ms: int) -> TransactionMetadata:
        """Bump the epoch of an open transaction's producer and abort the transaction.

        The fence always bumps, from 32766 to 32767 too (Kafka's prepareFenceProducerEpoch):
        aborting under the epoch the old producer still holds would not fence it, and it could
        go on to commit a new transaction without the records the abort removed. No producer
        is ever given 32767 (InitProducerId rotates the id from 32766 on), so no open
        transaction has it."""
        epoch = min(meta.producer_epoch + 1, MAX_PRODUCER_EPOCH)
        fencing = meta.transition_to(S.PREPARE_EPOCH_FENCE, producer_epoch=epoch,
                                     last_producer_epoch=NO_PRODUCER_EPOCH)
        return fencing.transition_to(S.PREPARE_ABORT, last_update_ms=now_ms)

    def _check_producer(self, transactional_id: str, producer_id: int, epoch: int
                        ) -> tuple[ErrorCode, TransactionMetadata | None]:
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if epoch != meta.producer_epoch:
            return ErrorCode.producer_fenced, None
        if transactional_id in self.pending:
            return ErrorCode.concurrent_transactions, None
        return ErrorCode.none, meta

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Iterable[tuple[str, int]], now_ms: int) -> CoordinatorResult:
        """AddPartitionsToTxn (and AddOffsetsToTxn's ``__consumer_offsets`` partition)."""
        error, meta = self._check_producer(transactional_id, producer_id, epoch)
        if meta is None:
            return CoordinatorResult(error)
        if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return CoordinatorResult(ErrorCode.concurrent_transactions)
        wanted = frozenset(partitions)
        if meta.state == S.ONGOING and wanted <= meta.partitions:
            return CoordinatorResult(ErrorCode.none)
        start = meta.start_ms if meta.state == S.ONGOING else self._new_start_ms(meta, now_ms)
        ongoing = meta.transition_to(S.ONGOING, partitions=meta.partitions | wanted, last_update_ms=now_ms,
                                     start_ms=start)
        return self._write([ongoing], ErrorCode.none)

    def _new_start_ms(self, meta: TransactionMetadata, now_ms: int) -> int:
        """The start time of a new transaction of ``meta``'s producer. A half-message
        transaction's start time names it to checkers (with the producer id and epoch,
        which stay from one transaction to the next), so it is later than that of any
        earlier transaction of the same producer id and epoch, whatever the clock did."""
        if rec.half_group(meta.transactional_id) is None:
            return now_ms
        earlier = meta.start_ms
        found = self.checks.get(meta.transactional_id)
        if found is not None and (found.producer_id, found.producer_epoch) == (meta.producer_id, meta.producer_epoch):
            earlier = max(earlier, found.start_ms)
        return max(now_ms, earlier + 1)

    def verify_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn v4+ with verify_only (KIP-890): which partitions are in the
        producer's transaction, changing nothing (Kafka's handleVerifyPartitionsInTransaction)."""
        wanted = list(partitions)
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return dict.fromkeys(wanted, ErrorCode.invalid_producer_id_mapping)
        if meta.producer_epoch != epoch:
            return dict.fromkeys(wanted, ErrorCode.producer_fenced)
        if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return dict.fromkeys(wanted, ErrorCode.concurrent_transactions)
        return {tp: ErrorCode.none if tp in meta.partitions else ErrorCode.transaction_abortable
                for tp in wanted}

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                now_ms: int) -> CoordinatorResult:
        """EndTxn: answered once PrepareCommit/PrepareAbort is committed; the markers follow."""
        error, meta = self._check_producer(transactional_id, producer_id, epoch)
        if meta is None:
            return CoordinatorResult(error)
        state = meta.state
        if state == S.ONGOING:
            return self._write([self._prepare_end(meta, commit, now_ms)], ErrorCode.none,
                               lambda ms: [self._markers(m) for m in ms])
        if state == S.COMPLETE_COMMIT:
            return CoordinatorResult(ErrorCode.none if commit else ErrorCode.invalid_txn_state)
        if state == S.COMPLETE_ABORT:
            return CoordinatorResult(ErrorCode.invalid_txn_state if commit else ErrorCode.none)
        if state == S.PREPARE_COMMIT:
            return CoordinatorResult(ErrorCode.concurrent_transactions if commit else ErrorCode.invalid_txn_state)
        if state == S.PREPARE_ABORT:
            return CoordinatorResult(ErrorCode.invalid_txn_state if commit else ErrorCode.concurrent_transactions)
        return CoordinatorResult(ErrorCode.invalid_txn_state)

    def complete(self, markers: SendMarkers, now_ms: int) -> CoordinatorResult:
        """Every marker of a prepared transaction is written: CompleteCommit/CompleteAbort.

        Only the transaction the markers were written for: the same producer id, epoch and
        outcome, prepared at the same time with the same partitions, by this coordinator
        epoch (Kafka completes only the pending transition its markers belong to). Anything
        else is answered as done: another sender, or this shard's next one, finishes it."""
        meta = self.transactions.get(markers.transactional_id)
        prepared = S.PREPARE_COMMIT if markers.commit else S.PREPARE_ABORT
        if meta is None or markers.transactional_id in self.pending or meta.producer_id != markers.producer_id \
                or meta.producer_epoch != markers.producer_epoch or meta.state != prepared \
                or markers.coordinator_epoch != self.coordinator_epoch or meta.partitions != markers.partitions \
                or (markers.prepared_ms >= 0 and meta.last_update_ms != markers.prepared_ms):
            return CoordinatorResult(ErrorCode.none)
        target = S.COMPLETE_COMMIT if meta.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        done = meta.transition_to(target, partitions=frozenset(), last_update_ms=now_ms)
        return self._write([done], ErrorCode.none)

    def abort_timed_out(self, now_ms: int) -> CoordinatorResult:
        """transaction.timeout.ms: fence and abort transactions open for longer; ask again
        for the markers of prepared ones."""
        expired = [self._fence(meta, now_ms) for txn_id, meta in self.transactions.items()
                   if meta.state == S.ONGOING and txn_id not in self.pending
                   and rec.half_group(txn_id) is None and meta.start_ms + meta.timeout_ms < now_ms]
        expired += self._checks_exhausted(now_ms)
        # Prepared transactions whose markers are not all written yet are sent again (the
        # marker sender drops what it is already sending): a PrepareCommit whose write timed
        # out and was committed later never got its markers asked for.
        stuck: list[object] = [self._markers(meta) for txn_id, meta in self.transactions.items()
                               if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
                               and txn_id not in self.pending]
        if not expired:
            return CoordinatorResult(effects=stuck)
        for meta in expired:
            log.info("aborting transaction of %s (producer %d): open for longer than %d ms",
                     meta.transactional_id, meta.producer_id, meta.timeout_ms)
        result = self._write(expired, None, lambda ms: [self._markers(m) for m in ms])
        result.effects = stuck
        return result

    def expire_ids(self, now_ms: int) -> CoordinatorResult:
        """transactional.id.expiration.ms: forget ids idle that long (tombstones)."""
        dead = [meta.transition_to(S.DEAD) for txn_id, meta in self.transactions.items()
                if meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                and txn_id not in self.pending
                and meta.last_update_ms + self.config.id_expiration_ms < now_ms]
        if not dead:
            return CoordinatorResult()
        gone: dict[str, rec.CheckValue | None] = {
            m.transactional_id: None for m in dead if m.transactional_id in self.checks}
        return self._write(dead, None, checks=gone)

    # ----------------------------------------------------------- half messages

    def _check_state(self, meta: TransactionMetadata) -> rec.CheckValue:
        """The check state of ``meta``'s open transaction (a fresh one if none is recorded)."""
        found = self.checks.get(meta.transactional_id)
        if found is not None and (found.producer_id, found.producer_epoch, found.start_ms) == \
                (meta.producer_id, meta.producer_epoch, meta.start_ms):
            return found
        return rec.CheckValue(meta.producer_id, meta.producer_epoch, meta.start_ms, 0, NO_ANSWER, -1)

    def _next_check_ms(self, state: rec.CheckValue) -> int:
        if state.checks == 0:
            return state.start_ms + self.config.check_delay_ms
        return state.last_check_ms + self.config.check_interval_ms

    def _checkable(self, txn_id: str, meta: TransactionMetadata) -> bool:
        return (meta.state == S.ONGOING and rec.half_group(txn_id) is not None
                and txn_id not in self.pending and txn_id not in self.checks_pending)

    def _checks_exhausted(self, now_ms: int) -> list[TransactionMetadata]:
        """Half-message transactions checked ``transaction.check.max`` times without an
        answer that ends them: fenced and rolled back, each with a log line."""
        out = []
        for txn_id, meta in self.transactions.items():
            if not self._checkable(txn_id, meta):
                continue
            state = self._check_state(meta)
            if state.checks >= self.config.check_max and now_ms >= self._next_check_ms(state):
                answer = Resolution(state.last_answer).name if state.last_answer != NO_ANSWER else "none"
                log.warning("rolling back half-message transaction %s of producer group %s (producer %d): "
                            "%d checks made (transaction.check.max), last answer %s", txn_id,
                            rec.half_group(txn_id), meta.producer_id, state.checks, answer)
                out.append(self._fence(meta, now_ms))
        return out

    def _answers_current(self, answer: CheckAnswer, meta: TransactionMetadata, state: rec.CheckValue,
                         now_ms: int) -> bool:
        """Whether ``answer`` answers a check of ``meta``'s open transaction (whose check state
        is ``state``), not of an earlier transaction of the same producer id and epoch."""
        if state.checks == 0:
            return False  # never handed out: the answer is to an earlier transaction's check
        if answer.start_ms is not None:
            return answer.start_ms == meta.start_ms
        # A v0 answer does not say which transaction it answers: only when this one's check
        # is the only one that can be answered, handed out and not answered yet, with no
        # earlier transaction's check still within its interval.
        return state.outstanding and now_ms >= state.earlier_until_ms

    def poll_checks(self, group: str, answers: Iterable[CheckAnswer], now_ms: int, *,
                    may_write: Callable[[str], bool] | None = None) -> CoordinatorResult:
        """A checker of ``group`` polls: its answers are applied (COMMIT/ROLLBACK end the
        transaction, UNKNOWN is recorded) and it is handed the transactions due a check.

        An answer is applied only to the transaction it was handed: its producer id and
        epoch, its start time (v1; a v0 answer: see ``_answers_current``), a check of it
        handed out. A check's answer that comes after its transaction ended and the producer
        began the next one (same id and epoch) is ignored, as any stale answer.

        ``may_write``: whether the checker may Write the transactional id (its ACLs, as
        Kafka's EndTxn checks the id). An id it may not is neither answered (its answer is
        dropped) nor handed to it (no check counted). None: every id of the group."""
        changes: list[TransactionMetadata] = []
        checks: dict[str, rec.CheckValue | None] = {}
        for answer in answers:
            meta = self.transactions.get(answer.transactional_id)
            if meta is None or rec.half_group(answer.transactional_id) != group \
                    or (may_write is not None and not may_write(answer.transactional_id)) \
                    or (meta.producer_id, meta.producer_epoch) != (answer.producer_id, answer.producer_epoch) \
                    or not self._checkable(answer.transactional_id, meta) \
                    or answer.transactional_id in checks:
                continue  # ended or fenced meanwhile, or not this group's: the answer is stale
            try:
                resolution = Resolution(answer.resolution)
            except ValueError:
                continue
            state = self._check_state(meta)
            if not self._answers_current(answer, meta, state, now_ms):
                log.info("half-message transaction %s of producer group %s: ignoring an answer (%s) "
                         "that may be to a check of an earlier transaction of the producer",
                         meta.transactional_id, group, resolution.name)
                continue
            checks[meta.transactional_id] = replace(state, last_answer=int(resolution), outstanding=False)
            if resolution != Resolution.UNKNOWN:
                log.info("half-message transaction %s of producer group %s: the checker answered %s",
                         meta.transactional_id, group, resolution.name)
                changes.append(self._prepare_end(meta, resolution == Resolution.COMMIT, now_ms))
        exhausted = self._checks_exhausted(now_ms)
        changes += [m for m in exhausted if m.transactional_id not in checks]
        handed: list[HalfTransaction] = []
        for txn_id, meta in self.transactions.items():
            if rec.half_group(txn_id) != group or not self._checkable(txn_id, meta) \
                    or txn_id in checks or any(m.transactional_id == txn_id for m in changes):
                continue
            state = self._check_state(meta)
            if now_ms < self._next_check_ms(state) or (may_write is not None and not may_write(txn_id)):
                continue
            earlier_until = state.earlier_until_ms
            previous = self.checks.get(txn_id)
            if state.checks == 0 and previous is not None:
                # The first check of this transaction; the id's check state was an earlier
                # transaction's, whose last check may still be answered within its interval.
                earlier_until = previous.earlier_until_ms
                if previous.outstanding:
                    earlier_until = max(earlier_until, previous.last_check_ms + self.config.check_interval_ms)
            checked = rec.CheckValue(state.producer_id, state.producer_epoch, state.start_ms,
                                     state.checks + 1, state.last_answer, now_ms, True, earlier_until)
            checks[txn_id] = checked
            handed.append(HalfTransaction(meta, checked.checks, checked.last_answer, now_ms))
        if not changes and not checks:
            return CoordinatorResult(CheckPoll(ErrorCode.none))
        return self._write(changes, CheckPoll(ErrorCode.none, handed),
                           lambda ms: [self._markers(m) for m in ms], checks=checks)

    def half_transactions(self, group: str) -> list[HalfTransaction]:
        """Every transaction of ``group`` this shard knows, with its check state."""
        out = []
        for txn_id in sorted(self.transactions):
            if rec.half_group(txn_id) != group:
                continue
            half = self.check_state(txn_id)
            if half is not None:
                out.append(half)
        return out

    def check_state(self, transactional_id: str) -> HalfTransaction | None:
        meta = self.transactions.get(transactional_id)
        if meta is None or rec.half_group(transactional_id) is None:
            return None
        state = self.checks.get(transactional_id)
        if state is None or (state.producer_id, state.start_ms) != (meta.producer_id, meta.start_ms):
            return HalfTransaction(meta, 0, NO_ANSWER, -1)
        return HalfTransaction(meta, state.checks, state.last_answer, state.last_check_ms)

    # ------------------------------------------------------------------ admin

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.transactions.get(transactional_id)

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = ()) -> list[TransactionMetadata]:
        wanted_states = {s.lower() for s in states}
        wanted_ids = set(producer_ids)
        return [m for m in self.transactions.values()
                if (not wanted_states or m.state.display.lower() in wanted_states)
                and (not wanted_ids or m.producer_id in wanted_ids)]
