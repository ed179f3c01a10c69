"""LogSegment: one ``<20-digit base offset>.log`` file with its indexes.

The offset index ``.index`` and time index ``.timeindex`` always exist; the
transaction index ``.txnindex`` (aborted transactions whose ABORT marker is in
this segment) only once it has an entry; the key index ``.keyindex``
(``key_index.py``) once the background key indexer has written it for the
sealed segment.

Invariants:
- the file holds whole v2 batches back to back; ``size`` is the end of the
  last whole batch (a torn tail is cut by ``recover()``);
- every batch's offsets are >= ``base_offset`` and increase strictly;
- ``max_timestamp``/``offset_of_max_timestamp`` describe the batches appended
  or recovered so far (the time index is derived from them);
- the batches kept in memory (``_recent``) are the last ones tracked, contiguous
  up to ``size``; truncation and recovery forget them;
- ``recover()`` rebuilds the offset and time indexes only: the transaction
  index needs the producer state as of the segment's base offset, so the Log
  resets and rebuilds it; the Log checks a key index's header against the
  recovered segment (``SegmentKeyIndex.load``) before anything is appended, and
  truncation resets it.

Plain synchronous file code; only the owning Log calls it.
"""

from __future__ import annotations

import bisect
import heapq
import os
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from crc32c import crc32c

from dmq.record.batch import (
    CRC_START,
    HEADER_SIZE,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    BatchHeader,
    parse_header,
)
from dmq.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from dmq.storage.key_index import SUFFIX as KEY_INDEX_SUFFIX
from dmq.storage.key_index import SegmentKeyIndex
from dmq.storage.txn_index import SUFFIX as TXN_INDEX_SUFFIX
from dmq.storage.txn_index import AbortedTxn, TransactionIndex

_SCAN_CHUNK = 1 << 20
IOV_MAX = 1024  # buffers per pwritev (Linux's UIO_MAXIOV)
Bytes = bytes | bytearray | memoryview
RECENT_BATCHES = 256  # batch positions kept in memory per segment (between 256 and 512)
MAX_RELATIVE_OFFSET = 2**31 - 1  # the indexes hold offsets relative to the base (Kafka: an int)


# Kafka's file.delete.delay.ms: how long the file descriptor of a deleted or replaced
# segment stays open. A fetch answer holds a FileSlice (descriptor, position, length) until
# its connection writes it, which can be after earlier answers on that connection; closing
# at once would let the number be reused by another file, and the answer would then carry
# that file's bytes. The broker takes the due ones every second and closes them on a worker
# thread (the last close of an unlinked file frees its blocks: tens of ms for a large one).
# Past DEFERRED_CLOSES_MAX open ones (an eighth of the process's descriptor limit), the
# soonest due are closed at once. FD_CLOSE_DELAY_S is the default of file.delete.delay.ms.
FD_CLOSE_DELAY_S = 60.0
DEFERRED_CLOSES_MAX = max(64, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 8)
_deferred_closes: list[tuple[float, int]] = []  # a heap of (due, fd)


def close_later(fd: int, delay_s: float = FD_CLOSE_DELAY_S, now: float | None = None) -> None:
    """Close ``fd`` once ``delay_s`` (the log's file.delete.delay.ms) have passed (event-loop
    thread; the file may be unlinked or replaced meanwhile: its bytes stay readable through
    the descriptor)."""
    now = time.monotonic() if now is None else now
    heapq.heappush(_deferred_closes, (now + delay_s, fd))
    while len(_deferred_closes) > DEFERRED_CLOSES_MAX:
        close_fds([heapq.heappop(_deferred_closes)[1]])


def take_due_closes(now: float | None = None, *, everything: bool = False) -> list[int]:
    """The deferred descriptors due now (all with ``everything``), no longer tracked: the
    caller closes them (``close_fds``), say on a worker thread."""
    now = time.monotonic() if now is None else now
    due: list[int] = []
    while _deferred_closes and (everything or _deferred_closes[0][0] <= now):
        due.append(heapq.heappop(_deferred_closes)[1])
    return due


def close_fds(fds: list[int]) -> int:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    return len(fds)


def close_deferred(now: float | None = None, *, everything: bool = False) -> int:
    """Close the deferred descriptors that are due (all with ``everything``), here; how many."""
    return close_fds(take_due_closes(now, everything=everything))


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(slots=True)
class FileSlice:
    """A byte range of a segment file: what a fetch sends with sendfile."""

    fd: int
    position: int
    length: int

    def read(self) -> bytes:
        return os.pread(self.fd, self.length, self.position)


class LogSegment:
    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = os.path.join(directory, segment_name(base_offset, ".log"))
        self.offset_index = OffsetIndex(
            os.path.join(directory, segment_name(base_offset, ".index")), base_offset
        )
        self.time_index = TimeIndex(
            os.path.join(directory, segment_name(base_offset, ".timeindex")), base_offset
        )
        self.txn_index = TransactionIndex(
            os.path.join(directory, segment_name(base_offset, TXN_INDEX_SUFFIX)), base_offset
        )
        self.key_index = SegmentKeyIndex(os.path.join(directory, segment_name(base_offset, KEY_INDEX_SUFFIX)),
                                         base_offset)
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        # An index file missing beside an existing segment (deleted, or removed by the
        # cleaner before its swap) is rebuilt: load_indexes() says so.
        self.indexes_missing = False
        for index_path in (self.offset_index.path, self.time_index.path):
            if not os.path.exists(index_path):
                self.indexes_missing = True
                open(index_path, "ab").close()  # Kafka's layout: every segment has both indexes
        self.size = os.fstat(self.fd).st_size
        self.bytes_since_last_index = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.next_offset = base_offset  # one past the last offset appended
        self.created_ms = int(time.time() * 1000)
        self.roll_jitter_ms = 0  # set by the log: its roll comes this much before segment.ms
        self.first_batch_timestamp = -1
        # The last batches tracked, contiguous up to the end of the file: (position, header)
        # and their last offsets, so reads near the log end (followers, caught-up consumers)
        # find their batch without reading headers from the file.
        self._recent: list[tuple[int, BatchHeader]] = []
        self._recent_last: list[int] = []

    # ------------------------------------------------------------------ append

    def append(self, data: Bytes | list[Bytes], headers: list[BatchHeader], positions: list[int]) -> None:
        """Append ``data`` (whole batches, offsets already assigned) at the end: one buffer,
        or the pieces of one, written with ``pwritev`` (the leader writes a batch as its
        patched first bytes and the request's untouched rest, without copying it)."""
        start = self.size
        pieces = [v for v in (memoryview(p).cast("B") for p in (data if isinstance(data, list) else [data]))
                  if len(v)]
        total = sum(len(p) for p in pieces)
        position, first = start, 0
        while first < len(pieces):
            chunk = pieces[first:first + IOV_MAX]
            written = os.pwritev(self.fd, chunk, position) if len(chunk) > 1 else \
                os.pwrite(self.fd, chunk[0], position)
            if written <= 0:
                raise OSError(f"no progress writing to {self.log_path} at {position}")
            position += written
            while written:  # drop what was written; a short write goes on from there
                if written >= len(pieces[first]):
                    written -= len(pieces[first])
                    first += 1
                else:
                    pieces[first] = pieces[first][written:]
                    written = 0
        for header, rel in zip(headers, positions, strict=True):
            self._track(header, start + rel)
        self.size = start + total

    def _track(self, header: BatchHeader, position: int) -> None:
        self._recent.append((position, header))
        self._recent_last.append(header.last_offset)
        if len(self._recent) > 2 * RECENT_BATCHES:
            del self._recent[:RECENT_BATCHES]
            del self._recent_last[:RECENT_BATCHES]
        if self.first_batch_timestamp < 0:
            self.first_batch_timestamp = header.max_timestamp
        if self.bytes_since_last_index > self.index_interval_bytes:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index = 0
        self.bytes_since_last_index += header.size
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        self.next_offset = header.last_offset + 1

    # -------------------------------------------------------------------- read

    def read_header(self, position: int) -> BatchHeader | None:
        if position + HEADER_SIZE > self.size:
            return None
        buf = os.pread(self.fd, HEADER_SIZE, position)
        if len(buf) < HEADER_SIZE:
            return None
        return parse_header(buf, 0)

    def find_position(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position of the first batch whose last offset >= ``offset``, with its header."""
        if self._recent and offset >= self._recent[0][1].base_offset:
            i = bisect.bisect_left(self._recent_last, offset)
            return self._recent[i] if i < len(self._recent) else None
        _, position = self.offset_index.lookup(offset)
        while position < self.size:
            header = self.read_header(position)
            if header is None:
                return None
            if header.last_offset >= offset:
                return position, header
            position += header.size
        return None

    def position_of(self, offset: int) -> int:
        """File position where offset ``offset`` starts (``size`` if past the end)."""
        found = self.find_position(offset)
        return self.size if found is None else found[0]

    def read(self, offset: int, max_size: int, max_position: int,
             min_one_batch: bool) -> FileSlice | None:
        """Slice from the batch holding ``offset`` up to ``max_size`` bytes.

        The slice may end inside a batch (clients drop a partial trailing
        batch), except that with ``min_one_batch`` the first batch is whole.
        """
        found = self.find_position(offset)
        if found is None:
            return None
        position, header = found
        if position >= max_position:
            return FileSlice(self.fd, position, 0)
        limit = min(max_position, self.size) - position
        length = min(limit, max_size)
        if min_one_batch and length < header.size:
            length = min(header.size, limit)
        return FileSlice(self.fd, position, length)

    def batches(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """Headers of the whole batches from ``start_position`` (no CRC check)."""
        position = start_position
        while position < self.size:
            header = self.read_header(position)
            if header is None or header.batch_length < MIN_BATCH_LENGTH:
                return
            yield position, header
            position += header.size

    def ends_batch_at(self, position: int, last_offset: int) -> bool:
        """Whether a batch whose last offset is ``last_offset`` ends at ``position``."""
        _, start = self.offset_index.lookup(last_offset)
        for pos, header in self.batches(start if start < position else 0):
            if pos + header.size >= position:
                return pos + header.size == position and header.last_offset == last_offset
        return False

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        return os.pread(self.fd, header.size, position)

    # ---------------------------------------------------------------- recovery

    def load_indexes(self) -> bool:
        """Load the indexes; False when they are missing or not sane (rebuild needed): a
        segment with data but no offset index was read header by header for every fetch,
        and one without its time index lost its max timestamp (Kafka's sanityCheck throws
        NoSuchFileException and the loader recovers the segment)."""
        if self.indexes_missing and os.fstat(self.fd).st_size > 0:
            return False
        try:
            self.offset_index.load()
            self.time_index.load()
        except CorruptIndexError:
            return False
        if self.offset_index.positions and self.offset_index.positions[-1] >= self.size:
            return False
        return True

    def load_txn_index(self) -> bool:
        """Load the transaction index; False when it is not sane (the Log rebuilds it)."""
        try:
            self.txn_index.load()
        except CorruptIndexError:
            return False
        return True

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        return self.txn_index.collect(fetch_offset, upper_bound_offset)

    def restore_tail_state(self) -> None:
        """Set next offset and max timestamp from the tail of a trusted segment."""
        last_off, position = self.offset_index.last_entry()
        ts, ts_off = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = ts, ts_off
        if position == 0:
            # Scan from the start: no index entry to resume from.
            position = 0
        for pos, header in self.batches(position):
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            if self.first_batch_timestamp < 0 and pos == 0:
                self.first_batch_timestamp = header.max_timestamp
            self.next_offset = header.last_offset + 1
        if self.first_batch_timestamp < 0:
            first = self.read_header(0)
            if first is not None:
                self.first_batch_timestamp = first.max_timestamp
        self.bytes_since_last_index = self.size - self.offset_index.last_entry()[1]

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Validate every batch, rebuild both indexes, cut a torn or corrupt tail.

        Returns the number of bytes truncated.
        """
        self._forget_recent()
        self.offset_index.reset()
        self.time_index.reset()
        self.bytes_since_last_index = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.next_offset = self.base_offset
        self.first_batch_timestamp = -1
        position = 0
        file_size = os.fstat(self.fd).st_size
        self.size = file_size
        last_offset = self.base_offset - 1
        while position < file_size:
            head = os.pread(self.fd, HEADER_SIZE, position)
            if len(head) < HEADER_SIZE:
                break
            header = parse_header(head, 0)
            size = header.size
            if (header.magic != MAGIC_V2 or header.batch_length < MIN_BATCH_LENGTH
                    or position + size > file_size
                    or header.base_offset <= last_offset
                    or header.last_offset_delta < 0
                    or header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET):
                # (The base offset is outside the CRC: a stale block can hold one that the
                # indexes' 32-bit relative offsets cannot, Kafka's ensureOffsetInRange.)
                break
            body = os.pread(self.fd, size - CRC_START, position + CRC_START)
            if crc32c(body) != header.crc:
                break
            self._track(header, position)
            last_offset = header.last_offset
            if on_batch is not None:
                on_batch(header)
            position += size
        truncated = file_size - position
        if truncated:
            os.ftruncate(self.fd, position)
        self.size = position
        self.offset_index.flush(fsync=False)
        self.time_index.flush(fsync=False)
        return truncated

    # -------------------------------------------------------------- lifecycle

    def _forget_recent(self) -> None:
        self._recent.clear()
        self._recent_last.clear()

    def truncate_to(self, offset: int) -> None:
        """Remove every batch with base offset >= ``offset``."""
        position = self.size
        for pos, header in self.batches(self.offset_index.lookup(offset - 1)[1] if offset > self.base_offset else 0):
            if header.base_offset >= offset:
                position = pos
                break
        os.ftruncate(self.fd, position)
        self.size = position
        self._forget_recent()
        self.key_index.reset()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.restore_tail_state()

    def flush(self) -> None:
        os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self, defer: bool = False, delay_s: float = FD_CLOSE_DELAY_S) -> None:
        """Close the segment's files, once (a second call does nothing). With ``defer`` the
        log file's descriptor is closed only ``delay_s`` later (``close_later``): for a
        segment deleted or replaced while fetch answers may still hold slices of it."""
        fd, self.fd = self.fd, -1
        if fd < 0:
            return
        self.offset_index.flush(fsync=False)
        self.time_index.flush(fsync=False)
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        if defer:
            close_later(fd, delay_s)
            return
        try:
            os.close(fd)
        except OSError:
            pass

    def delete(self, delay_s: float = FD_CLOSE_DELAY_S) -> None:
        self.close(defer=True, delay_s=delay_s)
        self.key_index.delete()
        for path in (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime for an empty segment (retention)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.stat(self.log_path).st_mtime * 1000)
