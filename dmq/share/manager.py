"""SharePartitionManager: the share-partitions this broker leads (Kafka's SharePartitionManager).

A share-partition (share group x topic-partition) lives on the topic-partition's leader
as a ``SharePartition`` (dmq/share/partition.py), created lazily by the first fetch or
acknowledgement that names it: its state is read through the ``SharePersister``; a
state without a start offset starts where the group's ``share.auto.offset.reset`` says
(latest: the high watermark; earliest: the log start; by_duration: the first record that
young). The group's configs (``group_settings``: its overrides over the broker's) also
give the lock duration of each acquisition, the isolation level of each read, and, when
the share-partition is loaded, its delivery count limit.

Operations on one share-partition are serialised by its ``asyncio.Lock``: acquiring
(read the log from ``next_fetch_offset`` up to the high watermark, or for
``share.isolation.level=read_committed`` up to the last stable offset with the batches of
aborted transactions archived, and acquire whole batches), acknowledging (apply, write the new state through the
persister, answer only then; a failed write is undone with ``checkpoint``/``restore``),
releasing a member's records (its session closed) and expiring locks (a
``loop.call_later`` timer on ``next_lock_deadline``). Every write is the whole window
(``SharePartition.snapshot``).

Clocks: lock deadlines and the timer that expires them follow a monotonic clock
(``now_ms``, ``time.monotonic``; Kafka's ``time.hiResClockMs``), so a wall clock stepped
back (NTP) does not keep records locked for as long as it went back, nor one stepped
forward expire locks early. Deadlines are in memory only (never persisted nor shown).
Only ``share.auto.offset.reset=by_duration`` compares against record timestamps, with
the wall clock (``wall_ms``).

Long-poll: a fetch that acquired nothing waits, up to its MaxWaitMs, in the replica
manager's fetch purgatory on its topic-partitions, so appends and high-watermark moves
(which wake that purgatory already) wake it, as do records this manager makes available
again (released, expired) and leadership changes.

Leadership: each operation checks that this broker still leads the topic-partition in
the leader epoch the share-partition was loaded in; if not, the share-partition is
dropped (NOT_LEADER_OR_FOLLOWER, or loaded again in the new epoch). A persister
answering FENCED_LEADER_EPOCH or FENCED_STATE_EPOCH drops it too (NOT_LEADER_OR_FOLLOWER
to the client, as Kafka), and so does a write answered INVALID_REQUEST or
UNKNOWN_TOPIC_OR_PARTITION: the state is gone under the loaded share-partition
(DeleteShareGroupOffsets, DeleteGroups, the topic deleted), and the next request loads
what is stored now instead of failing every acknowledgement while a session keeps it
loaded (the client is told NOT_LEADER_OR_FOLLOWER, or UNKNOWN_TOPIC_OR_PARTITION; both
retriable). ``partition_changed`` drops them at once (the broker's metadata listener may
call it; the checks make it optional).

Creating state: a state never initialized (the share coordinator answers start offset
-1) is initialized by the first fetch or acknowledgement that loads it, once
``may_initialize`` (the broker asks the group's coordinator) says the requesting member
belongs to a share group to which the partition is assigned, hence initialized (record
15). Otherwise the request gets that answer's error (GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID,
INVALID_REQUEST, COORDINATOR_NOT_AVAILABLE) and nothing is written: a principal with READ
on a group pattern cannot fill ``__share_group_state`` with states of made-up group ids,
which no admin API would delete. Kafka 4.1's group coordinator initializes states itself
and the leader only reads them; here the leader still initializes, but only what the
group coordinator vouches for.

Event-loop thread only. Called by the ShareFetch/ShareAcknowledge handlers (``fetch``,
``acknowledge``, ``release_member``) and the connection-close hook (``release_member``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.config import ShareGroupSettings
from dmq.record.batch import iter_headers
from dmq.record.records import decode_batch
from dmq.replication.partition import Partition, PartitionError
from dmq.replication.replica_manager import ReplicaManager
from dmq.share.dead_letter import DeadLetter, DeadLetterWriter, dead_letter
from dmq.share.partition import (
    AckBatch,
    AcquiredRange,
    ArchivedRange,
    LogBatch,
    PersistedState,
    SharePartition,
    SharePartitionConfig,
    aborted_as_control,
)
from dmq.share.persister import SharePartitionKey, SharePersister
from dmq.share.session import TopicIdPartition

log = logging.getLogger("dmq.share")

LATEST = "latest"
EARLIEST = "earliest"

_FENCED = (ErrorCode.fenced_leader_epoch, ErrorCode.fenced_state_epoch)
# A write answered so finds no state: deleted (INVALID_REQUEST, the share coordinator's
# answer to a write of a key it does not have) or its topic gone.
_STATE_GONE = (ErrorCode.invalid_request, ErrorCode.unknown_topic_or_partition)
_DROPS = _FENCED + _STATE_GONE
_COORDINATOR = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                ErrorCode.coordinator_load_in_progress)


def client_error(persister_error: ErrorCode) -> ErrorCode:
    """What a client is told when the persister answers ``persister_error`` (Kafka's
    SharePartition.fetchPersisterError). INVALID_REQUEST (a state deleted under the
    share-partition) is answered as a fence, NOT_LEADER_OR_FOLLOWER: retriable, and the
    share-partition is loaded again; Kafka answers UNKNOWN_SERVER_ERROR."""
    if persister_error in _FENCED or persister_error is ErrorCode.invalid_request:
        return ErrorCode.not_leader_or_follower
    if persister_error in _COORDINATOR:
        return ErrorCode.coordinator_not_available
    if persister_error is ErrorCode.unknown_topic_or_partition:
        return ErrorCode.unknown_topic_or_partition
    return ErrorCode.unknown_server_error


# (group id, member id, (topic id, partition)) -> NONE, or why the state may not be created
InitializeCheck = Callable[[str, str, TopicIdPartition], Awaitable[ErrorCode]]


def monotonic_ms() -> int:
    """Milliseconds of ``time.monotonic``: what lock deadlines are measured in."""
    return int(time.monotonic() * 1000)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """One partition of a ShareFetch answer: ``records`` the log batches overlapping
    ``acquired`` (b"" when nothing was acquired: never null)."""
    error: ErrorCode = ErrorCode.none
    records: bytes = b""
    acquired: tuple[AcquiredRange, ...] = ()
    error_message: str | None = None


@dataclass(eq=False, slots=True)
class _Entry:
    key: SharePartitionKey
    topic: str
    index: int
    partition: Partition  # the replica manager's object it was loaded from
    leader_epoch: int
    sp: SharePartition
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    state_epoch: int = 0
    dropped: bool = False
    released: int = 0  # bumped when records become available again (wakes long polls)
    timer: asyncio.TimerHandle | None = None


class SharePartitionManager:
    """The share-partitions led here, by ``(group_id, topic_id, partition)``.

    Invariants: an entry in ``_entries`` is not ``dropped``; its SharePartition is only
    touched while its lock is held (the lock is held across the persister's awaits, so
    a write's outcome is applied before anyone else looks); an entry's timer, when set,
    fires at its earliest lock deadline. ``topic_name`` resolves a topic id to its name
    in the cluster's metadata (None: unknown); ``group_settings(group_id)`` the group's
    configs (without it, every group has the broker's). ``now_ms`` is a monotonic clock
    (lock deadlines, the expiry timer: the event loop's clock is monotonic too);
    ``wall_ms`` the wall clock (only for by_duration resets). ``may_initialize``: see
    "Creating state" above; None lets every request initialize a state (tests, and
    brokers without a group coordinator).
    """

    def __init__(self, replica_manager: ReplicaManager, persister: SharePersister,
                 topic_name: Callable[[uuid.UUID], str | None], *,
                 config: SharePartitionConfig | None = None,
                 group_settings: Callable[[str], ShareGroupSettings] | None = None,
                 dead_letters: DeadLetterWriter | None = None, dead_letter_wait_s: float = 30.0,
                 now_ms: Callable[[], int] = monotonic_ms,
                 wall_ms: Callable[[], int] = wall_clock_ms,
                 may_initialize: InitializeCheck | None = None) -> None:
        self.replica_manager = replica_manager
        self.persister = persister
        self.topic_name = topic_name
        self.config = config or SharePartitionConfig()
        defaults = ShareGroupSettings(record_lock_duration_ms=self.config.lock_duration_ms,
                                      delivery_count_limit=self.config.delivery_count_limit)
        self.group_settings = group_settings or (lambda group_id: defaults)
        self.dead_letters = dead_letters
        self.dead_letter_wait_s = dead_letter_wait_s
        self.now_ms = now_ms
        self.wall_ms = wall_ms
        self.may_initialize = may_initialize
        self._entries: dict[tuple[str, uuid.UUID, int], _Entry] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def lock_duration_ms(self, group_id: str) -> int:
        """ShareFetch's AcquisitionLockTimeoutMs: the group's share.record.lock.duration.ms."""
        return self.group_settings(group_id).record_lock_duration_ms

    def _partition_config(self, group_id: str) -> SharePartitionConfig:
        """A share-partition's limits when it is loaded: the group's delivery count limit
        and lock duration over the broker's (a change applies from the next load)."""
        s = self.group_settings(group_id)
        return SharePartitionConfig(self.config.max_in_flight_records, s.delivery_count_limit,
                                    s.record_lock_duration_ms)

    def describe(self, group_id: str, partitions: Sequence[TopicIdPartition]
                 ) -> dict[TopicIdPartition, tuple[ErrorCode, SharePartition | None]]:
        """The group's share-partitions as loaded here (DescribeSharePartitions):
        NOT_LEADER_OR_FOLLOWER (or UNKNOWN_TOPIC_ID) where this broker does not lead the
        topic-partition; a SharePartition only where one is loaded (read only)."""
        out: dict[TopicIdPartition, tuple[ErrorCode, SharePartition | None]] = {}
        for topic_id, index in partitions:
            topic = self.topic_name(topic_id)
            if topic is None:
                out[(topic_id, index)] = (ErrorCode.unknown_topic_id, None)
                continue
            p = self.replica_manager.get_partition(topic, index)
            if p is None or not p.is_leader:
                out[(topic_id, index)] = (ErrorCode.not_leader_or_follower, None)
                continue
            entry = self._entries.get((group_id, topic_id, index))
            loaded = entry is not None and not entry.dropped and entry.sp.initialized
            out[(topic_id, index)] = (ErrorCode.none, entry.sp if loaded and entry is not None else None)
        return out

    def share_partition(self, group_id: str, topic_id: uuid.UUID, partition: int) -> SharePartition | None:
        """The loaded share-partition (for tests and describe paths); None if not loaded."""
        entry = self._entries.get((group_id, topic_id, partition))
        return entry.sp if entry is not None else None

    # ------------------------------------------------------------------ fetching

    async def fetch(self, group_id: str, member_id: str, partitions: Sequence[TopicIdPartition], *,
                    max_wait_ms: int, max_bytes: int, max_records: int, batch_size: int,
                    waiting: Callable[[], None] | None = None,
                    session_id: int | None = None) -> dict[TopicIdPartition, PartitionFetch]:
        """Acquire records for ``member_id`` across ``partitions`` (in that order, within
        ``max_records``, soft, and ``max_bytes``), tagged with its share session
        ``session_id``. When nothing was acquired and nothing failed, wait up to
        ``max_wait_ms`` for new data or released records, calling ``waiting`` first, and
        try again."""
        deadline = time.monotonic() + max_wait_ms / 1000.0
        waited = False
        while True:
            results = await self._fetch_pass(group_id, member_id, partitions, max_bytes, max_records,
                                             batch_size, session_id)
            if any(r.acquired or r.error is not ErrorCode.none for r in results.values()):
                return results
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not partitions:
                return results
            if not waited and waiting is not None:
                waiting()
            waited = True
            if not await self._wait_for_more(group_id, partitions, remaining):
                return results  # timed out: the pass before the wait answered nothing new

    async def _fetch_pass(self, group_id: str, member_id: str, partitions: Sequence[TopicIdPartition],
                          max_bytes: int, max_records: int, batch_size: int,
                          session_id: int | None) -> dict[TopicIdPartition, PartitionFetch]:
        results: dict[TopicIdPartition, PartitionFetch] = {}
        bytes_left, records_left = max_bytes, max_records
        for tp in partitions:
            if records_left <= 0 or bytes_left <= 0:
                results[tp] = PartitionFetch()
                continue
            entry, error = await self._lock_entry(group_id, member_id, tp)
            if entry is None:
                results[tp] = PartitionFetch(error)
                continue
            try:
                result = self._acquire(entry, member_id, bytes_left, records_left, batch_size,
                                       self.group_settings(group_id), session_id)
            finally:
                entry.lock.release()
            results[tp] = result
            records_left -= sum(r.last - r.first + 1 for r in result.acquired)
            bytes_left -= len(result.records)
        return results

    def _acquire(self, entry: _Entry, member_id: str, max_bytes: int, max_records: int,
                 batch_size: int, settings: ShareGroupSettings, session_id: int | None) -> PartitionFetch:
        sp, partition = entry.sp, entry.partition
        log_start = partition.log.log_start_offset
        if log_start > sp.start_offset:
            sp.log_start_moved(log_start)
        offset = sp.next_fetch_offset()
        if offset > partition.log.log_end_offset:
            return PartitionFetch()  # the log was truncated below the window: nothing to read yet
        res = partition.read(offset, max_bytes, min_one_batch=True, read_committed=settings.read_committed)
        if res.error is ErrorCode.offset_out_of_range:
            sp.log_start_moved(res.log_start_offset)  # Kafka: empty, error NONE
            return PartitionFetch()
        if res.error is not ErrorCode.none:
            return PartitionFetch(res.error)
        if res.data is None or res.data.length == 0:
            return PartitionFetch()
        data = res.data.read()
        headers = iter_headers(data)
        batches = [LogBatch(h.base_offset, h.last_offset, h.is_control) for _, h in headers]
        if res.aborted:  # read_committed: aborted transactions' batches are archived, never delivered
            batches = aborted_as_control([(b, h.producer_id, h.is_transactional)
                                          for b, (_, h) in zip(batches, headers, strict=True)], res.aborted)
        acquired = sp.acquire(member_id, offset, batches, max_records, batch_size, self.now_ms(),
                              lock_duration_ms=settings.record_lock_duration_ms,
                              session_id=session_id).ranges
        if not acquired:
            return PartitionFetch()
        self._schedule(entry)
        parts = [data[pos:pos + h.size] for pos, h in headers
                 if any(a.first <= h.last_offset and h.base_offset <= a.last for a in acquired)]
        records = b"".join(parts)
        partition.stats.bytes_out += len(records)  # the topic's BytesOut (metrics)
        return PartitionFetch(records=records, acquired=acquired)

    async def _wait_for_more(self, group_id: str, partitions: Sequence[TopicIdPartition],
                             timeout_s: float) -> bool:
        """Wait until a partition's visible data grows, records are released, or its
        leadership changes (True), or ``timeout_s`` passes (False)."""
        watched: list[tuple[tuple[str, int], Partition | None, int, _Entry | None, int]] = []
        for topic_id, index in partitions:
            topic = self.topic_name(topic_id)
            if topic is None:
                continue
            p = self.replica_manager.get_partition(topic, index)
            entry = self._entries.get((group_id, topic_id, index))
            watched.append(((topic, index), p, p.visible_bytes if p is not None else 0,
                            entry, entry.released if entry is not None else 0))
        if not watched:
            return False

        def changed() -> bool:
            for key, p, visible, entry, released in watched:
                now = self.replica_manager.get_partition(*key)
                if now is not p or now is None or not now.is_leader or now.visible_bytes != visible:
                    return True
                if entry is not None and (entry.dropped or entry.released != released):
                    return True
            return False

        keys = [w[0] for w in watched]
        return await self.replica_manager.fetch_purgatory.wait_until(keys, timeout_s, changed)

    # ------------------------------------------------------------------ acknowledging

    async def acknowledge(self, group_id: str, member_id: str,
                          acks: Mapping[TopicIdPartition, Sequence[AckBatch]]) -> dict[TopicIdPartition, ErrorCode]:
        """Apply each partition's acknowledgements, all or nothing per partition, and
        answer once the new state is written (or the change is undone)."""
        items = list(acks.items())
        errors = await asyncio.gather(*(self._acknowledge_one(group_id, member_id, tp, batches)
                                        for tp, batches in items))
        return {tp: e for (tp, _), e in zip(items, errors, strict=True)}

    async def _acknowledge_one(self, group_id: str, member_id: str, tp: TopicIdPartition,
                               batches: Sequence[AckBatch]) -> ErrorCode:
        entry, error = await self._lock_entry(group_id, member_id, tp)
        if entry is None:
            return error
        letters: asyncio.Task[bool] | None = None
        try:
            settings = self._dead_letter_mode(entry)
            saved = entry.sp.checkpoint()
            change = entry.sp.acknowledge(member_id, batches, self.now_ms())
            if change.error is not ErrorCode.none:
                return change.error
            if change.archived and entry.sp.dead_letter:
                letters = self._start_dead_letters(entry, settings, change.archived)
            if change.persist:
                written = await self._write(entry)
                if written is not ErrorCode.none:
                    if not entry.dropped and letters is None:
                        entry.sp.restore(saved)  # (records whose dead letters are on their way stay so)
                    return client_error(written)
            self._records_changed(entry)
            if letters is None:
                return ErrorCode.none
        finally:
            entry.lock.release()
        # REJECTs (and RELEASEs at the limit) are answered once their dead letters are
        # written and their archiving persisted.
        try:
            done = await asyncio.wait_for(asyncio.shield(letters), self.dead_letter_wait_s)
        except TimeoutError:
            return ErrorCode.request_timed_out
        return ErrorCode.none if done else ErrorCode.unknown_server_error

    # ------------------------------------------------------------------ releasing

    async def release_member(self, group_id: str, member_id: str, partitions: Sequence[TopicIdPartition],
                             session_id: int | None = None) -> None:
        """The member's share session closed: its records on ``partitions`` loaded here
        are available again (archived at the delivery limit), and the state written
        (a failed write is not undone, as for an expired lock). With ``session_id``, only
        the records acquired in that session: never what a newer session of the same
        member holds. A share-partition left with no acquired records is unloaded once
        its state is written."""
        await asyncio.gather(*(self._release_one(group_id, member_id, tp, session_id) for tp in partitions))

    async def _release_one(self, group_id: str, member_id: str, tp: TopicIdPartition,
                           session_id: int | None) -> None:
        entry = self._entries.get((group_id, *tp))
        if entry is None:
            return
        async with entry.lock:
            if entry.dropped:
                return
            settings = self._dead_letter_mode(entry)
            change = entry.sp.release_member(member_id, session_id)
            if change.archived and entry.sp.dead_letter:
                self._start_dead_letters(entry, settings, change.archived)
            written = await self._write(entry) if change.persist else ErrorCode.none
            self._records_changed(entry)
            if written is ErrorCode.none and not entry.dropped and entry.sp.acquired_records == 0 \
                    and entry.sp.archiving_records == 0:
                # Nobody holds a record: the next fetch reads the state again, which an
                # AlterShareGroupOffsets or DeleteShareGroupOffsets of the (then empty)
                # group may have changed meanwhile.
                self._drop(entry)

    def partition_changed(self, topic: str, index: int) -> None:
        """This broker stopped leading ``topic``-``index`` (or it moved to a new epoch, or
        was deleted): its share-partitions are dropped, their locks with them."""
        for entry in [e for e in self._entries.values() if (e.topic, e.index) == (topic, index)]:
            self._drop(entry)

    def close(self) -> None:
        """Shutdown: every share-partition dropped, timers and expiry tasks cancelled."""
        for entry in list(self._entries.values()):
            self._drop(entry)
        for task in list(self._tasks):
            task.cancel()

    # ------------------------------------------------------------------ internals

    async def _lock_entry(self, group_id: str, member_id: str,
                          tp: TopicIdPartition) -> tuple[_Entry | None, ErrorCode]:
        """The share-partition of ``tp``, loaded (for ``member_id``'s request), with its
        lock held; or an error."""
        topic_id, index = tp
        topic = self.topic_name(topic_id)
        if topic is None:
            return None, ErrorCode.unknown_topic_id
        for _ in range(3):
            try:
                partition = self.replica_manager.leader_partition(topic, index)
            except PartitionError as e:
                self.partition_changed(topic, index)
                return None, e.error
            key = (group_id, topic_id, index)
            entry = self._entries.get(key)
            if entry is not None and (entry.partition is not partition
                                      or entry.leader_epoch != partition.leader_epoch):
                self._drop(entry)
                entry = None
            if entry is None:
                entry = _Entry(SharePartitionKey(group_id, topic_id, index), topic, index, partition,
                               partition.leader_epoch, SharePartition(self._partition_config(group_id)))
                self._entries[key] = entry
            await entry.lock.acquire()
            if entry.dropped:
                entry.lock.release()
                continue
            if entry.sp.initialized:
                return entry, ErrorCode.none
            error = await self._load(entry, member_id)
            if error is ErrorCode.none:
                return entry, error
            self._drop(entry)
            entry.lock.release()
            return None, error
        return None, ErrorCode.not_leader_or_follower

    async def _load(self, entry: _Entry, member_id: str) -> ErrorCode:
        result = await self.persister.read_state(entry.key, entry.leader_epoch)
        if result.error is not ErrorCode.none:
            log.info("share-partition %s: reading its state failed: %s %s", entry.key, result.error.name,
                     result.error_message or "")
            return client_error(result.error)
        if entry.dropped:
            return ErrorCode.not_leader_or_follower
        if result.start_offset < 0 and self.may_initialize is not None:
            refused = await self.may_initialize(entry.key.group_id, member_id,
                                                (entry.key.topic_id, entry.key.partition))
            if refused is not ErrorCode.none:
                log.info("share-partition %s: not initializing its state for member %s: %s",
                         entry.key, member_id, refused.name)
                return refused
            if entry.dropped:
                return ErrorCode.not_leader_or_follower
        log_start = entry.partition.log.log_start_offset
        reset = log_start
        settings = self._dead_letter_mode(entry)
        if result.start_offset < 0:
            reset = self._reset_offset(entry.partition, settings)
        try:
            change = entry.sp.initialize(PersistedState(result.start_offset, result.state_batches), reset)
        except ValueError as e:
            log.error("share-partition %s: unusable persisted state: %s", entry.key, e)
            return ErrorCode.unknown_server_error
        entry.state_epoch = result.state_epoch
        if log_start > entry.sp.start_offset:
            entry.sp.log_start_moved(log_start)
        if result.start_offset < 0:
            # The start the reset policy chose is written at once: a later leader must not
            # choose again ("latest" would skip what was produced meanwhile). A state never
            # initialized (the share coordinator answers start -1) is initialized there (the
            # group coordinator vouched for it above), as Kafka's group coordinator does when
            # it first assigns the partition; a write would be refused (INVALID_REQUEST).
            initialized = await self.persister.initialize_state(entry.key, result.state_epoch,
                                                               entry.sp.start_offset)
            if initialized is not ErrorCode.none:
                log.info("share-partition %s: initializing its state failed: %s", entry.key,
                         initialized.name)
                return client_error(initialized)
            if entry.dropped:
                return ErrorCode.not_leader_or_follower
        if change.persist or result.start_offset < 0:
            written = await self._write(entry)
            if written in _DROPS:
                return client_error(written)
        if change.archived and entry.sp.dead_letter:  # AVAILABLE at the limit when it was written
            self._start_dead_letters(entry, settings, change.archived)
        return ErrorCode.none

    # ------------------------------------------------------------------ dead letters

    def _dead_letter_mode(self, entry: _Entry) -> ShareGroupSettings:
        """The group's settings now; its share-partition archives through ARCHIVING while
        the group has a dead-letter topic (and the broker a writer)."""
        settings = self.group_settings(entry.key.group_id)
        entry.sp.dead_letter = settings.dead_letter_topic is not None and self.dead_letters is not None
        return settings

    def _start_dead_letters(self, entry: _Entry, settings: ShareGroupSettings,
                            archived: Sequence[ArchivedRange]) -> asyncio.Task[bool]:
        """Write the dead letters of records just put in ARCHIVING (their data read now,
        while the caller holds the lock), then archive them and write the state: the
        dead letter first, the archiving it stands for after (docs/share-groups.md). The
        task answers whether both were done."""
        assert settings.dead_letter_topic is not None and self.dead_letters is not None
        letters = self._read_dead_letters(entry, archived)
        task = asyncio.get_running_loop().create_task(
            self._dead_letter_task(entry, settings.dead_letter_topic, tuple(archived), letters))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _dead_letter_task(self, entry: _Entry, topic: str, archived: tuple[ArchivedRange, ...],
                                letters: list[DeadLetter]) -> bool:
        assert self.dead_letters is not None
        written = await self.dead_letters.write(topic, entry.topic, entry.index, letters)
        async with entry.lock:
            if entry.dropped:
                # A new leader, or this one loading again, knows them as they were before
                # (AVAILABLE with their delivery count): delivered or archived again.
                return False
            for a in archived:
                entry.sp.dead_lettered(a.first, a.last)
            stored = await self._write(entry)
            self._records_changed(entry)
            return written and stored is ErrorCode.none

    def _read_dead_letters(self, entry: _Entry, archived: Sequence[ArchivedRange]) -> list[DeadLetter]:
        """The records of ``archived`` as dead letters, in offset order (offsets the log no
        longer has are skipped)."""
        wanted = {o: a for a in archived for o in range(a.first, a.last + 1)}
        out: list[DeadLetter] = []
        offset, last = min(wanted), max(wanted)
        while offset <= last:
            res = entry.partition.read(offset, 1 << 20, min_one_batch=True)
            if res.error is not ErrorCode.none or res.data is None or res.data.length == 0:
                break
            data = res.data.read()
            headers = iter_headers(data)
            if not headers:
                break
            for pos, h in headers:
                if not h.is_control and h.last_offset >= offset:
                    for r in decode_batch(data[pos:pos + h.size])[1]:
                        a = wanted.get(r.offset)
                        if a is not None:
                            out.append(dead_letter(r, a.reason.value, entry.key.group_id, entry.topic,
                                                   entry.index, a.delivery_count))
                offset = max(offset, h.last_offset + 1)
        return out

    def _reset_offset(self, partition: Partition, settings: ShareGroupSettings) -> int:
        """Where a share-partition without a start offset starts (share.auto.offset.reset):
        latest, the high watermark; earliest, the log start; by_duration, the first record
        whose timestamp is at least now less the duration (the high watermark if none)."""
        log_start = partition.log.log_start_offset
        if settings.auto_offset_reset == EARLIEST:
            return log_start
        duration = settings.reset_by_duration_ms
        if duration is not None:
            found = partition.log.offset_for_timestamp(self.wall_ms() - duration)
            if found is not None and found[0] < partition.high_watermark:
                return max(found[0], log_start)
        return partition.high_watermark

    async def _write(self, entry: _Entry) -> ErrorCode:
        """Write the whole window; a fenced answer, or one saying the state is gone,
        drops the share-partition (the next request loads it again)."""
        snapshot = entry.sp.snapshot()
        try:
            error = await self.persister.write_state(
                entry.key, entry.state_epoch, entry.leader_epoch, snapshot.start_offset,
                snapshot.state_batches, snapshot.delivery_complete_count)
        except Exception:  # noqa: BLE001 - the contract answers codes; a bug must not wedge the lock
            log.exception("share-partition %s: writing its state failed", entry.key)
            return ErrorCode.unknown_server_error
        if error in _DROPS:
            log.info("share-partition %s: %s by the share coordinator (%s); dropped", entry.key,
                     "fenced" if error in _FENCED else "its state is gone", error.name)
            self._drop(entry)
        elif error is not ErrorCode.none:
            log.info("share-partition %s: writing its state failed: %s", entry.key, error.name)
        return error

    def _records_changed(self, entry: _Entry) -> None:
        """Records may be available again: wake long polls, re-arm the lock timer."""
        entry.released += 1
        self._schedule(entry)
        self.replica_manager.fetch_purgatory.check_and_complete((entry.topic, entry.index))

    def _schedule(self, entry: _Entry) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        if entry.dropped:
            return
        deadline = entry.sp.next_lock_deadline()
        if deadline is None:
            return
        delay = max(0, deadline - self.now_ms()) / 1000.0
        entry.timer = asyncio.get_running_loop().call_later(delay, self._on_timer, entry)

    def _on_timer(self, entry: _Entry) -> None:
        entry.timer = None
        if entry.dropped:
            return
        task = asyncio.get_running_loop().create_task(self._expire(entry))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _expire(self, entry: _Entry) -> None:
        async with entry.lock:
            if entry.dropped:
                return
            settings = self._dead_letter_mode(entry)
            change = entry.sp.expire_locks(self.now_ms())
            if change.archived and entry.sp.dead_letter:
                self._start_dead_letters(entry, settings, change.archived)
            if change.persist:
                await self._write(entry)  # the expiry stands even if the write fails, as in Kafka
            self._records_changed(entry)

    def _drop(self, entry: _Entry) -> None:
        entry.dropped = True
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        key = (entry.key.group_id, entry.key.topic_id, entry.key.partition)
        if self._entries.get(key) is entry:
            del self._entries[key]
        self.replica_manager.fetch_purgatory.check_and_complete((entry.topic, entry.index))
