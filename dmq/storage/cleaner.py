"""LogCleaner: compaction of logs whose ``cleanup.policy`` includes ``compact``.

A pass over one log:

1. pick the log with the highest dirty ratio (bytes written since its last
   cleaning over the bytes of its cleanable segments) at or above
   ``min.cleanable.dirty.ratio``;
2. ``plan()`` (event-loop thread) snapshots the paths of its cleanable
   segments: the non-active segments wholly below the last stable offset (the
   active segment is never cleaned, nor anything an open or unreplicated
   transaction could still change), with the aborted transactions overlapping
   them (from the transaction indexes) and each active producer's last record;
3. ``clean()`` (background thread) reads those files by path, a batch at a
   time, and builds key -> latest offset over the dirty part (from the offset
   the last pass reached; records of aborted transactions excluded) until the
   map holds ``log.cleaner.dedupe.buffer.size`` (Kafka's buildOffsetMap). It
   writes ``<base>.log.cleaned`` files for the segments below where the map
   reached, only for segments that change, keeping a record unless the map
   holds a later offset of its key: a key the map lacks was deduplicated by an
   earlier pass or comes after the map's reach. The next pass starts there.
   A tombstone (null value) is kept by the first pass that sees it,
   which stamps its batch with a delete horizon (KIP-534: attribute bit 6, base
   timestamp = now + ``delete.retention.ms``), and dropped by the first pass
   after that horizon: a consumer that read the key's older value has
   ``delete.retention.ms`` from the cleaning to see the delete, whatever the
   tombstone's own timestamp (an event-time producer's may be days old). Kept
   records are copied as raw bytes inside their original batch header (a
   stamped batch's re-encoded with deltas from the horizon), so offsets,
   timestamps and producer fields do not change;
4. ``swap()`` (event-loop thread) replaces each still-present segment by its
   cleaned file (and its transaction index by the cleaned index) and rebuilds
   its other indexes, then records the cleaned offset in
   ``cleaner-offset-checkpoint``.

``cleaner-offset-checkpoint`` never says a log is cleaned past what it is: with a
LogManager (the broker's), a truncation below a log's cleaned offset lowers it and
writes the file before the truncation returns, so before anything is appended
after it (Kafka's LogManager.truncateTo); a deleted log's entry goes, also one
whose directory the LogManager removed at start (Kafka's asyncDelete); and the
file is written with the entries of held logs only (Kafka's updateCheckpoints).
Else a restart read back an offset above records written anew, they counted as
deduplicated, and a tombstone among them went while the value it deletes stayed.

Transactions follow Kafka's LogCleaner (CleanedTransactionMetadata) exactly:

- records of aborted transactions are removed whatever their keys, and never
  shadow an older committed value of the same key;
- an ABORT marker is kept while its transaction still had batches in this pass
  (they are removed in it), and its entry is written to the cleaned
  transaction index; a COMMIT marker is kept while batches of its transaction
  remain. Once a marker's transaction is gone it gets a delete horizon (batch
  attribute bit 6, base timestamp = now + ``delete.retention.ms``, KIP-534) and
  it is removed in the first pass after that horizon, so a consumer that read
  the transaction's records before they were cleaned still finds the marker;
  its index entry is dropped as soon as its records are gone;
- the batch holding an active producer's last data record, or the marker that
  is its last entry, is kept even with no record left (an empty batch), so
  producer state rebuilt from the log keeps its sequence and epoch.

A log is planned again with no new data once a kept tombstone or marker
reaches its horizon, or right after a pass that removed a whole batch of a
transaction (its marker may then get its horizon).

Invariants: the latest committed or non-transactional record of every key
below the cleaned offset survives; offsets are never reassigned; a
read_committed consumer never sees an aborted record, before, during or after
cleaning; a cleaned copy replaces only the very segment object it was made
from, and nothing is replaced in a log truncated or closed (deleted, shut down)
while cleaning ran (its cleaned files are discarded). A replaced segment's
descriptor stays open FD_CLOSE_DELAY_S for fetch answers holding slices of it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import BinaryIO

from dmq.record.batch import HEADER_SIZE, BatchHeader, InvalidRecordError, parse_header
from dmq.record.control import ControlRecordType, parse_control_type
from dmq.record.records import RawRecord, raw_records, rebuild_batch
from dmq.storage.log import Log, now_ms
from dmq.storage.log_manager import LogManager, read_checkpoint, write_checkpoint
from dmq.storage.producer_state import LastRecord
from dmq.storage.segment import LogSegment
from dmq.storage.txn_index import AbortedTxn, write_entries

log = logging.getLogger("dmq.cleaner")

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"
READ_BUFFER = 1 << 20
# Kafka's log.cleaner.dedupe.buffer.size default, and what one key of the offset map is
# counted as besides its bytes (a dict slot, the key's bytes object and its offset's int).
DEDUPE_BUFFER_BYTES = 128 * 1024 * 1024
MAP_ENTRY_BYTES = 120


@dataclass(slots=True)
class CleanPlan:
    log: Log
    segments: list[tuple[int, str, int]]  # (base offset, path, size) of the cleanable segments
    end_offset: int  # offsets below this are covered
    delete_retention_ms: int
    now: int
    aborted: list[AbortedTxn] = field(default_factory=list)  # aborted transactions overlapping them
    last_records: dict[int, LastRecord] = field(default_factory=dict)  # of active producers
    txn_indexes: dict[int, list[AbortedTxn]] = field(default_factory=dict)  # base -> entries now
    # The planned segments themselves and the log's truncation count: swap() installs a
    # cleaned copy only over the very segment it was made from, in a log neither truncated
    # nor closed since (a truncation can cut a segment and refill it to the same size).
    segment_objects: list[LogSegment] = field(default_factory=list)
    truncations: int = 0
    first_dirty: int = 0  # offsets below this were deduplicated by earlier passes


@dataclass(slots=True)
class CleanResult:
    plan: CleanPlan
    # (base, cleaned log path, original size, cleaned transaction index path or None: no entry)
    cleaned: list[tuple[int, str, int, str | None]] = field(default_factory=list)
    tombstone_due: int | None = None  # when the next kept tombstone or marker may be dropped
    end_offset: int = 0  # offsets below this were deduplicated (the offset map's reach)
    records_read: int = 0
    records_kept: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


class SegmentChangedError(Exception):
    """A planned segment is gone or shorter than planned: deleted or truncated meanwhile
    (not cleaned now)."""


class CorruptSegmentError(Exception):
    """A planned segment's bytes are not whole batches: the log is not cleaned again
    (Kafka's uncleanable partitions) rather than cleaned into a copy without the rest."""


def _batches(path: str, size: int) -> Generator[bytes, None, None]:
    """Each batch in the first ``size`` bytes of the segment file at ``path``, read a batch
    at a time (segments may be as large as ``segment.bytes``)."""
    try:
        f = open(path, "rb", buffering=READ_BUFFER)  # noqa: SIM115 - closed below, a generator
    except FileNotFoundError:
        raise SegmentChangedError(f"{path} was deleted") from None
    with f:
        pos = 0
        while pos < size:
            head = f.read(min(HEADER_SIZE, size - pos))
            if len(head) < min(HEADER_SIZE, size - pos):
                raise SegmentChangedError(f"{path} ends at {pos + len(head)}, {size} bytes were planned")
            header = parse_header(head) if len(head) == HEADER_SIZE else None
            if header is None or header.batch_length < HEADER_SIZE - 12 or pos + header.size > size:
                raise CorruptSegmentError(f"{path}: no whole record batch at position {pos} of {size}")
            rest = f.read(header.size - HEADER_SIZE)
            if len(rest) < header.size - HEADER_SIZE:
                raise SegmentChangedError(f"{path} ends inside the batch at {pos}, {size} bytes were planned")
            yield head + rest
            pos += header.size


class _CleanedFile:
    """The cleaned copy of one segment, written only once it differs from the original:
    until the first change the output is the original's prefix, copied in when it comes."""

    def __init__(self, source: str, path: str) -> None:
        self.source, self.path = source, path
        self.file: BinaryIO | None = None
        self.prefix = 0  # bytes of the original that the output begins with, unwritten
        self.size = 0

    def same(self, batch: bytes) -> None:
        """The original's next batch, as it was."""
        if self.file is None:
            self.prefix += len(batch)
            self.size += len(batch)
        else:
            self.write(batch)

    def write(self, data: bytes) -> None:
        if self.file is None:
            try:
                self.file = open(self.path, "wb")  # noqa: SIM115 - closed in finish() or discard()
                with open(self.source, "rb") as src:
                    left = self.prefix
                    while left:
                        chunk = src.read(min(left, READ_BUFFER))
                        if not chunk:
                            raise SegmentChangedError(f"{self.source} is shorter than its planned prefix")
                        self.file.write(chunk)
                        left -= len(chunk)
            except FileNotFoundError:  # the segment (or the log's directory) was deleted
                raise SegmentChangedError(f"{self.source} was deleted") from None
        self.file.write(data)
        self.size += len(data)

    @property
    def changed(self) -> bool:
        return self.file is not None

    def finish(self) -> None:
        """Write the copy out, the original's unchanged prefix too, and fsync it."""
        if self.file is None:
            self.write(b"")
        assert self.file is not None
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()

    def discard(self) -> None:
        if self.file is not None:
            self.file.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


def _control_type(records: list[RawRecord]) -> ControlRecordType | None:
    """The type of a control batch's record; None for a batch the cleaner emptied."""
    if not records:
        return None
    try:
        return parse_control_type(records[0].key)
    except InvalidRecordError:
        return ControlRecordType.UNKNOWN


class _TxnWalk:
    """Kafka's CleanedTransactionMetadata: transaction state along one pass, in offset order.

    ``aborted`` are the index entries of the aborted transactions overlapping the
    pass; ``index`` collects the entries to keep for the segment being written.
    """

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._aborted = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._committing: set[int] = set()  # producers whose current transaction had batches
        self._aborting: dict[int, tuple[AbortedTxn, bool]] = {}  # pid -> (entry, batches seen)
        self.index: list[AbortedTxn] = []
        self.removed_txn_batch = False  # a transaction's batch was removed: its marker may go next

    def _reach(self, offset: int) -> None:
        while self._next < len(self._aborted) and self._aborted[self._next].first_offset <= offset:
            txn = self._aborted[self._next]
            self._aborting.setdefault(txn.producer_id, (txn, False))
            self._next += 1

    def on_data(self, header: BatchHeader) -> bool:
        """True when the batch belongs to an aborted transaction (discard it)."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        aborting = self._aborting.get(header.producer_id)
        if aborting is not None:
            self._aborting[header.producer_id] = (aborting[0], True)
            return True
        self._committing.add(header.producer_id)
        return False

    def on_control(self, header: BatchHeader, control_type: ControlRecordType | None) -> bool:
        """True when no batch of the marker's transaction remains (the marker may go)."""
        self._reach(header.last_offset)
        if control_type is None:
            return True
        if control_type == ControlRecordType.ABORT:
            aborting = self._aborting.pop(header.producer_id, None)
            if aborting is not None and aborting[1]:
                self.index.append(aborting[0])
                return False
            return True
        if control_type == ControlRecordType.COMMIT:
            if header.producer_id in self._committing:
                self._committing.discard(header.producer_id)
                return False
            return True
        return False


def _is_last_of_producer(header: BatchHeader, last_records: dict[int, LastRecord]) -> bool:
    last = last_records.get(header.producer_id) if header.producer_id >= 0 else None
    if last is None:
        return False
    if last.last_data_offset >= 0:
        return header.last_offset == last.last_data_offset
    return header.is_control and header.producer_epoch == last.producer_epoch


class LogCleaner:
    def __init__(self, data_dir: str, dedupe_buffer_bytes: int = DEDUPE_BUFFER_BYTES,
                 log_manager: LogManager | None = None) -> None:
        """``log_manager``: the manager of the logs of ``data_dir``; the cleaner follows its
        truncations and removals and writes the entries of its held logs only."""
        self.data_dir = data_dir
        self.log_manager = log_manager
        if log_manager is not None:
            log_manager.add_listeners(self.truncated, self.forget)
        self._checkpoint_due = False  # a write failed: retried at the next plan()
        self.dedupe_buffer_bytes = dedupe_buffer_bytes
        self.path = os.path.join(data_dir, CLEANER_CHECKPOINT)
        self.cleaned_to: dict[tuple[str, int], int] = read_checkpoint(self.path)
        # When a cleaned log next holds a tombstone past delete.retention.ms (KIP-534)
        # or a marker that may go: such a log is cleanable even with no new data.
        # Unknown after a restart: 0.
        self.tombstone_due: dict[tuple[str, int], int] = {}
        # Logs a pass found damaged (CorruptSegmentError): not planned again until restart.
        self.uncleanable: set[tuple[str, int]] = set()
        # Each log's truncation count at its last pass (see _first_dirty).
        self._truncations_seen: dict[tuple[str, int], int] = {}
        if log_manager is not None and log_manager.loaded:
            # Made after load_logs, which removed directories unheard: their entries go now.
            self._drop_unheld(log_manager)

    def cleanable_segments(self, lg: Log, now: int | None = None) -> list[LogSegment]:
        """Non-active segments wholly below the last stable offset and before the first dirty
        segment holding a record younger than min.compaction.lag.ms (Kafka's first
        uncleanable offset, LogCleanerManager.cleanableOffsets)."""
        lso = lg.last_stable_offset()
        segments = lg.segments
        out = [s for i, s in enumerate(segments[:-1]) if segments[i + 1].base_offset <= lso]
        lag = lg.config.min_compaction_lag_ms
        if lag > 0:
            now = now_ms() if now is None else now
            first_dirty = self.cleaned_to.get((lg.topic, lg.partition), 0)
            for i, s in enumerate(out):
                if s.next_offset > first_dirty and s.largest_timestamp > now - lag:
                    return out[:i]
        return out

    def dirty_ratio(self, lg: Log, now: int | None = None) -> float:
        segments = self.cleanable_segments(lg, now)
        total = sum(s.size for s in segments)
        if total == 0:
            return 0.0
        first_dirty = self.cleaned_to.get((lg.topic, lg.partition), 0)
        dirty = sum(s.size for s in segments if s.next_offset > first_dirty)
        return dirty / total

    def _compaction_overdue(self, lg: Log, segments: list[LogSegment], now: int) -> bool:
        """Whether a dirty cleanable segment's first batch is older than max.compaction.lag.ms:
        the log is cleaned whatever its dirty ratio (Kafka's needCompactionNow)."""
        lag = lg.config.max_compaction_lag_ms
        first_dirty = self.cleaned_to.get((lg.topic, lg.partition), 0)
        return any(s.next_offset > first_dirty and 0 < s.first_batch_timestamp < now - lag for s in segments)

    def plan(self, logs: list[Log], now: int | None = None) -> CleanPlan | None:
        now = now_ms() if now is None else now
        if self._checkpoint_due:
            self._try_checkpoint()
        best: tuple[float, Log] | None = None
        for lg in logs:
            if "compact" not in lg.config.cleanup_policy or len(lg.segments) < 2 \
                    or (lg.topic, lg.partition) in self.uncleanable:
                continue
            segments = self.cleanable_segments(lg, now)
            if not segments:
                continue
            ratio = self.dirty_ratio(lg, now)
            due = self.tombstone_due.get((lg.topic, lg.partition), 0)
            dirty_enough = ratio >= float(lg.config["min.cleanable.dirty.ratio"]) and ratio > 0
            overdue = ratio > 0 and self._compaction_overdue(lg, segments, now)
            if (dirty_enough or overdue or now >= due) and (best is None or ratio > best[0]):
                best = (ratio, lg)
        if best is None:
            return None
        lg = best[1]
        cleanable = self.cleanable_segments(lg, now)
        end_offset = lg.segments[len(cleanable)].base_offset
        return CleanPlan(
            lg, [(s.base_offset, s.log_path, s.size) for s in cleanable], end_offset,
            int(lg.config["delete.retention.ms"]), now,
            aborted=lg.aborted_transactions(cleanable[0].base_offset, end_offset),
            last_records=lg.producer_state.last_records(),
            txn_indexes={s.base_offset: list(s.txn_index.entries) for s in cleanable},
            segment_objects=list(cleanable), truncations=lg.truncations,
            first_dirty=self._first_dirty(lg, cleanable[0].base_offset),
        )

    def _first_dirty(self, lg: Log, first: int) -> int:
        """Where the dirty part of ``lg`` starts: the offset the last pass reached, lowered
        to the lowest truncation the log has seen since that pass (records from there may
        have been cut and written anew, never deduplicated: Kafka's
        maybeTruncateCheckpoint; after a restart every truncation since the log opened
        counts), and to the log's start when it is past the log's end (a checkpoint left by
        an earlier log of the same name: Kafka's cleanableOffsets resets it too)."""
        key = (lg.topic, lg.partition)
        cleaned = self.cleaned_to.get(key, 0)
        if self._truncations_seen.get(key) != lg.truncations and lg.truncated_to is not None:
            cleaned = min(cleaned, lg.truncated_to)
        if cleaned > lg.log_end_offset:
            cleaned = 0
        self.cleaned_to[key] = cleaned
        return max(cleaned, first)

    def _offset_map(self, plan: CleanPlan) -> tuple[dict[bytes, int], int]:
        """Key -> latest offset over the dirty segments (from ``plan.first_dirty``), records
        of aborted transactions excluded, and the offset the map reaches: it holds at most
        ``dedupe_buffer_bytes`` (each key counted as its length plus MAP_ENTRY_BYTES), and
        stops before the batch that would pass that (Kafka's buildOffsetMap with its
        log.cleaner.dedupe.buffer.size). At least one batch is mapped, so passes advance."""
        latest: dict[bytes, int] = {}
        used = 0
        ends = [b for b, _p, _s in plan.segments[1:]] + [plan.end_offset]
        dirty = [(seg, end) for seg, end in zip(plan.segments, ends, strict=True) if end > plan.first_dirty]
        if not dirty:
            return latest, plan.end_offset
        # Aborted transactions whose marker comes before the dirty part ended there.
        walk = _TxnWalk([t for t in plan.aborted if t.last_offset >= plan.first_dirty])
        for (_base, path, size), _end in dirty:
            with contextlib.closing(_batches(path, size)) as batches:  # closed on the early return too
                for batch in batches:
                    header = parse_header(batch)
                    if header.last_offset < plan.first_dirty:
                        continue  # deduplicated by an earlier pass
                    if header.is_control:
                        walk.on_control(header, _control_type(raw_records(batch)[1]))
                        continue
                    if walk.on_data(header):
                        continue  # aborted: its keys do not count
                    records = raw_records(batch)[1]
                    cost = sum(len(r.key) + MAP_ENTRY_BYTES for r in records
                               if r.key is not None and r.key not in latest)
                    if latest and used + cost > self.dedupe_buffer_bytes:
                        return latest, header.base_offset
                    used += cost
                    for r in records:
                        if r.key is not None:
                            latest[r.key] = r.offset
        return latest, plan.end_offset

    def clean(self, plan: CleanPlan) -> CleanResult:
        """Write cleaned copies of the planned segments the offset map reaches (safe on a
        background thread; one batch in memory at a time)."""
        result = CleanResult(plan)
        latest, reach = self._offset_map(plan)
        result.end_offset = reach
        walk = _TxnWalk(plan.aborted)
        due: list[int] = []
        for base, path, size in plan.segments:
            if base >= reach:
                break  # past the map: next pass
            walk.index = []
            out = _CleanedFile(path, path + CLEANED_SUFFIX)
            try:
                with contextlib.closing(_batches(path, size)) as batches:
                    for batch in batches:
                        self._clean_batch(plan, batch, latest, reach, walk, out, due, result)
                result.bytes_before += size
                result.bytes_after += out.size
                # Also when only the transaction index changed: the log as it was, beside it.
                if out.changed or walk.index != plan.txn_indexes.get(base, []):
                    out.finish()
                    cleaned_index = None
                    if walk.index:
                        cleaned_index = path[: -len(".log")] + ".txnindex" + CLEANED_SUFFIX
                        write_entries(cleaned_index, walk.index)
                    result.cleaned.append((base, out.path, size, cleaned_index))
            except BaseException:
                out.discard()
                for _b, cleaned, _s, cleaned_index in result.cleaned:
                    for leftover in (cleaned, cleaned_index):
                        if leftover is not None:
                            with contextlib.suppress(FileNotFoundError):
                                os.unlink(leftover)
                raise
        if walk.removed_txn_batch:
            due.append(plan.now)  # its marker may get a delete horizon in the next pass
        result.tombstone_due = min(due) if due else None
        return result

    @staticmethod
    def _clean_batch(plan: CleanPlan, batch: bytes, latest: dict[bytes, int], reach: int,
                     walk: _TxnWalk, out: _CleanedFile, due: list[int], result: CleanResult) -> None:
        header, records = raw_records(batch)
        result.records_read += len(records)
        if header.base_offset >= reach:
            # Past the map (it stopped before a batch, so at a batch boundary): kept as
            # it is, tombstones and all, as Kafka keeps what its map did not reach (a
            # tombstone dropped here would bring back a value the map never saw). The
            # walk still follows it, for the transaction index entries it keeps.
            if header.is_control:
                walk.on_control(header, _control_type(records))
            else:
                walk.on_data(header)
            result.records_kept += len(records)
            out.same(batch)
            return
        if header.is_control:
            can_discard = walk.on_control(header, _control_type(records))
            delete_horizon = header.delete_horizon_ms
            discard_records = can_discard and delete_horizon is not None and delete_horizon <= plan.now
            kept = [] if discard_records else records
        else:
            can_discard = walk.on_data(header)
            # A record stays unless the map holds a later one of its key (a key the
            # map does not hold was deduplicated by an earlier pass, or comes after
            # the map's reach); a tombstone goes once its batch's delete horizon has
            # passed (KIP-534).
            expired = header.delete_horizon_ms is not None and header.delete_horizon_ms <= plan.now
            kept = [] if can_discard else [
                r for r in records
                if r.key is not None and r.offset >= latest.get(r.key, -1)
                and not (r.value is None and expired)
            ]
        result.records_kept += len(kept)
        if kept:
            if header.delete_horizon_ms is None and (
                    (header.is_control and can_discard)
                    or (not header.is_control and any(r.value is None for r in kept))):
                # The first pass that keeps a tombstone, or a marker whose
                # transaction is gone, stamps its batch with the delete horizon.
                horizon = plan.now + plan.delete_retention_ms
                out.write(rebuild_batch(batch, kept, horizon))
                due.append(horizon)
                return
            if header.delete_horizon_ms is not None and (
                    header.is_control or any(r.value is None for r in kept)):
                due.append(header.delete_horizon_ms)
            if len(kept) == len(records):
                out.same(batch)
            else:
                out.write(rebuild_batch(batch, kept))
        elif _is_last_of_producer(header, plan.last_records):
            # Kept empty: the producer's sequence and epoch stay in the log.
            if records:
                out.write(rebuild_batch(batch, []))
            else:
                out.same(batch)
        else:
            out.write(b"")  # the batch goes: from here on the copy differs
            if header.is_transactional and not header.is_control:
                walk.removed_txn_batch = True

    def swap(self, result: CleanResult) -> int:
        """Install cleaned segments (event-loop thread); returns how many were replaced."""
        plan = result.plan
        lg = plan.log
        stale = lg.closed or lg.truncations != plan.truncations
        planned = {s.base_offset: s for s in plan.segment_objects}
        replaced = 0
        for base, cleaned, original_size, cleaned_index in result.cleaned:
            segment = planned.get(base)
            idx = next((i for i, s in enumerate(lg.segments[:-1]) if s is segment), None)
            if stale or idx is None or lg.segments[idx].size != original_size:
                # Deleted, truncated or changed meanwhile: leave it alone.
                for path in (cleaned, cleaned_index):
                    if path is not None:
                        with contextlib.suppress(FileNotFoundError):  # a deleted log's directory
                            os.unlink(path)
                continue
            old = lg.segments[idx]
            # At once, before the fresh segment rebuilds the same index files; the log
            # file's descriptor later, as fetch answers may hold slices of the old file.
            old.close(defer=True, delay_s=lg.config.file_delete_delay_s)
            try:
                old.key_index.delete()  # it describes the old file: the key indexer builds one for the new
                # The offset and time indexes describe the old file too: a crash after the
                # replace below must not find them beside the new one (the load would take
                # their positions for the new file's); without them it rebuilds both.
                for index in (old.offset_index, old.time_index):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(index.path)
                # The index first: an entry is only dropped once its records are gone from
                # the old file too, so the old log with the new index is consistent.
                if cleaned_index is not None:
                    os.replace(cleaned_index, old.txn_index.path)
                else:
                    old.txn_index.delete()
                # The original's modification time, as Kafka's cleaner keeps it: an emptied
                # segment's is what time retention counts its age by.
                modified = os.stat(old.log_path).st_mtime_ns
                os.utime(cleaned, ns=(modified, modified))
                os.replace(cleaned, old.log_path)
                replaced += 1
            finally:
                # The file at the path is whole either way (old or cleaned; replace is atomic).
                fresh = LogSegment(lg.directory, base, lg.config.index_interval_bytes)
                fresh.recover()
                fresh.load_txn_index()
                fresh.flush()
                lg.segments[idx] = fresh
        if stale:
            log.info("cleaning %s discarded: the log was %s meanwhile", lg.name,
                     "closed" if lg.closed else "truncated")
            return 0
        self.cleaned_to[(lg.topic, lg.partition)] = result.end_offset
        self._truncations_seen[(lg.topic, lg.partition)] = plan.truncations
        self.tombstone_due[(lg.topic, lg.partition)] = (
            result.tombstone_due if result.tombstone_due is not None else 2**62)
        self.checkpoint()
        log.info("cleaned %s: %d segments rewritten, %d of %d records kept, %d -> %d bytes",
                 lg.name, replaced, result.records_kept, result.records_read, result.bytes_before,
                 result.bytes_after)
        return replaced

    def run(self, plan: CleanPlan) -> CleanResult | None:
        """``clean(plan)`` (background thread), or None when a planned segment changed
        meanwhile (planned again later) or the pass failed, say on a damaged segment
        (CorruptSegmentError, records that do not parse): then the log is marked uncleanable,
        as Kafka's cleaner marks a partition whose cleaning threw."""
        try:
            return self.clean(plan)
        except SegmentChangedError:
            return None
        except Exception as e:  # noqa: BLE001 - as Kafka's cleaner: any failure marks the log
            if self._changed_since(plan):
                # Truncated, deleted or closed under the pass (the refilled bytes of a
                # truncation can look like damage): not the log's fault; planned again.
                return None
            log.error("%s is not compacted any more (until the broker restarts): %s", plan.log.name, e)
            self.uncleanable.add((plan.log.topic, plan.log.partition))
            return None  # (clean() removed the files it had written)

    @staticmethod
    def _changed_since(plan: CleanPlan) -> bool:
        """Whether the planned log was closed or truncated, or lost a planned segment, since
        the plan (a read of a few attributes: safe from the cleaner thread)."""
        lg = plan.log
        if lg.closed or lg.truncations != plan.truncations:
            return True
        present = {id(s) for s in list(lg.segments)}
        return any(id(s) not in present for s in plan.segment_objects)

    def forget(self, topic: str, partition: int) -> None:
        """The partition's log is gone from this broker (deleted, moved away)."""
        known = self.cleaned_to.pop((topic, partition), None)
        self._truncations_seen.pop((topic, partition), None)
        self.tombstone_due.pop((topic, partition), None)
        self.uncleanable.discard((topic, partition))
        if known is not None:
            self.checkpoint()  # else a log of the same name made after a restart inherits it

    def truncated(self, lg: Log, offset: int) -> None:
        """``lg`` was truncated to ``offset`` (event-loop thread, before anything is appended
        after the truncation): its cleaned offset is lowered there and written now, as
        Kafka's LogManager.truncateTo does (maybeTruncateCheckpoint). Else a restart read back
        the offset the truncation invalidated and the records written since counted as
        deduplicated. The write (a small file, fsync and rename) is on the event loop as the
        truncation's own leader-epoch checkpoint is: it must be durable before the next
        append, and it happens only when a truncation cuts below what the cleaner reached,
        a whole cleaned segment at least (an unclean election, a follower behind the
        leader's log start). A failed write is retried at each plan() until one succeeds."""
        key = (lg.topic, lg.partition)
        cleaned = self.cleaned_to.get(key)
        if cleaned is None or cleaned <= offset:
            return
        self.cleaned_to[key] = offset
        self._try_checkpoint()

    def _try_checkpoint(self) -> None:
        try:
            self.checkpoint()
        except OSError as e:
            self._checkpoint_due = True
            log.error("cannot write %s (retried at the next cleaner pass): %s", self.path, e)

    def checkpoint(self) -> None:
        """Write the cleaned offsets, those of the logs the LogManager holds only once it has
        loaded them all (Kafka's updateCheckpoints): an entry of a log removed otherwise
        goes too, so no later log of its name inherits it."""
        lm = self.log_manager
        if lm is not None and lm.loaded:
            self._drop_unheld(lm)
        write_checkpoint(self.path, self.cleaned_to)
        self._checkpoint_due = False

    def _drop_unheld(self, lm: LogManager) -> None:
        for key in [k for k in self.cleaned_to if k not in lm.logs]:
            del self.cleaned_to[key]
            self._truncations_seen.pop(key, None)
            self.tombstone_due.pop(key, None)
