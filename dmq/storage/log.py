"""Log: the segmented, append-only log of one partition (Kafka's UnifiedLog, local part).

Directory ``<data-dir>/<topic>-<partition>/`` holds segments
``<20-digit base offset>.log`` with ``.index``, ``.timeindex``, once a
transaction was aborted in them ``.txnindex``, and once sealed and indexed by
the key indexer ``.keyindex``; producer snapshots
``<offset>.snapshot`` and ``partition.metadata`` (topic id).

Invariants:
- ``segments`` is non-empty and sorted by base offset; the last one is active;
- ``log_start_offset <= high watermark <= log_end_offset``; offsets below
  ``log_start_offset`` are invisible even while their segment still exists;
- ``log_start_offset <= last_stable_offset() <= high watermark``;
- ``recovery_point``: every byte below it has been fsynced; after an unclean
  shutdown only segments from the one holding it are re-validated, and their
  transaction indexes are rebuilt by replaying the producer state;
- the producer state (idempotence, ongoing transactions) is that of every
  batch below ``log_end_offset``; truncation reloads it from a snapshot;
- so are the delayed records not delivered yet (``delayed``,
  ``dmq.storage.delayed``, snapshots ``<offset>.delayed``); a leader's Produce
  takes records with a delay header out of their batches into DELAYED control
  batches (``dmq.record.delayed.split``); retention keeps every segment from
  the one holding the oldest of them.

Transactions (Kafka's UnifiedLog; the API the handlers and replication use):

- ``append_as_leader(..., origin=AppendOrigin.CLIENT)`` for Produce: control
  batches are refused; sequences, epochs and transaction state are checked;
  with ``verification=`` a producer's first transactional batch needs the guard
  ``maybe_start_transaction_verification`` gave for it (KIP-890; see
  ``dmq.storage.producer_state``).
  ``append_end_txn_marker(...)`` (or ``append_as_leader`` of a batch from
  ``dmq.record.control.build_end_txn_marker_batch`` with
  ``origin=AppendOrigin.COORDINATOR``) writes a WriteTxnMarkers marker: no
  sequence checks; INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED and
  INVALID_TXN_STATE as Kafka. ``AppendOrigin.COORDINATOR`` is also the origin
  of the group coordinator's transactional offset commits.
- ``append_as_follower(records)`` takes the markers in fetched batches through
  the same producer-state and transaction-index path, unchecked.
- The Log is told the high watermark: ``update_high_watermark(hw)`` whenever the
  Partition's high watermark changes (leader or follower, after truncation,
  when loaded from the checkpoint). Until it is first told, the Log takes
  every appended record as replicated (the high watermark is the log end
  offset), which is how a single replica behaves and keeps the cleaner working
  for callers that never tell it.
- ``first_unstable_offset()``: the first offset of the earliest transaction
  that is ongoing or whose marker is not yet below the high watermark (None:
  none); ``last_stable_offset()``: that offset when below the high watermark,
  else the high watermark. A read_committed Fetch reads up to it.
- ``collect_aborted_transactions(start, upper)``: (producer id, first offset)
  of the aborted transactions overlapping [start, upper);
  ``aborted_transactions_for_read(offset, data, max_offset)`` computes the
  upper bound of a read as Kafka's fetch does.

Plain synchronous code. The event-loop thread calls every method except
``flush_segments``, which the LogManager may run on a background thread.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from dmq.config import LONG_MAX, LogConfig
from dmq.record import records as record_codec
from dmq.record.batch import (
    CONTROL_MASK,
    BatchHeader,
    InvalidRecordError,
    ValidatedBatches,
    compute_crc,
    iter_headers,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batches,
)
from dmq.record.control import (
    ControlRecordType,
    EndTxnMarker,
    build_end_txn_marker_batch,
    read_end_txn_marker,
)
from dmq.record.delayed import split as split_delayed
from dmq.storage.delayed import DelayedRecords
from dmq.storage.key_index import SUFFIX as KEY_INDEX_SUFFIX
from dmq.storage.leader_epoch import LeaderEpochFileCache
from dmq.storage.producer_state import (
    SKIP_VERIFICATION,
    AppendOrigin,
    CompletedTxn,
    ProducerStateManager,
    VerificationGuard,
)
from dmq.storage.segment import MAX_RELATIVE_OFFSET, FileSlice, LogSegment
from dmq.storage.txn_index import SUFFIX as TXN_INDEX_SUFFIX
from dmq.storage.txn_index import AbortedTxn

# A batch's first bytes the leader sets: base offset, batch length (kept), partition leader epoch.
_FIRST_BYTES = struct.Struct(">qii")
PARTITION_METADATA_FILE = "partition.metadata"

log = logging.getLogger("dmq.storage")


class OffsetOutOfRangeError(Exception):
    pass


@dataclass(slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime
    log_start_offset: int
    record_count: int
    duplicate: bool = False


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def now_ms() -> int:
    return int(time.time() * 1000)


def read_partition_topic_id(directory: str) -> str | None:
    """The topic id a log directory's ``partition.metadata`` names, or None without one."""
    try:
        with open(os.path.join(directory, PARTITION_METADATA_FILE)) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "topic_id":
                    return value.strip() or None
    except OSError:
        return None
    return None


class Log:
    """One partition's log. The transaction API (details in the module docstring):

    Writing, as leader and follower::

        maybe_start_transaction_verification(pid, seq, epoch) -> guard | None
        append_as_leader(records, batches, leader_epoch, timestamp=None,
                         origin=AppendOrigin.CLIENT, verification=guard)     # Produce
        append_as_leader(..., origin=AppendOrigin.COORDINATOR)              # TxnOffsetCommit, markers
        append_end_txn_marker(producer_id, producer_epoch, coordinator_epoch,
                              commit, leader_epoch, timestamp=None) -> AppendResult
        append_as_follower(records) -> int                                  # markers included

    Refusals raise ``InvalidRecordError`` (``.error``: invalid_producer_epoch,
    transaction_coordinator_fenced, invalid_txn_state, invalid_record, ...) and
    leave the log unchanged.

    The high watermark and what read_committed reads::

        update_high_watermark(hw) -> int        # on every change of the Partition's HW
        high_watermark -> int                   # as last told (log end offset until told)
        first_unstable_offset() -> int | None
        last_stable_offset() -> int             # Fetch/ListOffsets with read_committed
        collect_aborted_transactions(start_offset, upper_bound_offset) -> list[(producer_id, first_offset)]
        aborted_transactions_for_read(offset, data, max_offset) -> list[(producer_id, first_offset)]
        fetch_upper_bound_offset(data, max_offset) -> int

    Producer state for DescribeProducers / ListTransactions:
    ``producer_state.producers`` (``ProducerEntry``: epoch, last_seq,
    last_timestamp, coordinator_epoch, current_txn_first_offset) and
    ``producer_state.ongoing_transactions()``.
    """

    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        topic_id: str | None = None,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        os.makedirs(directory, exist_ok=True)
        if topic_id is not None:
            self._write_partition_metadata(topic_id)
        self.producer_state = ProducerStateManager(directory)
        self.delayed = DelayedRecords(directory)
        self.leader_epochs = LeaderEpochFileCache(directory)
        self.segments: list[LogSegment] = []
        self.bases: list[int] = []
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        # Truncations so far, under _recovery_lock with the recovery point they lower: a
        # flush on a background thread that saw fewer when it began does not raise the
        # recovery point over bytes a truncation replaced meanwhile (not fsynced).
        self._truncations = 0
        self.closed = False  # closed (shut down or deleted): the cleaner leaves it alone
        # The lowest offset any truncation since the log was opened cut to (None: none):
        # the cleaner's deduplicated offset never stays above it (Kafka's
        # maybeTruncateCheckpoint).
        self.truncated_to: int | None = None
        self._recovery_lock = threading.Lock()
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms()
        self.on_roll: Callable[[Log, int], None] | None = None
        # Called after each truncation that cut records, with the offset cut to (the
        # LogManager's: the cleaner lowers its checkpoint there, Kafka's
        # maybeTruncateCleanerCheckpointToActiveSegmentBaseOffset).
        self.on_truncate: Callable[[Log, int], None] | None = None
        self._high_watermark: int | None = None  # None: not told, the log end offset stands in
        started = time.monotonic()
        recovered_from = self._load(clean_shutdown)
        self._load_leader_epochs(recovered_from)
        self._load_delayed()
        self.load_seconds = time.monotonic() - started

    # ------------------------------------------------------------------ loading

    def _write_partition_metadata(self, topic_id: str) -> None:
        path = os.path.join(self.directory, PARTITION_METADATA_FILE)
        if not os.path.exists(path):
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"version: 0\ntopic_id: {topic_id}\n")
            os.replace(tmp, path)

    def _load(self, clean_shutdown: bool) -> int | None:
        """Open the segments, recovering those an unclean shutdown may have left torn; the
        first offset recovery read again (None: none was)."""
        bases = []
        indexes: list[tuple[str, str]] = []
        index_suffixes = (".index", ".timeindex", TXN_INDEX_SUFFIX, KEY_INDEX_SUFFIX)
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            if name.endswith((".tmp", ".deleted", ".cleaned", ".swap")):
                os.unlink(path)
                continue
            if name.endswith(".log"):
                try:
                    bases.append(int(name[:-4]))
                except ValueError:
                    continue
            else:
                suffix = next((x for x in index_suffixes if name.endswith(x)), None)
                if suffix is not None:
                    indexes.append((name, suffix))
        for name, suffix in indexes:
            # An index whose segment is gone (a deletion cut short between the unlinks):
            # kept, a segment rolled at that base later appended after its stale entries
            # and reads landed mid-batch (Kafka's loadSegmentFiles deletes orphans).
            stem = name[: -len(suffix)]
            if not stem.isdigit() or int(stem) not in bases:
                log.info("%s: removing %s, an index without its segment", self.name, name)
                os.unlink(os.path.join(self.directory, name))
        for base in sorted(bases):
            self.segments.append(self._new_segment(base))
        if not self.segments:
            self.segments.append(self._new_segment(self.log_start_offset))
        self.bases = [s.base_offset for s in self.segments]

        recover_from = len(self.segments)
        if not clean_shutdown:
            # Segments at and after the one holding the recovery point may hold
            # unflushed, torn or corrupt data: validate them batch by batch.
            recover_from = max(0, bisect_right(self.bases, self.recovery_point) - 1)
        truncated_at: int | None = None
        for i, segment in enumerate(self.segments):
            if i < recover_from and not segment.load_txn_index():
                # Rebuilding a transaction index needs the producer state at its
                # segment's base: recover from here as if it were unflushed.
                log.warning("%s: transaction index of segment %d is corrupt; recovering from it",
                            self.name, segment.base_offset)
                recover_from = i
            if i >= recover_from:
                segment.txn_index.reset()
            if i >= recover_from or not segment.load_indexes():
                cut = segment.recover()
                if i < recover_from:
                    log.info("%s: rebuilt indexes of segment %d", self.name, segment.base_offset)
                if cut:
                    log.warning("%s: truncated %d bytes of torn or corrupt data in segment %d",
                                self.name, cut, segment.base_offset)
                    if i < recover_from:
                        # A flushed segment went bad on disk: the flushed segments after it
                        # are as trustworthy as before and are kept (Kafka's LogLoader
                        # recovers such a segment alone); its lost tail leaves a gap.
                        continue
                    truncated_at = i
                    break
            else:
                segment.restore_tail_state()
        if truncated_at is not None:
            # Unflushed data after a torn or corrupt batch cannot be trusted: drop the later
            # (unflushed) segments too.
            for segment in self.segments[truncated_at + 1:]:
                log.warning("%s: deleting segment %d after corruption", self.name, segment.base_offset)
                segment.delete(self.config.file_delete_delay_s)
            del self.segments[truncated_at + 1:]
            self.bases = [s.base_offset for s in self.segments]
        for segment in self.segments:  # before any append: a file describes the bytes it was written from
            why = segment.key_index.load(segment.size, segment.next_offset if segment.size else segment.base_offset,
                                         segment.ends_batch_at)
            if why is not None:
                log.info("%s: key index of segment %d is %s; it is rebuilt", self.name, segment.base_offset, why)
        last = self.segments[-1]
        self.log_end_offset = last.next_offset if last.size else last.base_offset
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            self.log_end_offset = self.log_start_offset
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        rebuild_from: int | None = None
        if recover_from < len(self.bases):
            rebuild_from = self.bases[recover_from]
            self.recovery_point = min(self.recovery_point, rebuild_from)
        self._load_producer_state(rebuild_from)
        return rebuild_from

    def _load_producer_state(self, rebuild_txn_indexes_from: int | None = None) -> None:
        """Load the newest snapshot and replay the batches after it up to the log end.

        With ``rebuild_txn_indexes_from``, snapshots above it are not trusted (they
        may describe unflushed data) and every aborted transaction whose marker is
        at or above it is written again to its segment's (reset) transaction index.
        """
        limit = self.log_end_offset
        if rebuild_txn_indexes_from is not None:
            limit = min(limit, rebuild_txn_indexes_from)
        self.producer_state.delete_snapshots_after(limit)
        snap = self.producer_state.load_latest_snapshot(limit, now_ms(),
                                                        int(self.config.broker["producer.id.expiration.ms"]))
        start = max(snap, self.segments[0].base_offset)
        if start < self.log_end_offset:
            for segment in self.segments[max(0, bisect_right(self.bases, start) - 1):]:
                found = segment.find_position(start)
                if found is None:
                    continue
                index = rebuild_txn_indexes_from is not None \
                    and segment.base_offset >= rebuild_txn_indexes_from
                for pos, header in segment.batches(found[0]):
                    if header.base_offset < start or header.producer_id < 0:
                        continue
                    marker = self._marker_of(segment.read_batch(pos, header)) if header.is_control else None
                    for txn, lso in self.producer_state.update(header, marker):
                        if index:
                            self._index_txn(segment, txn, lso)
                if index:
                    segment.txn_index.flush(fsync=False)
        self._replicated_if_untold()

    def _load_delayed(self) -> None:
        """The newest delayed-records snapshot at or below the log end, then the control
        batches after it (only control batches are read)."""
        limit = self.log_end_offset
        self.delayed.delete_snapshots_after(limit)
        start = max(self.delayed.load_latest_snapshot(limit), self.log_start_offset)
        if start < limit:
            for segment in self.segments[max(0, bisect_right(self.bases, start) - 1):]:
                found = segment.find_position(start)
                if found is None:
                    continue
                for pos, header in segment.batches(found[0]):
                    if header.last_offset < start or not header.is_control:
                        continue
                    self._observe_delayed(header, segment.read_batch(pos, header))
        self.delayed.scanned_to = limit

    def _observe_delayed(self, header: BatchHeader, batch: bytes | bytearray | memoryview,
                         marker: EndTxnMarker | None = None) -> None:
        if header.producer_id >= 0:
            if header.producer_id not in self.delayed.awaiting:
                return
            if marker is None:
                marker = self._marker_of(batch)
            if marker is None:
                return
            self.delayed.observe(header, batch, (header.producer_id, marker.is_commit))
            return
        self.delayed.observe(header, batch)

    @staticmethod
    def _leader_marker(records: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> EndTxnMarker:
        marker = read_end_txn_marker(records[pos: pos + header.size])
        if marker is None or header.producer_id < 0 or not header.is_transactional:
            raise InvalidRecordError(
                "invalid_record", "a control batch written by a coordinator must be a transaction "
                "marker of a producer, in a transactional batch")
        return marker

    @staticmethod
    def _marker_of(batch: bytes | bytearray | memoryview) -> EndTxnMarker | None:
        try:
            return read_end_txn_marker(batch)
        except InvalidRecordError as e:
            log.warning("unreadable control batch at offset %d: %s",
                        int.from_bytes(bytes(batch[:8]), "big", signed=True), e)
            return None

    @staticmethod
    def _index_txn(segment: LogSegment, txn: CompletedTxn, lso: int) -> None:
        """An aborted transaction goes into the index of its marker's segment."""
        if txn.is_aborted:
            segment.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))

    def _replicated_if_untold(self) -> None:
        if self._high_watermark is None:
            self.producer_state.on_high_watermark_updated(self.log_end_offset)

    def _load_leader_epochs(self, recovered_from: int | None) -> None:
        if self.leader_epochs.exists:
            self.leader_epochs.truncate_from_end(self.log_end_offset)
            if recovered_from is not None:
                # Kafka's LogSegment.recover: the epochs of the batches recovery read again.
                # The file may lack one: a truncation that lost power before its bytes were
                # cut on disk, while the file it had written without them was fsynced.
                self.leader_epochs.assign_all([
                    (header.partition_leader_epoch, header.base_offset)
                    for segment in self.segments if segment.next_offset > recovered_from
                    for _pos, header in segment.batches() if header.base_offset >= recovered_from])
            return
        # A log written before epochs were checkpointed: rebuild from batch headers.
        self.leader_epochs.assign_all([(header.partition_leader_epoch, header.base_offset)
                                       for segment in self.segments for _pos, header in segment.batches()])
        if not self.leader_epochs.exists:
            self.leader_epochs.clear_and_flush()

    @property
    def name(self) -> str:
        return partition_dir_name(self.topic, self.partition)

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # ------------------------------------------------------------------- append

    def check_producer_batches(self, batches: ValidatedBatches) -> AppendResult | None:
        """Return the original result when the batch is a retried duplicate (Produce only).

        On a LogAppendTime topic its log append time is the original batch's (Kafka's
        ``setLogAppendTime(duplicate.timestamp)``). On a CreateTime topic it is -1, as the
        original append was answered: Kafka answers the batch's max CreateTime there, which
        a Java client then reports as the timestamp of every record of the batch."""
        for header in batches.headers:
            if header.producer_id < 0 or header.attributes & CONTROL_MASK:
                continue
            dup = self.producer_state.find_duplicate(header)
            if dup is not None:
                if len(batches.headers) == 1:
                    return AppendResult(dup.first_offset, dup.last_offset,
                                        dup.timestamp if self.config.log_append_time else -1,
                                        self.log_start_offset, 0, duplicate=True)
                raise InvalidRecordError(
                    "duplicate_sequence_number", "duplicate batch inside a multi-batch request"
                )
        return None

    def maybe_start_transaction_verification(self, producer_id: int, seq: int,
                                             epoch: int) -> VerificationGuard | None:
        """The guard a producer's first transactional batch here must bring back once its
        transaction coordinator has verified the partition (None: its transaction here is
        ongoing already). See ``ProducerStateManager``."""
        if self.producer_state.has_ongoing_transaction(producer_id):
            return None  # the usual case: a later batch of an open transaction (no clock read)
        return self.producer_state.maybe_start_verification(producer_id, seq, epoch, now_ms())

    def append_as_leader(self, records: bytes | bytearray | memoryview, batches: ValidatedBatches, leader_epoch: int,
                         timestamp: int | None = None,
                         origin: AppendOrigin = AppendOrigin.CLIENT,
                         verification: VerificationGuard | None = SKIP_VERIFICATION) -> AppendResult:
        """Assign offsets to validated batches and append them.

        ``origin`` says who writes (see the module docstring): CLIENT for Produce,
        COORDINATOR for transaction markers and the group coordinator's records.
        ``verification``: for a CLIENT append, the guard of its transaction's verification
        (``maybe_start_transaction_verification``), None if it has none; the default skips
        the check. Raises InvalidRecordError, leaving the log unchanged, when a batch is refused.
        """
        client = origin == AppendOrigin.CLIENT
        if client:
            duplicate = self.check_producer_batches(batches)
            if duplicate is not None:
                return duplicate
        now = now_ms() if timestamp is None else timestamp
        if client and not self.config.log_append_time and (
                self.config.timestamp_before_max_ms < LONG_MAX or self.config.timestamp_after_max_ms < LONG_MAX):
            self._check_timestamps(records, batches, now)
        made_here: frozenset[int] = frozenset()
        if client and self.config.delayed_delivery_enable:
            split = split_delayed(records, batches, now, self.config.delayed_delivery_max_ms,
                                  "compact" in self.config.cleanup_policy)
            if split is not None:
                records, batches, made_here = split.records, split.batches, split.control_positions
        if "compact" in self.config.cleanup_policy and origin != AppendOrigin.DELAYED:
            # A delivery brings back records the log took earlier, perhaps before the topic
            # turned compact: kept like keyless records written then (the cleaner drops them),
            # rather than refused at every tick, holding back the records due after them.
            self._require_keys(records, batches)
        log_append = self.config.log_append_time
        next_offset = self.log_end_offset
        first_offset = next_offset
        headers: list[BatchHeader] = []
        producer_batches: list[tuple[BatchHeader, EndTxnMarker | None]] = []
        for header, pos in zip(batches.headers, batches.positions, strict=True):
            header = header._replace(base_offset=next_offset, partition_leader_epoch=leader_epoch,
                                     max_timestamp=now if log_append else header.max_timestamp)
            headers.append(header)
            next_offset += header.last_offset_delta + 1
            if header.attributes & CONTROL_MASK:
                if pos in made_here:
                    continue  # a DELAYED control batch this append made
                if client:
                    raise InvalidRecordError(
                        "invalid_record", f"clients are not allowed to write control records in {self.name}")
                if header.producer_id < 0 and origin == AppendOrigin.DELAYED:
                    continue  # a delivery's DELIVERED control batch
                producer_batches.append((header, self._leader_marker(records, pos, header)))
            elif header.producer_id >= 0:
                producer_batches.append((header, None))
        if batches.total_size > self.config.segment_bytes and origin != AppendOrigin.DELAYED:
            # Kafka's UnifiedLog.append: no segment could hold it. (A delivery of delayed
            # records is not refused: it would be retried, and refused, at every tick.)
            raise InvalidRecordError(
                "record_list_too_large", f"Message batch size is {batches.total_size} bytes in append to "
                f"partition {self.name}, which exceeds the maximum configured segment size of "
                f"{self.config.segment_bytes}.")
        pending = self.producer_state.prepare(producer_batches, origin, verification) if producer_batches else None
        segment = self.active_segment
        if segment.size > 0 and (
            segment.size + batches.total_size > self.config.segment_bytes
            or self._time_to_roll(segment, now, max(h.max_timestamp for h in headers))
            # Offsets are contiguous here, but a follower's segment may already span
            # nearly 2**31 offsets (see append_as_follower).
            or next_offset - 1 - segment.base_offset > MAX_RELATIVE_OFFSET
        ):
            segment = self.roll()
        self.leader_epochs.assign(leader_epoch, first_offset)
        segment.append(self._patched(records, batches.positions, headers, leader_epoch, now if log_append else None),
                       headers, batches.positions)
        self.log_end_offset = next_offset
        for header, pos in zip(headers, batches.positions, strict=True):
            if header.attributes & CONTROL_MASK:
                marker = next((m for h, m in producer_batches if h is header), None)
                self._observe_delayed(header, memoryview(records)[pos: pos + header.size], marker)
        self.delayed.scanned_to = next_offset
        if pending is not None:
            completed = self.producer_state.apply(pending)
            if completed:
                for txn, lso in completed:
                    self._index_txn(segment, txn, lso)
                self._replicated_if_untold()
        self.unflushed_messages += batches.record_count
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()
        return AppendResult(first_offset, next_offset - 1, now if log_append else -1,
                            self.log_start_offset, batches.record_count)

    @staticmethod
    def _patched(records: bytes | bytearray | memoryview, positions: list[int], headers: list[BatchHeader],
                 leader_epoch: int, log_append_time: int | None) -> list[bytes | bytearray | memoryview]:
        """The pieces to write for a producer's batches: each batch's first 16 bytes with
        its offset and leader epoch, then the rest of it as sent (the CRC starts after
        them), so the request's bytes are not copied. A LogAppendTime topic changes the
        timestamp and the CRC too: its batches are copied and patched whole."""
        view = memoryview(records)
        pieces: list[bytes | bytearray | memoryview] = []
        for header, pos in zip(headers, positions, strict=True):
            if log_append_time is None:
                pieces.append(_FIRST_BYTES.pack(header.base_offset, header.batch_length, leader_epoch))
                pieces.append(view[pos + _FIRST_BYTES.size: pos + header.size])
            else:
                batch = bytearray(view[pos: pos + header.size])
                set_base_offset(batch, 0, header.base_offset)
                set_partition_leader_epoch(batch, 0, leader_epoch)
                set_log_append_time(batch, 0, header.size, log_append_time)
                pieces.append(batch)
        return pieces

    def append_end_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                              commit: bool, leader_epoch: int,
                              timestamp: int | None = None) -> AppendResult:
        """Write a COMMIT or ABORT marker as the leader (WriteTxnMarkers; origin COORDINATOR)."""
        now = now_ms() if timestamp is None else timestamp
        marker = EndTxnMarker(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
                              coordinator_epoch)
        records = bytearray(build_end_txn_marker_batch(
            marker, producer_id=producer_id, producer_epoch=producer_epoch, timestamp=now))
        return self.append_as_leader(records, validate_batches(records, len(records)), leader_epoch,
                                     timestamp=now, origin=AppendOrigin.COORDINATOR)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> int:
        """Append batches copied from the leader, keeping their offsets and epochs.

        Only whole batches at the log end offset are taken (a fetch may end in a
        partial batch); returns the bytes appended. Raises InvalidRecordError on
        a CRC mismatch or an offset gap, so nothing corrupt reaches the log.

        A batch whose offsets the active segment cannot hold relative to its base (the
        indexes keep 32-bit relative offsets: at most MAX_RELATIVE_OFFSET past it) goes
        to a new segment based at the batch's base offset, as Kafka's maybeRoll rolls
        at appendInfo.firstOffset (LogSegment.canConvertToRelativeOffset): a replica
        copying a highly compacted log meets gaps of 2**31 offsets and more. The check
        is per batch, as the batches of one fetch answer may span such a gap.
        """
        found = iter_headers(records)
        if not found:
            return 0
        end = found[-1][0] + found[-1][1].size
        buf = memoryview(records)[:end]  # written as fetched: no copy
        expected = self.log_end_offset
        for pos, header in found:
            if header.base_offset < expected:
                # Gaps are legal (compaction), going backwards is not.
                raise InvalidRecordError(
                    "corrupt_message", f"{self.name}: replicated batch at offset {header.base_offset}, "
                    f"expected {expected} or above")
            if compute_crc(buf, pos, header.size) != header.crc:
                raise InvalidRecordError("corrupt_message", f"{self.name}: replicated batch CRC mismatch")
            expected = header.last_offset + 1
        if found[-1][1].last_offset - self.active_segment.base_offset > MAX_RELATIVE_OFFSET:
            return self._append_as_follower_past_relative_offsets(buf, found)
        headers = [h for _, h in found]
        markers = [self._marker_of(buf[pos: pos + h.size]) if h.is_control and h.producer_id >= 0 else None
                   for pos, h in found]
        pending = self.producer_state.prepare(list(zip(headers, markers, strict=True)), AppendOrigin.REPLICATION)
        segment = self.active_segment
        if segment.size > 0 and (segment.size + len(buf) > self.config.segment_bytes
                                 or self._time_to_roll(segment, now_ms(), max(h.max_timestamp for h in headers))):
            segment = self.roll()
        latest = self.leader_epochs.latest_epoch
        if any(h.partition_leader_epoch > latest for h in headers):
            # The entries before the batches (KIP-101's order, as Kafka's append): written
            # after them, a crash between the two left the batches under an older epoch.
            self.leader_epochs.assign_all([(h.partition_leader_epoch, h.base_offset) for h in headers])
        segment.append(buf, headers, [p for p, _ in found])
        self.log_end_offset = expected
        for (pos, header), marker in zip(found, markers, strict=True):
            if header.is_control:
                self._observe_delayed(header, buf[pos: pos + header.size], marker)
        self.delayed.scanned_to = expected
        for txn, lso in self.producer_state.apply(pending):
            self._index_txn(segment, txn, lso)
        self._replicated_if_untold()
        self.unflushed_messages += sum(h.record_count for h in headers)
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()
        return end

    def _append_as_follower_past_relative_offsets(self, buf: memoryview,
                                                  found: list[tuple[int, BatchHeader]]) -> int:
        """``append_as_follower`` of validated batches that the active segment cannot all
        hold: those it can, then a roll at the base offset of the first it cannot, then the
        rest likewise. (Each part is one append: the producer state a roll snapshots is
        that of every batch below it.)"""
        first = 0
        while first < len(found):
            base = self.active_segment.base_offset
            cut = next((i for i in range(first, len(found))
                        if found[i][1].last_offset - base > MAX_RELATIVE_OFFSET), len(found))
            if cut == first:
                self.roll(found[cut][1].base_offset)
                continue
            self.append_as_follower(buf[found[first][0]: found[cut][0] if cut < len(found) else len(buf)])
            first = cut
        return len(buf)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log and restart it empty at ``offset`` (below the leader's start)."""
        for segment in self.segments:
            segment.delete(self.config.file_delete_delay_s)
        segment = self._new_segment(offset)
        self.segments = [segment]
        self.bases = [offset]
        self.log_start_offset = offset
        self.log_end_offset = offset
        with self._recovery_lock:
            self._truncations += 1
            self.recovery_point = offset
        self.truncated_to = offset if self.truncated_to is None else min(self.truncated_to, offset)
        self.producer_state.truncate_fully()
        self.leader_epochs.clear_and_flush()
        self.delayed.delete_snapshots_after(-1)
        self.delayed.clear(offset)
        if self._high_watermark is not None:
            self._high_watermark = offset
        if self.on_truncate is not None:
            self.on_truncate(self, offset)

    def _check_timestamps(self, records: bytes | bytearray | memoryview, batches: ValidatedBatches,
                          now: int) -> None:
        """Every CreateTime record's timestamp within message.timestamp.before.max.ms before
        ``now`` and message.timestamp.after.max.ms after it (Kafka's LogValidator): else the
        whole append is refused INVALID_TIMESTAMP, naming each record out of range."""
        before, after = self.config.timestamp_before_max_ms, self.config.timestamp_after_max_ms
        errors: list[tuple[int, str]] = []
        index = 0
        for header, pos in zip(batches.headers, batches.positions, strict=True):
            try:
                _, recs = record_codec.decode_batch(bytes(records[pos : pos + header.size]))
            except ValueError as e:
                raise InvalidRecordError("corrupt_message", f"cannot read records: {e}") from None
            for r in recs:
                if r.timestamp != -1 and (now - r.timestamp > before or r.timestamp - now > after):
                    errors.append((index, f"Timestamp {r.timestamp} of message with offset {r.offset} is out of "
                                          f"range. The timestamp should be within [{now - before}, {now + after}]"))
                index += 1
        if errors:
            raise InvalidRecordError("invalid_timestamp",
                                     "One or more records have been rejected due to invalid timestamp",
                                     tuple(errors))

    def _require_keys(self, records: bytes | bytearray | memoryview, batches: ValidatedBatches) -> None:
        """Compaction needs a key on every record: else the whole append is refused
        INVALID_RECORD, naming each keyless record (Kafka's LogValidator.validateKey)."""
        errors: list[tuple[int, str]] = []
        index = 0
        for header, pos in zip(batches.headers, batches.positions, strict=True):
            try:
                _, recs = record_codec.decode_batch(bytes(records[pos : pos + header.size]))
            except ValueError as e:
                raise InvalidRecordError("corrupt_message", f"cannot read records: {e}") from None
            for r in recs:
                if r.key is None:
                    errors.append((index, f"Compacted topic cannot accept message without key in topic "
                                          f"partition {self.name}"))
                index += 1
        if errors:
            shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
            raise InvalidRecordError(
                "invalid_record", f"One or more records have been rejected due to {len(errors)} record errors "
                f"in total, and only showing the first three errors at most: [{shown}]", tuple(errors))

    def _new_segment(self, base: int) -> LogSegment:
        segment = LogSegment(self.directory, base, self.config.index_interval_bytes)
        segment.roll_jitter_ms = self.config.random_segment_jitter()
        return segment

    def _time_to_roll(self, segment: LogSegment, now: int, max_timestamp: int) -> bool:
        """Whether ``segment`` is old enough to roll before batches whose largest timestamp
        is ``max_timestamp``: segment.ms (capped at max.compaction.lag.ms on a compacted
        topic) less its jitter (segment.jitter.ms). Its age is that timestamp less its first
        batch's largest timestamp, as Kafka's LogSegment.timeWaitedForRoll
        (rollingBasedTimestamp), which a restart does not reset; only a segment whose first
        batch has no timestamp counts from when it was opened."""
        first = segment.first_batch_timestamp
        waited = max_timestamp - first if first >= 0 else now - segment.created_ms
        return waited >= self.config.max_segment_ms - segment.roll_jitter_ms

    def roll(self, base: int | None = None) -> LogSegment:
        """Start a new active segment at ``base``: the log end offset, or (a follower) the
        base offset of a batch past the reach of the active segment's relative offsets. An
        empty active segment is kept, or replaced by one at ``base`` (Kafka's roll deletes
        it)."""
        old = self.active_segment
        base = self.log_end_offset if base is None else base
        if old.size == 0:
            if base != old.base_offset and base >= self.log_end_offset:
                old.delete(self.config.file_delete_delay_s)
                segment = self._new_segment(base)
                self.segments[-1] = segment
                self.bases[-1] = base
                return segment
            return old
        old.offset_index.flush(fsync=False)
        old.time_index.flush(fsync=False)
        old.txn_index.flush(fsync=False)
        segment = self._new_segment(base)
        self.segments.append(segment)
        self.bases.append(base)
        self.producer_state.take_snapshot(base, fsync=False)
        self.delayed.take_snapshot(base, fsync=False)
        if self.on_roll is not None:
            self.on_roll(self, base)
        else:
            self.flush_segments(base)
        return segment

    # --------------------------------------------------------------------- read

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool = True) -> FileSlice | None:
        """Bytes of batches from ``offset`` up to ``max_bytes`` and below ``max_offset``."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]"
            )
        if offset >= max_offset:
            return None
        i = max(0, bisect_right(self.bases, offset) - 1)
        for segment in self.segments[i:]:
            if segment.base_offset >= max_offset:
                return None
            if max_offset >= segment.next_offset:
                max_position = segment.size
            else:
                max_position = segment.position_of(max_offset)
            sl = segment.read(offset, max_bytes, max_position, min_one_batch)
            if sl is not None:
                return sl if sl.length > 0 else None
        return None

    def bytes_between(self, start: int, end: int) -> int:
        """Bytes of the batches from the one holding ``start`` up to the one holding ``end``
        (position differences, as Kafka's LogOffsetMetadata.positionDiff, across segments)."""
        start = max(start, self.log_start_offset)
        if end <= start:
            return 0
        total = 0
        for segment in self.segments[max(0, bisect_right(self.bases, start) - 1):]:
            if segment.base_offset >= end:
                break
            first = segment.position_of(start) if start > segment.base_offset else 0
            last = segment.position_of(end) if end < segment.next_offset else segment.size
            total += max(0, last - first)
        return total

    def on_older_segment(self, offset: int, end: int) -> bool:
        """Whether a later segment than ``offset``'s holds offsets below ``end`` (one starts
        in ``(offset, end)``): Kafka's ``LogOffsetMetadata.onOlderSegment`` of the two. A
        read from ``offset`` stops at its segment's end, short of records below ``end``.
        (A segment starting at ``end`` holds nothing below it: a high watermark at a roll
        is the old segment's end, as Kafka's cached offset metadata has it.) The active
        segment holds a tailing reader's offset: one comparison then."""
        bases = self.bases
        if bases[-1] <= offset or end <= offset:
            return False
        return bases[bisect_right(bases, offset)] < end

    # ------------------------------------------------------------ transactions

    @property
    def high_watermark(self) -> int:
        """The high watermark the Log was last told (the log end offset until told)."""
        return self.log_end_offset if self._high_watermark is None else self._high_watermark

    def update_high_watermark(self, high_watermark: int) -> int:
        """Take the Partition's high watermark (clamped to [log start, log end]); returns it.

        Transactions whose marker it passes become stable. Call it on every change,
        including a move back after truncation and the value loaded at startup.
        """
        hw = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        self._high_watermark = hw
        self.producer_state.on_high_watermark_updated(hw)
        return hw

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest transaction that is ongoing or whose marker the high
        watermark has not passed (never below the log start offset); None when there is none."""
        first = self.producer_state.first_unstable_offset()
        return None if first is None else max(first, self.log_start_offset)

    def last_stable_offset(self) -> int:
        """The LSO: read_committed consumers read below it (Kafka's UnifiedLog.lastStableOffset)."""
        hw = self.high_watermark
        first = self.first_unstable_offset()
        return first if first is not None and first < hw else hw

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Index entries of the aborted transactions overlapping [start_offset, upper_bound_offset)."""
        out: list[AbortedTxn] = []
        i = max(0, bisect_right(self.bases, start_offset) - 1)
        for segment in self.segments[i:]:
            found, complete = segment.collect_aborted_txns(start_offset, upper_bound_offset)
            out += found
            if complete:
                break
        return out

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping
        [start_offset, upper_bound_offset): a read_committed Fetch's abortedTransactions."""
        return [(t.producer_id, t.first_offset)
                for t in self.aborted_transactions(start_offset, upper_bound_offset)]

    def fetch_upper_bound_offset(self, data: FileSlice, max_offset: int) -> int:
        """An offset past every record in ``data`` (a slice ``read`` returned), at most ``max_offset``.

        As Kafka: the offset of the first indexed batch at or after the end of the
        slice, else the next segment's base offset, else the log end offset.
        """
        for i, segment in enumerate(self.segments):
            if segment.fd != data.fd:
                continue
            end = data.position + data.length
            index = segment.offset_index
            j = bisect_left(index.positions, end)
            if j < len(index.positions):
                upper = index.offsets[j]  # a batch starting past the slice: an upper bound
            elif i + 1 < len(self.segments):
                upper = self.segments[i + 1].base_offset
            else:
                upper = self.log_end_offset
            return min(upper, max_offset)
        return max_offset

    def aborted_transactions_for_read(self, offset: int, data: FileSlice | None,
                                      max_offset: int) -> list[tuple[int, int]]:
        """The aborted transactions to return with ``data = read(offset, ..., max_offset)``."""
        if data is None or data.length == 0:
            return []
        return self.collect_aborted_transactions(offset, self.fetch_upper_bound_offset(data, max_offset))

    def batch_at(self, offset: int) -> tuple[LogSegment, int, BatchHeader] | None:
        """The batch holding ``offset`` (the first whose last offset is at or above it)."""
        i = max(0, bisect_right(self.bases, offset) - 1)
        for segment in self.segments[i:]:
            found = segment.find_position(offset)
            if found is not None:
                return segment, found[0], found[1]
        return None

    def batches_from(self, offset: int) -> list[tuple[LogSegment, int, BatchHeader]]:
        out = []
        i = max(0, bisect_right(self.bases, offset) - 1)
        for segment in self.segments[i:]:
            found = segment.find_position(offset)
            if found is None:
                continue
            for pos, header in segment.batches(found[0]):
                out.append((segment, pos, header))
        return out

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            start = max(segment.time_index.lookup(timestamp), self.log_start_offset, segment.base_offset)
            found = segment.find_position(start)
            if found is None:
                continue
            for pos, header in segment.batches(found[0]):
                if header.max_timestamp < timestamp or header.last_offset < self.log_start_offset:
                    continue
                _, records = record_codec.decode_batch(segment.read_batch(pos, header))
                for rec in records:
                    if rec.timestamp >= timestamp and rec.offset >= self.log_start_offset:
                        return rec.offset, rec.timestamp
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        best: LogSegment | None = None
        for segment in self.segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None:
            return None
        target = best.offset_of_max_timestamp
        found = best.find_position(target)
        if found is None:
            return None
        pos, header = found
        _, records = record_codec.decode_batch(best.read_batch(pos, header))
        for rec in records:
            if rec.timestamp == best.max_timestamp and rec.offset >= self.log_start_offset:
                return rec.offset, rec.timestamp
        return header.last_offset, header.max_timestamp

    # ------------------------------------------------------------ deletion

    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (DeleteRecords); return it."""
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._on_log_start_offset_moved()
            self._delete_segments_below_start()
        return self.log_start_offset

    def _delete_segments_below_start(self) -> int:
        deleted = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self._delete_first_segment()
            deleted += 1
        return deleted

    def _delete_first_segment(self) -> None:
        segment = self.segments.pop(0)
        self.bases.pop(0)
        segment.delete(self.config.file_delete_delay_s)
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self._on_log_start_offset_moved()

    def _on_log_start_offset_moved(self) -> None:
        if self._high_watermark is not None and self._high_watermark < self.log_start_offset:
            self._high_watermark = self.log_start_offset
        self.producer_state.on_log_start_offset_incremented(self.log_start_offset)

    def delete_old_segments(self, now: int | None = None) -> int:
        """Apply retention.ms / retention.bytes (``delete`` policy); return segments deleted.

        A segment goes only once the high watermark has passed all of it (Kafka's
        ``deletableSegments``): records not yet replicated to the ISR are never deleted
        (an acks=all produce would otherwise be answered once a follower restarted past
        them), and the log start never passes the high watermark."""
        now = now_ms() if now is None else now
        deleted = self._delete_segments_below_start()
        if "delete" not in self.config.cleanup_policy:
            return deleted
        hw = self.high_watermark
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            while len(self.segments) > 1 and now - self.segments[0].largest_timestamp > retention_ms \
                    and self.segments[1].base_offset <= hw and self._outside_delayed(self.segments[0]):
                self._delete_first_segment()
                deleted += 1
            active = self.active_segment
            if len(self.segments) == 1 and active.size > 0 and now - active.largest_timestamp > retention_ms \
                    and self.log_end_offset <= hw and self._outside_delayed(active):
                # Every segment before it went and its records are expired too: roll so the
                # old active segment can go. (Only then, as Kafka's deletableSegments walks
                # in order and stops at the first segment it keeps: with timestamps out of
                # order, say backfilled records, an older segment may not have expired.)
                self.roll()
                self._delete_first_segment()
                deleted += 1
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            excess = self.size_in_bytes - retention_bytes
            while len(self.segments) > 1 and excess - self.segments[0].size >= 0 \
                    and self.segments[1].base_offset <= hw and self._outside_delayed(self.segments[0]):
                excess -= self.segments[0].size
                self._delete_first_segment()
                deleted += 1
        if self.recovery_point < self.log_start_offset:
            self.recovery_point = self.log_start_offset
        return deleted

    def _outside_delayed(self, segment: LogSegment) -> bool:
        """Whether retention may delete ``segment``: it holds no delayed record not yet
        delivered."""
        if not self.delayed.pending and not self.delayed.awaiting:
            return True
        oldest = self.delayed.min_offset()
        return oldest is None or segment.next_offset <= oldest

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or above ``offset`` (a follower diverged). At or past the
        log end nothing is cut, but leader-epoch entries starting at or past the log end
        go (Kafka's truncateTo: a leadership here that wrote nothing left an entry that
        would otherwise label the leader's records about to be fetched)."""
        if offset >= self.log_end_offset:
            self.leader_epochs.truncate_from_end(self.log_end_offset)
            return
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            seg = self.segments.pop()
            self.bases.pop()
            seg.delete(self.config.file_delete_delay_s)
        self.active_segment.truncate_to(offset)
        self.log_end_offset = max(offset, self.log_start_offset)
        with self._recovery_lock:
            self._truncations += 1
            self.recovery_point = min(self.recovery_point, offset)
        self.truncated_to = offset if self.truncated_to is None else min(self.truncated_to, offset)
        if self._high_watermark is not None:
            self._high_watermark = min(self._high_watermark, self.log_end_offset)
        # Kafka's truncateAndReload: the newest snapshot at or below the new end,
        # then the batches after it (transactions whose marker was cut reopen).
        # Completions still above the high watermark whose marker survives stay
        # unstable (a snapshot does not hold them).
        unreplicated = [t for t in self.producer_state.unreplicated_transactions()
                        if t.last_offset < self.log_end_offset]
        self._load_producer_state()
        self.producer_state.restore_unreplicated(unreplicated)
        if self._high_watermark is not None:
            self.producer_state.on_high_watermark_updated(self._high_watermark)
        self.leader_epochs.truncate_from_end(offset)
        self._load_delayed()
        if self.on_truncate is not None:
            self.on_truncate(self, offset)

    # --------------------------------------------------------------- flushing

    def flush(self) -> None:
        """fsync everything appended so far and move the recovery point."""
        self.flush_segments(self.log_end_offset)
        self.producer_state.take_snapshot(self.log_end_offset)
        self.delayed.take_snapshot(self.log_end_offset)

    @property
    def truncations(self) -> int:
        """How many times the log was truncated (``flush_segments``' ``since``)."""
        return self._truncations

    def flush_segments(self, up_to: int, since: int | None = None) -> None:
        """fsync the segments holding offsets below ``up_to``, and the producer snapshots
        taken up to it; may run off the event loop.

        A truncation after ``since`` (the ``truncations`` count when ``up_to`` was decided;
        now if not given) leaves the recovery point where the truncation put it: the
        bytes below ``up_to`` may have been cut and written again since."""
        truncations = self._truncations if since is None else since
        start = self.recovery_point
        if up_to <= start:
            return
        for segment in list(self.segments):
            if segment.base_offset >= up_to:
                break
            if segment.next_offset <= self.recovery_point and segment is not self.segments[-1]:
                continue
            try:
                segment.flush()
            except OSError:
                return  # deleted concurrently by retention
        try:
            # The rolls' producer snapshots, written without fsync: an unclean restart
            # rebuilds from the base of the segment holding the recovery point with one.
            self.producer_state.sync_snapshots(start, up_to)
        except OSError:
            return
        with self._recovery_lock:
            if self._truncations != truncations:
                return
            self.recovery_point = max(self.recovery_point, up_to)
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms()

    def close(self, defer: bool = False) -> None:
        """Close every segment (``defer``: a deleted log, see ``LogSegment.close``)."""
        self.closed = True
        for segment in self.segments:
            segment.close(defer, self.config.file_delete_delay_s)

    def delete_files(self) -> None:
        for segment in self.segments:
            segment.delete(self.config.file_delete_delay_s)
