"""Idempotent and transactional producer state of one partition (Kafka's ProducerStateManager).

For each producer id: its epoch, the timestamp of its last batch (Kafka's
lastTimestamp: the last one's, not the highest seen; it expires
``producer.id.expiration.ms`` after it), the metadata of its last 5 batches (first/last
sequence, first/last offset, max timestamp), the epoch of the transaction coordinator that
wrote its last marker, and the first offset of its ongoing transaction (-1
when none). State is rebuilt after a restart from the newest snapshot
``<20-digit offset>.snapshot`` plus the batches from that offset on, so a
retry after a crash is still deduplicated and an open transaction stays open.

Snapshot file: a JSON header line ``{"version": V, "crc": CRC32C of the body}``
then a JSON body, one list per producer. Version 1 (before transactions):
``[pid, epoch, last timestamp, [[first seq, last seq, first offset, last offset], ...]]``;
version 2 appends ``coordinator epoch, ongoing transaction's first offset``; version 3
appends each batch's max timestamp to its list (what a retried duplicate is answered as
its log append time, as Kafka's BatchMetadata.timestamp). Versions 1 and 2 are still
read (no coordinator epoch and no open transaction in version 1; their batches take the
producer's last timestamp for its last batch, -1 for the others: Kafka's snapshot keeps
the last batch only, with that timestamp).

Transactions, as Kafka's ProducerAppendInfo and ProducerStateManager:

- a producer's first transactional data batch starts its transaction at that
  batch's base offset; the transaction is *ongoing* until a COMMIT or ABORT
  marker of the producer is appended, which completes it (``CompletedTxn``:
  producer id, first offset, last offset = the marker's offset, aborted?);
- a completed transaction stays *unreplicated* until the high watermark
  passes its marker (``on_high_watermark_updated``); ongoing and unreplicated
  transactions together make ``first_unstable_offset()``;
- a marker for a producer with no ongoing transaction completes nothing (it
  still updates the producer's epoch and coordinator epoch).

Appending is two steps so that a refused request changes nothing:
``prepare(batches, origin)`` validates every batch of one append in order
against the state as the earlier batches of the same append leave it and
returns a ``ProducerAppend``; ``apply(append)`` installs it, starting and
completing transactions in batch order, and returns each completed
transaction with the last stable offset at its marker, which the Log writes
to its transaction index for an aborted one. (Kafka starts every transaction
of an append before completing any, so when one append holds a marker and a
later transaction start, as a follower's fetch may, the LSO it indexes for the
marker is the later start: too high, which ends the index search early and
misses aborted transactions. Batch order gives the LSO at the marker.)
Checks by ``AppendOrigin``:

- CLIENT (Produce): batches with a producer id need a base sequence;
  sequences (duplicates are answered by ``find_duplicate`` before ``prepare``),
  then the checks below; and, unless the caller passes ``SKIP_VERIFICATION``,
  a transactional data batch that would start its producer's transaction
  needs the ``VerificationGuard`` of a verification (below) ->
  INVALID_TXN_STATE (so does a COORDINATOR append that passes a guard or
  None: the group coordinator's transactional offsets);
- COORDINATOR (WriteTxnMarkers, the group coordinator's TxnOffsetCommit): no
  sequence checks; a data batch or marker whose producer epoch is older than
  the producer's current one -> INVALID_PRODUCER_EPOCH; a marker whose
  coordinator epoch is older than the last one seen ->
  TRANSACTION_COORDINATOR_FENCED; a non-transactional data batch from a
  producer with an ongoing transaction -> INVALID_TXN_STATE;
- REPLICATION (a follower's fetched batches, recovery, reload): no checks;
  the leader validated.

Transaction verification (KIP-890, Kafka's VerificationStateEntry): before a
producer's first transactional batch on this partition is appended, the leader
asks the transaction coordinator whether the partition is in the producer's
ongoing transaction. ``maybe_start_verification`` makes (or returns) the
producer's ``VerificationGuard``, unique per verification; the append must
bring back that same object. Any transactional batch or marker of the producer
that is applied drops it, so a verification overtaken by the transaction's
marker (the coordinator aborted it meanwhile) no longer matches and the late
batch cannot open a transaction no coordinator knows. While one is pending, a
batch with a higher sequence than the lowest one being verified is
OUT_OF_ORDER_SEQUENCE_NUMBER (the lower one is retried first). Unverified
entries older than the producer expiry are dropped with expired producers.

Errors are ``InvalidRecordError`` with the name of kio's ``ErrorCode``.
Plain synchronous code, called by the owning Log.
"""

from __future__ import annotations

import json
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from crc32c import crc32c

from dmq.record.batch import CONTROL_MASK, BatchHeader, InvalidRecordError
from dmq.record.control import EndTxnMarker
from dmq.storage.snapshot_files import SnapshotFiles

BATCHES_KEPT = 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 3
_SEQ_WRAP = 2**31
NO_OFFSET = -1


class VerificationGuard:
    """One verification of a transaction with its coordinator; compared by identity."""

    __slots__ = ()


# Appends whose caller does not verify: verification turned off, storage tests, tools.
SKIP_VERIFICATION = VerificationGuard()


@dataclass(slots=True)
class VerificationState:
    """A producer's pending verification: its guard, when it began, and the lowest
    sequence (in the newest epoch) waiting for it."""

    started_ms: int
    lowest_seq: int
    epoch: int
    guard: VerificationGuard = field(default_factory=VerificationGuard)

    def update(self, seq: int, epoch: int) -> None:
        if epoch == self.epoch and seq < self.lowest_seq:
            self.lowest_seq = seq
        elif epoch > self.epoch:
            self.epoch, self.lowest_seq = epoch, seq


class AppendOrigin(Enum):
    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"
    DELAYED = "delayed"  # a leader delivering delayed records (dmq.storage.delayed): no producer


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int = -1  # the batch's max timestamp (its log append time on LogAppendTime topics)


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    last_timestamp: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    coordinator_epoch: int = -1
    current_txn_first_offset: int = NO_OFFSET  # first offset of the ongoing transaction

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        """Offset of the last data record written by the producer (-1: none known)."""
        return self.batches[-1].last_offset if self.batches else NO_OFFSET

    @property
    def has_ongoing_txn(self) -> bool:
        return self.current_txn_first_offset >= 0

    def copy(self) -> ProducerEntry:
        return ProducerEntry(self.producer_id, self.epoch, self.last_timestamp,
                             deque(self.batches, maxlen=BATCHES_KEPT), self.coordinator_epoch,
                             self.current_txn_first_offset)

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:  # a new epoch starts its sequences over
            self.batches.clear()
            self.epoch = epoch


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # offset of the marker
    is_aborted: bool


class TxnMetadata(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int = NO_OFFSET  # the marker's offset once completed


class LastRecord(NamedTuple):
    """What the cleaner must keep of an active producer (Kafka's LastRecord)."""

    last_data_offset: int  # -1 when the producer's last entry is a marker
    producer_epoch: int


# The batches of one append that ``prepare`` accepted, to ``apply`` in order.
ProducerAppend = list[tuple[BatchHeader, EndTxnMarker | None]]


def _apply_batch(entry: ProducerEntry, header: BatchHeader,
                 marker: EndTxnMarker | None) -> TxnMetadata | CompletedTxn | None:
    """Change ``entry`` for one batch of its producer; the transaction it starts or completes."""
    if header.attributes & CONTROL_MASK:
        if marker is None:
            return None  # the cleaner emptied it: its transaction is gone from the log
        completed = None
        if entry.current_txn_first_offset >= 0:
            completed = CompletedTxn(entry.producer_id, entry.current_txn_first_offset,
                                     header.base_offset, marker.is_abort)
        entry.set_epoch(header.producer_epoch)
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.current_txn_first_offset = NO_OFFSET
        entry.last_timestamp = header.max_timestamp
        return completed
    entry.set_epoch(header.producer_epoch)
    entry.batches.append(BatchMetadata(header.base_sequence, header.last_sequence,
                                       header.base_offset, header.last_offset, header.max_timestamp))
    entry.last_timestamp = header.max_timestamp  # the last batch's, older or not (as Kafka)
    if entry.current_txn_first_offset < 0 and header.is_transactional:
        entry.current_txn_first_offset = header.base_offset
        return TxnMetadata(entry.producer_id, header.base_offset)
    return None


class ProducerStateManager:
    """The producers of one partition; the Log drives it (see the module docstring).

    ``find_duplicate(header)``, ``prepare(batches, origin)`` then ``apply(append)``
    per append; ``first_unstable_offset()``, ``first_undecided_offset()``,
    ``ongoing_transactions()``, ``unreplicated_transactions()``,
    ``on_high_watermark_updated(hw)``; ``last_records()`` for the cleaner;
    ``producers`` maps producer id -> ``ProducerEntry``.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._snapshots = SnapshotFiles(directory, SNAPSHOT_SUFFIX, keep_segment_bases=True)
        self.producers: dict[int, ProducerEntry] = {}
        self._ongoing: dict[int, int] = {}  # first offset -> producer id
        self._ongoing_firsts: list[int] = []  # sorted first offsets of ongoing transactions
        self._unreplicated: dict[int, TxnMetadata] = {}  # first offset -> completed transaction
        self._unreplicated_firsts: list[int] = []
        self._verifications: dict[int, VerificationState] = {}  # producer id -> pending verification

    # ----------------------------------------------------------- verification

    def maybe_start_verification(self, producer_id: int, seq: int, epoch: int,
                                 now_ms: int) -> VerificationGuard | None:
        """The guard a producer's transactional batch must bring back once its coordinator
        has verified the partition; None when its transaction here is already ongoing
        (nothing to verify)."""
        if self.has_ongoing_transaction(producer_id):
            return None
        state = self._verifications.get(producer_id)
        if state is None:
            state = self._verifications[producer_id] = VerificationState(now_ms, seq, epoch)
        else:
            state.update(seq, epoch)
        return state.guard

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0

    def verification_guard(self, producer_id: int) -> VerificationGuard | None:
        state = self._verifications.get(producer_id)
        return None if state is None else state.guard

    # ------------------------------------------------------------- validation

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The batch already appended with ``header``'s epoch and sequence range, if any."""
        entry = self.producers.get(header.producer_id)
        if entry is None or entry.epoch != header.producer_epoch:
            return None
        first_seq, last_seq = header.base_sequence, header.last_sequence
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def prepare(self, batches: list[tuple[BatchHeader, EndTxnMarker | None]],
                origin: AppendOrigin, guard: VerificationGuard | None = SKIP_VERIFICATION) -> ProducerAppend:
        """Validate the batches of one append (offsets assigned), in order.

        ``batches`` are (header, marker) pairs: the marker of a control batch, None
        for a data batch or a control batch without a marker (emptied by the
        cleaner). Batches without a producer id are skipped. A batch is checked
        against the state its producer's earlier batches in the same append leave.
        ``guard`` is the verification a CLIENT append brings (see the module docstring).
        Raises InvalidRecordError; nothing changes until ``apply``.
        """
        if origin == AppendOrigin.REPLICATION:
            return [(h, m) for h, m in batches if h.producer_id >= 0]
        if len(batches) == 1:  # the usual Produce request: one batch per partition
            header, marker = batches[0]
            if header.producer_id < 0:
                return []
            current = self.producers.get(header.producer_id)
            if current is None:
                self._check(ProducerEntry(header.producer_id, -1, -1), False, header, marker, origin, guard)
            else:
                self._check(current, True, header, marker, origin, guard)
            return batches
        out: ProducerAppend = []
        seen: set[int] = set()
        working: dict[int, ProducerEntry] = {}  # copies, for producers with several batches
        for header, marker in batches:
            pid = header.producer_id
            if pid < 0:
                continue
            if pid in seen:
                entry = working.get(pid)
                if entry is None:
                    current = self.producers.get(pid)
                    entry = current.copy() if current is not None else ProducerEntry(pid, -1, -1)
                    for h, m in out:
                        if h.producer_id == pid:
                            _apply_batch(entry, h, m)
                    working[pid] = entry
                self._check(entry, True, header, marker, origin, guard)
                _apply_batch(entry, header, marker)
            else:
                current = self.producers.get(pid)
                if current is None:
                    self._check(ProducerEntry(pid, -1, -1), False, header, marker, origin, guard)
                else:
                    self._check(current, True, header, marker, origin, guard)
                seen.add(pid)
            out.append((header, marker))
        return out

    def _check(self, entry: ProducerEntry, known: bool, header: BatchHeader, marker: EndTxnMarker | None,
               origin: AppendOrigin, guard: VerificationGuard | None) -> None:
        if header.attributes & CONTROL_MASK:
            if marker is None:
                return
            self._check_epoch(entry, header)
            if entry.coordinator_epoch > marker.coordinator_epoch:
                raise InvalidRecordError(
                    "transaction_coordinator_fenced",
                    f"marker at offset {header.base_offset} for producer {entry.producer_id} comes from "
                    f"coordinator epoch {marker.coordinator_epoch}, older than {entry.coordinator_epoch}")
            return
        if origin == AppendOrigin.CLIENT or guard is not SKIP_VERIFICATION:
            self._check_verification(entry, header, guard, sequenced=origin == AppendOrigin.CLIENT)
        self._check_epoch(entry, header)
        if origin == AppendOrigin.CLIENT:
            self._check_sequence(entry, header, known)
        if entry.current_txn_first_offset >= 0 and not header.is_transactional:
            raise InvalidRecordError(
                "invalid_txn_state",
                f"non-transactional batch at offset {header.base_offset} from producer "
                f"{entry.producer_id}, whose transaction from offset "
                f"{entry.current_txn_first_offset} is still open")

    def _check_verification(self, entry: ProducerEntry, header: BatchHeader,
                            guard: VerificationGuard | None, sequenced: bool) -> None:
        state = self._verifications.get(entry.producer_id)
        # (Once an earlier batch of the same append has opened the transaction, the later
        # ones follow it: the entry goes when the append is applied.)
        if sequenced and state is not None and entry.current_txn_first_offset < 0 \
                and header.base_sequence > state.lowest_seq:
            raise InvalidRecordError(
                "out_of_order_sequence_number",
                f"producer {entry.producer_id} sent sequence {header.base_sequence} while sequence "
                f"{state.lowest_seq} waits for its transaction to be verified")
        if guard is SKIP_VERIFICATION or not header.is_transactional or entry.current_txn_first_offset >= 0:
            return
        if guard is None or state is None or state.guard is not guard:
            raise InvalidRecordError(
                "invalid_txn_state",
                f"transactional batch of producer {entry.producer_id} at offset {header.base_offset} "
                f"was not part of an ongoing transaction")

    @staticmethod
    def _check_epoch(entry: ProducerEntry, header: BatchHeader) -> None:
        if header.producer_epoch < entry.epoch:
            raise InvalidRecordError(
                "invalid_producer_epoch",
                f"epoch {header.producer_epoch} of producer {entry.producer_id} at offset "
                f"{header.base_offset} is older than its current epoch {entry.epoch}")

    @staticmethod
    def _check_sequence(entry: ProducerEntry, header: BatchHeader, known: bool) -> None:
        first_seq = header.base_sequence
        if first_seq < 0:
            raise InvalidRecordError(
                "invalid_record",
                f"batch of producer {entry.producer_id} has no sequence number ({first_seq})")
        if not known:
            # No state for it (its batches went with segments retention or DeleteRecords
            # removed, or it expired): any sequence starts it, as in Kafka (KIP-360).
            return
        if header.producer_epoch != entry.epoch:
            if first_seq != 0:
                raise InvalidRecordError(
                    "out_of_order_sequence_number",
                    f"new epoch {header.producer_epoch} must start at sequence 0, got {first_seq}")
            return
        expected = (entry.last_seq + 1) % _SEQ_WRAP
        if first_seq != expected:
            raise InvalidRecordError(
                "out_of_order_sequence_number",
                f"producer {entry.producer_id} sent sequence {first_seq}, expected {expected}")

    def apply(self, append: ProducerAppend) -> list[tuple[CompletedTxn, int]]:
        """Install a prepared append, batch by batch; returns the transactions it completed,
        each with the last stable offset at its marker (for the transaction index)."""
        out = []
        producers = self.producers
        verifications = self._verifications
        for header, marker in append:
            pid = header.producer_id
            entry = producers.get(pid)
            if entry is None:
                entry = producers[pid] = ProducerEntry(pid, -1, -1)
            if verifications and header.is_transactional:
                # Its transaction started here, or a marker ended it: a verification made
                # before either no longer holds (Kafka's clearVerificationStateEntry).
                verifications.pop(pid, None)
            event = _apply_batch(entry, header, marker)
            if event is None:
                continue
            if isinstance(event, CompletedTxn):
                out.append((event, self.last_stable_offset(event)))
                self.complete_txn(event)
            else:
                self._add(self._ongoing, self._ongoing_firsts, event.first_offset, event.producer_id)
        return out

    def update(self, header: BatchHeader, marker: EndTxnMarker | None = None) -> list[tuple[CompletedTxn, int]]:
        """Apply one replicated batch (no checks); returns the transactions it completes."""
        return self.apply(self.prepare([(header, marker)], AppendOrigin.REPLICATION))

    # ----------------------------------------------------------- transactions

    @staticmethod
    def _add(index: dict, firsts: list[int], first_offset: int, value: object) -> None:
        if first_offset not in index:
            insort(firsts, first_offset)
        index[first_offset] = value

    @staticmethod
    def _remove(index: dict, firsts: list[int], first_offset: int) -> None:
        if index.pop(first_offset, None) is not None:
            del firsts[bisect_left(firsts, first_offset)]

    def last_stable_offset(self, txn: CompletedTxn) -> int:
        """The LSO at ``txn``'s marker, for its index entry (before it is completed).

        The first offset of the earliest ongoing transaction of another producer,
        else the offset after the marker.
        """
        for first in self._ongoing_firsts:
            if self._ongoing[first] != txn.producer_id:
                return first
        return txn.last_offset + 1

    def complete_txn(self, txn: CompletedTxn) -> None:
        """Mark ``txn`` complete; it stays unstable until the high watermark passes its marker."""
        if self._ongoing.get(txn.first_offset) != txn.producer_id:
            raise ValueError(f"transaction {txn} was not started")
        self._remove(self._ongoing, self._ongoing_firsts, txn.first_offset)
        self._add(self._unreplicated, self._unreplicated_firsts, txn.first_offset,
                  TxnMetadata(txn.producer_id, txn.first_offset, txn.last_offset))

    def restore_unreplicated(self, txns: Iterable[TxnMetadata]) -> None:
        """Take back completed transactions held before a reload (their markers survived it)."""
        for txn in txns:
            self._add(self._unreplicated, self._unreplicated_firsts, txn.first_offset, txn)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below ``high_watermark``."""
        self._drop_unreplicated_below(high_watermark)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._drop_unreplicated_below(log_start_offset)

    def _drop_unreplicated_below(self, offset: int) -> None:
        if not self._unreplicated:
            return
        for first in [f for f, t in self._unreplicated.items() if t.last_offset < offset]:
            self._remove(self._unreplicated, self._unreplicated_firsts, first)

    def first_undecided_offset(self) -> int | None:
        """First offset of the earliest ongoing transaction (no marker yet)."""
        return self._ongoing_firsts[0] if self._ongoing_firsts else None

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest transaction that is ongoing or whose marker is not yet
        below the high watermark."""
        candidates = []
        if self._ongoing_firsts:
            candidates.append(self._ongoing_firsts[0])
        if self._unreplicated_firsts:
            candidates.append(self._unreplicated_firsts[0])
        return min(candidates) if candidates else None

    def ongoing_transactions(self) -> list[TxnMetadata]:
        """Ongoing transactions by first offset."""
        return [TxnMetadata(self._ongoing[f], f) for f in self._ongoing_firsts]

    def unreplicated_transactions(self) -> list[TxnMetadata]:
        """Completed transactions whose marker the high watermark has not passed, by first offset."""
        return [self._unreplicated[f] for f in self._unreplicated_firsts]

    def last_records(self) -> dict[int, LastRecord]:
        return {pid: LastRecord(e.last_data_offset, e.epoch) for pid, e in self.producers.items()}

    # ---------------------------------------------------------- housekeeping

    def _clear(self) -> None:
        # Pending verifications stay (as Kafka's): a truncation or reload does not end the
        # transactions they wait for; they go when applied or with expired producers.
        self.producers = {}
        self._ongoing, self._ongoing_firsts = {}, []
        self._unreplicated, self._unreplicated_firsts = {}, []

    def truncate_fully(self) -> None:
        """Forget everything, snapshots included (the log restarts empty)."""
        self._clear()
        self.delete_snapshots_after(-1)

    @staticmethod
    def _expired(entry: ProducerEntry, now_ms: int, expiration_ms: int) -> bool:
        """Kafka's isProducerExpired: its last batch is ``expiration_ms`` old or more, and
        it has no open transaction."""
        return not entry.has_ongoing_txn and now_ms - entry.last_timestamp >= expiration_ms

    def remove_expired(self, now_ms: int, expiration_ms: int) -> None:
        """Drop producers idle for ``expiration_ms`` or longer; never one with an open transaction."""
        for pid in [p for p, e in self.producers.items() if self._expired(e, now_ms, expiration_ms)]:
            del self.producers[pid]
        for pid in [p for p, v in self._verifications.items() if now_ms - v.started_ms >= expiration_ms]:
            del self._verifications[pid]

    # -------------------------------------------------------------- snapshots

    def snapshot_offsets(self) -> list[int]:
        return self._snapshots.offsets()

    def sync_snapshots(self, after: int, up_to: int) -> None:
        """fsync the snapshots taken in (``after``, ``up_to``] (a roll writes its own
        without) and the directory; any thread (a snapshot gone meanwhile is skipped)."""
        self._snapshots.sync(after, up_to)

    def take_snapshot(self, offset: int, fsync: bool = True) -> None:
        """Write the state as of ``offset`` (every batch below it applied); the newest
        two are kept, and those at segments' bases (``SnapshotFiles``)."""
        body = json.dumps(
            [
                [e.producer_id, e.epoch, e.last_timestamp,
                 [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp] for b in e.batches],
                 e.coordinator_epoch, e.current_txn_first_offset]
                for e in self.producers.values()
            ],
            separators=(",", ":"),
        ).encode()
        data = json.dumps({"version": SNAPSHOT_VERSION, "crc": crc32c(body)}).encode() + b"\n" + body
        self._snapshots.write(offset, data, fsync)

    def delete_snapshot(self, offset: int) -> None:
        self._snapshots.delete(offset)

    def delete_snapshots_after(self, offset: int) -> None:
        self._snapshots.delete_after(offset)

    def load_latest_snapshot(self, max_offset: int, now_ms: int | None = None,
                             expiration_ms: int | None = None) -> int:
        """Load the newest valid snapshot at or below ``max_offset``; return its offset or -1.

        Everything held before is dropped, the transactions too: a snapshot's
        open transactions become ongoing; completed ones are taken as replicated.
        With ``now_ms`` and ``expiration_ms``, a producer the snapshot holds that has
        expired by then is left out (Kafka's loadFromSnapshot).
        """
        self._clear()
        for snap in self._snapshots.newest_first(max_offset):
            try:
                head, _, body = self._snapshots.read(snap).partition(b"\n")
                meta = json.loads(head)
                version = meta.get("version")
                if version not in (1, 2, SNAPSHOT_VERSION) or crc32c(body) != meta.get("crc"):
                    raise ValueError("bad snapshot")
                for item in json.loads(body):
                    pid, epoch, ts, batches = item[:4]
                    coordinator_epoch, txn_first = item[4:6] if version >= 2 else (-1, NO_OFFSET)
                    entry = ProducerEntry(int(pid), int(epoch), int(ts),
                                          coordinator_epoch=int(coordinator_epoch),
                                          current_txn_first_offset=int(txn_first))
                    for b in batches:  # (no timestamp before version 3: -1)
                        entry.batches.append(BatchMetadata(*(int(x) for x in b)))
                    if version < 3 and entry.batches:
                        entry.batches[-1].timestamp = entry.last_timestamp
                    if now_ms is not None and expiration_ms is not None \
                            and self._expired(entry, now_ms, expiration_ms):
                        continue
                    self.producers[entry.producer_id] = entry
                    if entry.has_ongoing_txn:
                        self._add(self._ongoing, self._ongoing_firsts, entry.current_txn_first_offset,
                                  entry.producer_id)
                return snap
            except (OSError, ValueError, TypeError, KeyError, AttributeError):
                self.delete_snapshot(snap)
                self._clear()
        return -1
