"""CoordinatorRuntime: runs pure coordinator shards on the partitions of an internal topic.

A coordinator (groups today; transactions next) is a *shard* per partition of
its internal topic (``__consumer_offsets``). A request is an operation
``op(shard, now_ms) -> CoordinatorResult``: a plain function of the shard's
state that may change the shard's in-memory, non-durable state (who is
waiting in a rebalance) and returns

- ``response``: the answer, or ``Deferred(key)`` when the request is parked
  until a later operation answers ``key`` (a JoinGroup waiting for the others);
- ``records``: what must become durable. The runtime appends them to the
  shard's partition, **waits until the high watermark passes them** (every
  in-sync replica has them), then **replays** them into the shard and only then
  answers. Durable state changes only by replaying records, which is also how
  a shard is built when this broker starts leading its partition;
- ``replies``: answers to parked requests, sent once the records are committed
  (at once when there are none, unless the shard's state is not all committed:
  see below);
- ``timers``: ``Schedule(key, delay_ms)`` / ``Cancel(key)``; when a timer fires
  the runtime runs ``shard.on_timer(key, now_ms)`` as an operation;
- ``committed`` / ``failed``: follow-up operations run after the records are
  committed, or when they could not be;
- ``effects``: work outside the shard (sending transaction markers), handed to
  the runtime's ``on_effect`` once the records are committed, like replies.

Ordering: appends happen in operation order (the append is synchronous), and
records are replayed strictly in offset order: when one write is committed,
every write before it is replayed first. A write whose wait timed out stays
pending and is replayed once the high watermark passes it, so the shard never
misses a record that is in its log. ``exclusive=True`` operations (those whose
records depend on durable state: deleting a group's offsets) run only once
every earlier write has been replayed.

Load and unload: ``set_led({partition: leader_epoch})`` loads the shards of
partitions this broker starts leading (replaying the partition from its log
start: at once when that takes at most ``LOAD_SLICE_S``, else in slices of that
long with the event loop serving connections between them) and unloads the
others, failing their parked requests with NOT_COORDINATOR; a new leader epoch
is an unload and a load. Only leadership
unloads: a failed write is answered with an error and the shard stays. A request
for a partition without a shard is answered COORDINATOR_LOAD_IN_PROGRESS while
metadata already names this broker its leader (``absent_error``), else
NOT_COORDINATOR. A partition whose load fails (its log cannot be read, a record
cannot be replayed) is logged and left unloaded, answered NOT_COORDINATOR as
Kafka's failed coordinator is, until its leadership changes (a new leader epoch
loads it again); the other partitions load as if it were not there.

Uncommitted state: a shard replays its own writes only once committed, but it is
loaded from its partition's whole log, whose tail a new leader may hold uncommitted
(written by the old leader, on too few replicas; a later leader may not have it).
An operation that writes nothing is answered only once every offset the shard has
seen (loaded or appended) is committed, else with the commit's error; a ``read``
answers COORDINATOR_LOAD_IN_PROGRESS until the loaded tail is committed, and sees only
replayed writes: ``read_after_writes`` first waits for those appended before it.

Everything after an append is the runtime's own task, so a request whose
client goes away cannot leave a write half done; a write whose wait for the
high watermark gave up (timeout) stays pending and a watcher replays it when
the high watermark passes it.

Event-loop thread only; shards themselves never await.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import BrokerInfo, MetadataStore
from dmq.storage.producer_state import SKIP_VERIFICATION, VerificationGuard

log = logging.getLogger("dmq.coordinator")

# The longest a partition's load replays its log before it yields to the event loop.
LOAD_SLICE_S = 0.01

Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class Deferred:
    """The response is sent later, by a reply to ``key``."""
    key: Hashable


@dataclass(frozen=True, slots=True)
class Schedule:
    """Run ``shard.on_timer(key)`` after ``delay_ms`` (replaces a timer of the same key)."""
    key: Hashable
    delay_ms: int


@dataclass(frozen=True, slots=True)
class Cancel:
    key: Hashable


@dataclass(frozen=True, slots=True)
class EndMarker:
    """A transaction's COMMIT or ABORT marker, written to a coordinator's own partition
    (a transaction that committed offsets to ``__consumer_offsets`` ends there too)."""
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One record of a coordinator's partition as loading reads it: a data record
    (``producer_id`` set when it belongs to a transaction) or a transaction marker."""
    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int = -1
    marker: EndMarker | None = None


@dataclass(slots=True)
class CoordinatorResult:
    response: Any = None
    records: list[Record] = field(default_factory=list)
    replies: list[tuple[Hashable, Any]] = field(default_factory=list)
    timers: list[Schedule | Cancel] = field(default_factory=list)
    committed: Callable[[Any, int], CoordinatorResult] | None = None
    failed: Callable[[Any, ErrorCode, int], CoordinatorResult] | None = None
    effects: list[Any] = field(default_factory=list)
    producer: tuple[int, int] | None = None  # (id, epoch): the records belong to its transaction
    marker: EndMarker | None = None  # a transaction marker to write instead of records
    # The transaction's verification for this append (KIP-890; see PartitionWriter.append).
    verification: VerificationGuard | None = SKIP_VERIFICATION


class CoordinatorShard(Protocol):
    def replay(self, key: bytes, value: bytes | None, *, loading: bool, producer_id: int = -1,
               offset: int = -1) -> None:
        """Apply one committed record; ``offset``: its offset in the partition's log."""
        ...

    def replay_marker(self, producer_id: int, commit: bool, *, loading: bool) -> None: ...

    def on_loaded(self, now_ms: int) -> CoordinatorResult: ...

    def on_timer(self, key: Hashable, now_ms: int) -> CoordinatorResult: ...


class PartitionWriter(Protocol):
    """The internal topic as the runtime sees it."""

    def append(self, partition: int, records: list[Record], producer: tuple[int, int] | None = None,
               verification: VerificationGuard | None = SKIP_VERIFICATION) -> tuple[ErrorCode, int]:
        """Append as one batch (a transactional one of ``producer``); ``(error, last offset)``.
        ``verification``: the guard of the transaction's verification with its coordinator
        (``Log.append_as_leader``); the default skips the check."""
        ...

    def append_marker(self, partition: int, marker: EndMarker) -> tuple[ErrorCode, int]:
        """Append a transaction marker; ``(error, its offset)``."""
        ...

    async def wait_committed(self, partition: int, last_offset: int) -> ErrorCode:
        """Until the high watermark passes ``last_offset`` (bounded by the writer's timeout)."""
        ...

    def read(self, partition: int) -> Iterator[LogEntry]:
        """Every record and marker of the partition's local log, in order."""
        ...

    def leads(self, partition: int) -> bool:
        """Whether metadata names this broker the partition's leader (its shard is
        loaded, or will be once the local replica has taken the role)."""
        ...


class CoordinatorTopic(PartitionWriter, Protocol):
    """A partition writer whose topic is created on first use."""

    async def ensure_exists(self) -> bool: ...


S = TypeVar("S", bound=CoordinatorShard)


def write_error(error: ErrorCode) -> ErrorCode:
    """What a coordinator answers when its records could not be written (Kafka's mapping).
    A transactional append's own refusals (a fenced producer, a transaction that is not
    open, a marker from a transaction coordinator that has been replaced) are the
    producer's or the marker sender's to handle and pass through."""
    if error in (ErrorCode.none, ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                 ErrorCode.invalid_producer_epoch, ErrorCode.invalid_txn_state,
                 ErrorCode.transaction_coordinator_fenced):
        return error
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error,
                 ErrorCode.fenced_leader_epoch):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large,
                 ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    # unknown partition, not enough replicas, timeouts: the coordinator cannot commit now
    return ErrorCode.coordinator_not_available


@dataclass(eq=False, slots=True)
class _Pending:
    last_offset: int
    records: list[Record]
    producer_id: int = -1
    marker: EndMarker | None = None
    key: Hashable | None = None  # the state the operation that wrote it depended on


@dataclass(eq=False)
class _Context(Generic[S]):
    partition: int
    leader_epoch: int
    shard: S
    parked: dict[Hashable, tuple[asyncio.Future[Any], Callable[[ErrorCode], Any]]] = \
        field(default_factory=dict)
    timers: dict[Hashable, asyncio.TimerHandle] = field(default_factory=dict)
    pending: deque[_Pending] = field(default_factory=deque)
    # Set (and dropped) whenever a pending write leaves ``pending``, the shard is unloaded
    # or an exclusive operation stops waiting: waiting operations look again.
    changed: asyncio.Event | None = None
    exclusive_waiting: int = 0  # exclusive operations waiting: later writes queue behind
    watching: bool = False
    unloaded: bool = False
    # The last offset of the shard's state: of the log when it was loaded (the tail may not
    # be committed yet), then of each append; and the highest offset known committed.
    last_written: int = -1
    committed_through: int = -1
    loaded_through: int = -1  # the last offset loaded: reads wait until it is committed


@dataclass(eq=False)
class _Loader(Generic[S]):
    """A partition being loaded: its shard, how far the replay of its log has come."""
    partition: int
    leader_epoch: int
    shard: S
    entries: Iterator[LogEntry]
    count: int = 0
    last: int = -1
    started: float = field(default_factory=time.monotonic)
    task: asyncio.Task[Any] | None = None

    def replay(self, deadline: float) -> bool:
        """Replay records until the log ends (True) or ``deadline`` (monotonic) passes
        (looked at every 64 records: a smaller log loads whole)."""
        shard = self.shard
        for entry in self.entries:
            if entry.marker is not None:
                shard.replay_marker(entry.marker.producer_id, entry.marker.commit, loading=True)
            elif entry.key is not None:
                shard.replay(entry.key, entry.value, loading=True, producer_id=entry.producer_id,
                             offset=entry.offset)
            self.count += 1
            self.last = entry.offset
            if self.count % 64 == 0 and time.monotonic() >= deadline:
                return False
        return True


class CoordinatorRuntime(Generic[S]):
    def __init__(self, writer: PartitionWriter, new_shard: Callable[[int, int], S],
                 commit_timeout_ms: int = 5000, name: str = "coordinator",
                 clock: Callable[[], int] | None = None,
                 on_effect: Callable[[int, Any], None] | None = None) -> None:
        """``new_shard(partition, leader_epoch)`` builds an empty shard to replay into."""
        self.writer = writer
        self.new_shard = new_shard
        self.on_effect = on_effect
        self.commit_timeout_ms = commit_timeout_ms
        self.name = name
        self.clock = clock or (lambda: int(time.time() * 1000))
        self._contexts: dict[int, _Context[S]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._load_failed: dict[int, int] = {}  # partition -> the leader epoch whose load failed
        self._loading: dict[int, _Loader[S]] = {}  # partitions being replayed in slices
        self.closed = False

    # ------------------------------------------------------------- leadership

    def loaded_partitions(self) -> set[int]:
        return set(self._contexts)

    def shard(self, partition: int) -> S | None:
        ctx = self._contexts.get(partition)
        return ctx.shard if ctx is not None else None

    def absent_error(self, partition: int) -> ErrorCode:
        """The answer for a partition without a shard here: COORDINATOR_LOAD_IN_PROGRESS
        while metadata already names this broker its leader (FindCoordinator sends clients
        here, and the shard loads once the local replica takes the role: creating the
        topic's logs, or a leader change not yet applied), which clients retry here; else
        NOT_COORDINATOR, which sends them to FindCoordinator (Kafka answers NOT_COORDINATOR
        before its load starts and LOAD_IN_PROGRESS during it). A closed runtime (the
        broker shutting down) answers NOT_COORDINATOR: its shards do not load again."""
        if not self.closed and self.loading(partition):
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.not_coordinator

    def loading(self, partition: int) -> bool:
        """Metadata names this broker the partition's leader but its shard is not loaded."""
        return partition in self._loading or (partition not in self._contexts and partition not in
                                               self._load_failed and self.writer.leads(partition))

    def any_loading(self, num_partitions: int) -> bool:
        """Whether a partition of ``range(num_partitions)`` is ``loading``: a listing of every
        shard here (ListGroups, ListTransactions) would leave its groups out, so it answers
        COORDINATOR_LOAD_IN_PROGRESS instead, as Kafka's does. False once closed."""
        return not self.closed and any(self.loading(p) for p in range(num_partitions))

    def set_led(self, led: dict[int, int]) -> None:
        """Follow this broker's leadership: ``{partition: leader epoch}``. Once closed
        (the broker is shutting down and its logs are closing), nothing loads again."""
        if self.closed:
            return
        for partition, ctx in list(self._contexts.items()):
            if led.get(partition) != ctx.leader_epoch:
                self.unload(partition)
        for partition, loader in list(self._loading.items()):
            if led.get(partition) != loader.leader_epoch:
                self._stop_loading(partition)
        self._load_failed = {p: epoch for p, epoch in self._load_failed.items() if led.get(p) == epoch}
        deadline = time.monotonic() + LOAD_SLICE_S  # for all the loads this call starts
        for partition, epoch in sorted(led.items()):
            if partition in self._contexts or partition in self._loading \
                    or self._load_failed.get(partition) == epoch:
                continue
            self._start_load(partition, epoch, deadline)

    def _start_load(self, partition: int, leader_epoch: int, deadline: float) -> None:
        """Replay the partition: at once when that ends by ``deadline`` (monotonic), else
        in slices of ``LOAD_SLICE_S`` in a task that yields to the event loop between them,
        the partition answered COORDINATOR_LOAD_IN_PROGRESS meanwhile (as Kafka's, which
        loads on a thread of its own)."""
        try:
            loader = _Loader(partition, leader_epoch, self.new_shard(partition, leader_epoch),
                             self.writer.read(partition))
            done = loader.replay(deadline)
        except Exception:
            self._load_error(partition, leader_epoch)
            return
        if done:
            self._loaded(loader)
            return
        self._loading[partition] = loader
        loader.task = self._spawn(self._load_rest(loader))

    async def _load_rest(self, loader: _Loader[S]) -> None:
        try:
            done = False
            while not done:
                await asyncio.sleep(0)
                done = loader.replay(time.monotonic() + LOAD_SLICE_S)
        except Exception:
            if self._loading.get(loader.partition) is loader:
                del self._loading[loader.partition]
                self._load_error(loader.partition, loader.leader_epoch)
            return
        if self._loading.get(loader.partition) is loader:
            del self._loading[loader.partition]
            self._loaded(loader)

    def _stop_loading(self, partition: int) -> None:
        loader = self._loading.pop(partition, None)
        if loader is not None and loader.task is not None:
            loader.task.cancel()

    def _load_error(self, partition: int, leader_epoch: int) -> None:
        # Kafka's loader fails the partition's load too; here it must not stop the
        # other partitions' loads (nor the caller's pass over the other topics).
        log.exception("%s: loading partition %d (leader epoch %d) failed; not coordinating it until its "
                      "leadership changes", self.name, partition, leader_epoch)
        self._load_failed[partition] = leader_epoch

    def load(self, partition: int, leader_epoch: int) -> int:
        """Build the shard by replaying the partition, all at once; returns the records
        read. Raises what reading or replaying the log raised, the partition left unloaded."""
        self.unload(partition)
        loader = _Loader(partition, leader_epoch, self.new_shard(partition, leader_epoch),
                         self.writer.read(partition))
        loader.replay(math.inf)
        self._loaded(loader)
        return loader.count

    def _loaded(self, loader: _Loader[S]) -> None:
        shard, last = loader.shard, loader.last
        loaded = shard.on_loaded(self.clock())
        ctx: _Context[S] = _Context(loader.partition, loader.leader_epoch, shard, last_written=last,
                                    loaded_through=last)
        self._contexts[loader.partition] = ctx
        if last >= 0:
            self._spawn(self._watch_loaded(ctx))
        self._process(ctx, loaded)
        if loader.count:
            log.info("%s: loaded %d records of partition %d in %.3f s", self.name, loader.count,
                     loader.partition, time.monotonic() - loader.started)

    async def _watch_loaded(self, ctx: _Context[S]) -> None:
        """Until the log this shard was loaded from is committed (reads wait for it)."""
        while not ctx.unloaded and ctx.committed_through < ctx.loaded_through:
            error = await self.writer.wait_committed(ctx.partition, ctx.loaded_through)
            if error in (ErrorCode.none, ErrorCode.not_enough_replicas_after_append):
                ctx.committed_through = max(ctx.committed_through, ctx.loaded_through)
            elif error == ErrorCode.not_leader_or_follower:
                return  # leadership moved: the backend unloads the shard
            else:
                await asyncio.sleep(0.1)

    def unload(self, partition: int) -> None:
        self._stop_loading(partition)
        ctx = self._contexts.pop(partition, None)
        if ctx is None:
            return
        ctx.unloaded = True
        for handle in ctx.timers.values():
            handle.cancel()
        ctx.timers.clear()
        parked = list(ctx.parked.values())
        ctx.parked.clear()
        for fut, error_response in parked:
            if not fut.done():
                fut.set_result(error_response(ErrorCode.not_coordinator))
        ctx.pending.clear()
        self._wake(ctx)

    async def close(self) -> None:
        self.closed = True
        for partition in list(self._contexts) + list(self._loading):
            self.unload(partition)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -------------------------------------------------------------- operations

    def read(self, partition: int, op: Callable[[S], Any], error_response: Callable[[ErrorCode], Any]) -> Any:
        """A read of the shard's state: no records, answered at once. The shard holds
        only committed state (records replay once committed) but for the tail of the log
        it was loaded from: until that is committed, COORDINATOR_LOAD_IN_PROGRESS."""
        ctx = self._contexts.get(partition)
        if ctx is None:
            return error_response(self.absent_error(partition))
        if ctx.committed_through < ctx.loaded_through:
            return error_response(ErrorCode.coordinator_load_in_progress)
        return op(ctx.shard)

    async def read_after_writes(self, partition: int, op: Callable[[S], Any],
                                error_response: Callable[[ErrorCode], Any]) -> Any:
        """A ``read`` that also sees every write appended before it: run once those are
        committed and replayed (writes appended meanwhile do not hold it up, nor does it
        hold them up). Kafka runs such a read as a write operation with no records
        (OffsetFetch with require_stable: an offset a TxnOffsetCommit has appended but not
        yet replicated is unstable already). COORDINATOR_NOT_AVAILABLE when those writes
        are not committed within the commit timeout, NOT_COORDINATOR if the shard goes."""
        ctx = self._contexts.get(partition)
        if ctx is None:
            return error_response(self.absent_error(partition))
        if ctx.pending:
            upto = ctx.pending[-1].last_offset
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.commit_timeout_ms / 1000
            while ctx.pending and ctx.pending[0].last_offset <= upto:
                if not await self._wait_changed(ctx, deadline - loop.time()):
                    return error_response(ErrorCode.coordinator_not_available)
                if ctx.unloaded:
                    return error_response(ErrorCode.not_coordinator)
        return self.read(partition, op, error_response) if not ctx.unloaded else \
            error_response(ErrorCode.not_coordinator)

    async def write(self, partition: int, op: Callable[[S, int], CoordinatorResult],
                    error_response: Callable[[ErrorCode], Any], exclusive: bool = False,
                    key: Hashable | None = None) -> Any:
        """Run ``op`` on the partition's shard; its answer once its records are committed.

        The shard holds committed state only. An operation whose records depend on it
        waits until the writes it depends on are committed when it runs: ``exclusive``,
        every pending write of the partition (and writes that come meanwhile queue behind
        it, so that it is not starved); ``key``, those of operations with the same key
        (operations on one share-partition's state).

        Everything after the append (waiting, replaying, the follow-ups, the
        replies) is the runtime's own task: a request cancelled meanwhile (its
        client went away) changes nothing of what happens to the shard."""
        ctx = self._contexts.get(partition)
        if ctx is None:
            return error_response(self.absent_error(partition))

        def blocked() -> bool:
            if exclusive:
                return bool(ctx.pending)
            if ctx.exclusive_waiting:
                return True
            return key is not None and any(p.key == key for p in ctx.pending)

        if blocked():
            # Until it is not blocked when it runs: a write appended after the last one it
            # waited for committed, but before this task resumed, is not in the state either.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.commit_timeout_ms / 1000
            if exclusive:
                ctx.exclusive_waiting += 1
            try:
                while blocked():
                    if not await self._wait_changed(ctx, deadline - loop.time()):
                        return error_response(ErrorCode.coordinator_not_available)
                    if ctx.unloaded:
                        return error_response(ErrorCode.not_coordinator)
            finally:
                if exclusive:
                    ctx.exclusive_waiting -= 1
                    self._wake(ctx)
        result = op(ctx.shard, self.clock())
        parked, finishing = self._submit(ctx, result, error_response, key)
        response = await asyncio.shield(finishing)
        if parked is not None:
            return await parked
        return response

    async def _wait_changed(self, ctx: _Context[S], timeout_s: float) -> bool:
        """Until ``ctx`` changes (see ``_Context.changed``); False after ``timeout_s``."""
        if timeout_s <= 0:
            return False
        if ctx.changed is None:
            ctx.changed = asyncio.Event()
        try:
            await asyncio.wait_for(ctx.changed.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    @staticmethod
    def _wake(ctx: _Context[S]) -> None:
        event, ctx.changed = ctx.changed, None
        if event is not None:
            event.set()

    def _submit(self, ctx: _Context[S], result: CoordinatorResult,
                error_response: Callable[[ErrorCode], Any], key: Hashable | None = None
                ) -> tuple[asyncio.Future[Any] | None, asyncio.Future[Any]]:
        """Park, set timers and append now, in operation order; the rest in a task.

        Returns the parked request's future (if parked) and the direct answer's."""
        parked: asyncio.Future[Any] | None = None
        if isinstance(result.response, Deferred):
            parked = self._park(ctx, result.response.key, error_response)
        self._set_timers(ctx, result.timers)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not result.records and result.marker is None:
            if ctx.committed_through < ctx.last_written:
                # Answered from state not all committed yet (a write still waiting, or the
                # tail of the log this shard was loaded from): not before it is, since a
                # new leader may not have it (Kafka's runtime defers such answers too).
                return parked, self._spawn(self._finish_unwritten(ctx, result, ctx.last_written,
                                                                  error_response))
            self._deliver(ctx, result.replies)
            self._effects(ctx, result.effects)
            done.set_result(result.response)
            return parked, done
        if result.marker is not None:
            error, last = self.writer.append_marker(ctx.partition, result.marker)
        else:
            error, last = self.writer.append(ctx.partition, result.records, result.producer,
                                             result.verification)
        if error != ErrorCode.none:
            self._failed(ctx, result, write_error(error), error_response)
            done.set_result(error_response(write_error(error)))
            return parked, done
        ctx.pending.append(_Pending(last, result.records,
                                    result.producer[0] if result.producer is not None else -1,
                                    result.marker, key))
        ctx.last_written = max(ctx.last_written, last)
        return parked, self._spawn(self._finish(ctx, result, last, error_response))

    async def _finish_unwritten(self, ctx: _Context[S], result: CoordinatorResult, upto: int,
                                error_response: Callable[[ErrorCode], Any]) -> Any:
        """The answer of an operation without records, once the state it saw is committed."""
        error = await self.writer.wait_committed(ctx.partition, upto)
        if error == ErrorCode.not_enough_replicas_after_append:
            error = ErrorCode.none
        if error == ErrorCode.none and not ctx.unloaded:
            ctx.committed_through = max(ctx.committed_through, upto)
            self._deliver(ctx, result.replies)
            self._effects(ctx, result.effects)
            return result.response
        error = ErrorCode.not_coordinator if ctx.unloaded else write_error(error)
        keys = [key for key, _ in result.replies]
        if isinstance(result.response, Deferred):
            keys.append(result.response.key)
        # The parked requests it would have answered get the error, each in its own shape.
        self._deliver(ctx, [(key, ctx.parked[key][1](error)) for key in keys if key in ctx.parked])
        return error_response(error)

    async def _finish(self, ctx: _Context[S], result: CoordinatorResult, last: int,
                      error_response: Callable[[ErrorCode], Any]) -> Any:
        error = await self.writer.wait_committed(ctx.partition, last)
        if error == ErrorCode.not_enough_replicas_after_append:
            error = ErrorCode.none  # the high watermark passed it: committed, the ISR just shrank
        if ctx.unloaded:
            # Answered NOT_COORDINATOR by the unload if parked; what is committed stays so.
            return result.response if error == ErrorCode.none else error_response(ErrorCode.not_coordinator)
        if error != ErrorCode.none:
            self._failed(ctx, result, write_error(error), error_response)
            if error != ErrorCode.not_leader_or_follower:
                self._watch(ctx)  # replayed when the high watermark passes it after all
            return error_response(write_error(error))
        ctx.committed_through = max(ctx.committed_through, last)
        self._replay_committed(ctx, last)
        if result.committed is not None:
            self._process(ctx, result.committed(ctx.shard, self.clock()))
        self._deliver(ctx, result.replies)
        self._effects(ctx, result.effects)
        return result.response

    def _failed(self, ctx: _Context[S], result: CoordinatorResult, error: ErrorCode,
                error_response: Callable[[ErrorCode], Any]) -> None:
        """The records could not be written (or committed in time): follow-up, then answers."""
        log.warning("%s: writing %d records to partition %d failed: %s", self.name,
                    len(result.records), ctx.partition, error.name)
        if result.failed is not None:
            self._process(ctx, result.failed(ctx.shard, error, self.clock()))
        self._deliver(ctx, result.replies)
        if isinstance(result.response, Deferred):
            self._deliver(ctx, [(result.response.key, error_response(error))])

    def _watch(self, ctx: _Context[S]) -> None:
        """Keep waiting for writes whose own wait gave up, until they commit or the shard goes."""
        if ctx.watching:
            return
        ctx.watching = True

        async def watch() -> None:
            try:
                while ctx.pending and not ctx.unloaded:
                    last = ctx.pending[-1].last_offset
                    error = await self.writer.wait_committed(ctx.partition, last)
                    if ctx.unloaded:
                        return
                    if error in (ErrorCode.none, ErrorCode.not_enough_replicas_after_append):
                        ctx.committed_through = max(ctx.committed_through, last)
                        self._replay_committed(ctx, last)
                    elif error == ErrorCode.not_leader_or_follower:
                        return  # leadership moved: the backend unloads the shard
                    else:
                        await asyncio.sleep(0.1)  # the writer gave up at once: do not spin
            finally:
                ctx.watching = False

        self._spawn(watch())

    def _process(self, ctx: _Context[S], result: CoordinatorResult) -> None:
        """A follow-up or a timer's result, applied at once; its records are written like any."""
        if ctx.unloaded:
            return
        self._submit(ctx, result, lambda error: None)

    def _replay_committed(self, ctx: _Context[S], upto: int) -> None:
        if ctx.pending and ctx.pending[0].last_offset <= upto:
            self._wake(ctx)
        while ctx.pending and ctx.pending[0].last_offset <= upto:
            entry = ctx.pending.popleft()
            if entry.marker is not None:
                ctx.shard.replay_marker(entry.marker.producer_id, entry.marker.commit, loading=False)
            first = entry.last_offset - len(entry.records) + 1  # one batch: consecutive offsets
            for i, (key, value) in enumerate(entry.records):
                ctx.shard.replay(key, value, loading=False, producer_id=entry.producer_id, offset=first + i)

    def _park(self, ctx: _Context[S], key: Hashable,
              error_response: Callable[[ErrorCode], Any]) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        old = ctx.parked.pop(key, None)
        if old is not None and not old[0].done():
            old[0].set_result(old[1](ErrorCode.unknown_member_id))
        ctx.parked[key] = (fut, error_response)
        return fut

    def _effects(self, ctx: _Context[S], effects: list[Any]) -> None:
        if self.on_effect is None:
            return
        for effect in effects:
            try:
                self.on_effect(ctx.partition, effect)
            except Exception:
                log.exception("%s: effect %r of partition %d failed", self.name, effect, ctx.partition)

    def _deliver(self, ctx: _Context[S], replies: list[tuple[Hashable, Any]]) -> None:
        for key, response in replies:
            entry = ctx.parked.pop(key, None)
            if entry is not None and not entry[0].done():
                entry[0].set_result(response)

    # ------------------------------------------------------------------ timers

    def _set_timers(self, ctx: _Context[S], timers: list[Schedule | Cancel]) -> None:
        if ctx.unloaded:
            return
        loop = asyncio.get_running_loop() if timers else None
        for timer in timers:
            old = ctx.timers.pop(timer.key, None)
            if old is not None:
                old.cancel()
            if isinstance(timer, Schedule):
                assert loop is not None
                ctx.timers[timer.key] = loop.call_later(max(timer.delay_ms, 0) / 1000, self._fire,
                                                        ctx, timer.key)

    def _fire(self, ctx: _Context[S], key: Hashable) -> None:
        ctx.timers.pop(key, None)
        if ctx.unloaded:
            return
        try:
            self._process(ctx, ctx.shard.on_timer(key, self.clock()))
        except Exception:
            log.exception("%s: timer %r of partition %d failed", self.name, key, ctx.partition)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: a write failed", self.name, exc_info=task.exception())

    def timer_keys(self, partition: int) -> set[Hashable]:
        """The timers set on a partition's shard (tests and introspection)."""
        ctx = self._contexts.get(partition)
        return set(ctx.timers) if ctx is not None else set()


def coordinator_broker(store: MetadataStore, topic: str, partition: int,
                       runtime: CoordinatorRuntime[Any]) -> BrokerInfo | None:
    """The broker FindCoordinator names for a coordinator partition: its leader. None
    (COORDINATOR_NOT_AVAILABLE, which clients ask again after a backoff) when it has no
    leader now, or when the leader is this broker and its shard has not loaded yet (the
    topic's logs being created, a leader change not yet applied, the broker shutting
    down): clients sent here then would be answered COORDINATOR_LOAD_IN_PROGRESS or
    NOT_COORDINATOR, which librdkafka retries for an OffsetCommit only a few times
    within a few hundred milliseconds (CI saw a commit fail so), while it asks
    FindCoordinator again until it has an answer. Kafka names the leader from its
    metadata cache, which it sets before applying the role, so it has this window; a
    broker other than the leader still has it here too (the leader then answers
    LOAD_IN_PROGRESS)."""
    meta = store.topic(topic)
    state = meta.partitions.get(partition) if meta is not None else None
    if state is None or state.leader < 0 or runtime.loading(partition):
        return None
    return next((b for b in store.brokers() if b.broker_id == state.leader), None)
