"""Fetch sessions (KIP-227): the leader's FetchSessionCache and a fetcher's FetchSessionHandler.

A Fetch request (v7+) carries ``session_id`` and ``session_epoch``. A *full* request
(epoch 0, INITIAL) lists every partition; the leader answers every partition and,
when its cache has room, opens a session holding them and returns its id. The
fetcher's next requests are *incremental* (that id, epoch 1, 2, …): they list only
partitions that are new or whose fetch offset, partition max bytes or leader epoch
changed, and ``forgotten_topics_data`` names the ones it no longer fetches. The
leader reads every partition of the session (a follower's fetch also records, for
every one, how far the follower is) but answers only those with records, an error,
or a high watermark or log start offset other than it last told this fetcher.
Answered partitions go to the end of the session's order, so one busy partition
cannot keep the others out of a response's ``max_bytes``.

Epochs (Kafka's ``FetchManager.newContext``)::

    id 0,  epoch -1     sessionless: every partition listed and answered (librdkafka)
    id X,  epoch -1     closes session X, then as sessionless
    id *,  epoch 0      closes session id (if any), full; a new session if there is room
    id X,  epoch N > 0  no session X -> FETCH_SESSION_ID_NOT_FOUND; N is not its epoch ->
                        INVALID_FETCH_SESSION_EPOCH; else the request's partitions are
                        merged in, forgotten ones dropped, the epoch becomes next(N)

Both errors are top-level, with no partitions; the fetcher starts over with a full
request. ``next(N)`` is N+1, INT32_MAX wrapping to 1. A session emptied by its
forgotten partitions is closed and the request answered sessionless.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions. When full, a
new session may evict (Kafka's ``tryEvict``): the least recently used one if unused
for ``EVICTION_MS``; otherwise the least valuable by (privileged, size, id) among
those the newcomer may evict: followers' sessions are privileged and evict consumers'
at once; a session created less than ``EVICTION_MS`` ago is safe from all but that.

Sans-io: the Fetch handler (event-loop thread) calls ``new_context`` before reading
and ``respond`` after; the time comes in as an argument. The fetcher side,
``FetchSessionHandler``, is one per leader connection (``dmq.replication.fetcher``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from dmq.replication.partition import ReadResult
from dmq.replication.replica_manager import FetchRequestPartition, TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1
EVICTION_MS = 120_000  # Kafka's min.incremental.fetch.session.eviction.ms
DEFAULT_SLOTS = 1000  # max.incremental.fetch.session.cache.slots


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's FetchMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= INT32_MAX else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the fetcher's last request for it (kept and passed to
    the read as is) and what the leader last answered."""

    request: FetchRequestPartition
    high_watermark: int = -1
    log_start_offset: int = -1

    def must_respond(self, result: ReadResult) -> bool:
        """Whether ``result`` goes into an incremental answer; remembers what it tells."""
        respond = result.data is not None and result.data.length > 0
        if result.error != ErrorCode.none:
            self.high_watermark = -1  # sent again once the error is gone
            return True
        if result.high_watermark != self.high_watermark:
            self.high_watermark = result.high_watermark
            respond = True
        if result.log_start_offset != self.log_start_offset:
            self.log_start_offset = result.log_start_offset
            respond = True
        return respond


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's
    partitions: dict[TopicPartition, CachedPartition]
    created_ms: int
    last_used_ms: int
    epoch: int  # what the next request must carry


@dataclass(slots=True)
class FetchContext:
    """What one Fetch request reads, and how it is answered.

    ``partitions`` are the partitions to read: the request's own, or for an incremental
    request every partition of the session. ``error`` not none: answer it at top level,
    read nothing."""

    partitions: list[FetchRequestPartition]
    error: ErrorCode = ErrorCode.none
    session: FetchSession | None = None  # incremental
    expected_epoch: int = 0  # the session's epoch once this request is answered
    create: bool = False  # full request that may open a session
    privileged: bool = False


@dataclass(slots=True)
class FetchAnswer:
    error: ErrorCode
    session_id: int
    partitions: list[tuple[FetchRequestPartition, ReadResult]]


class FetchSessionCache:
    """Invariants: ``sessions`` keys are the sessions' ids, all > 0 and unique; no session
    is empty; at most ``max_sessions`` sessions. Event-loop thread only."""

    def __init__(self, max_sessions: int = DEFAULT_SLOTS, eviction_ms: int = EVICTION_MS,
                 rng: random.Random | None = None) -> None:
        self.max_sessions = max_sessions
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self._rng = rng or random.Random()

    @property
    def partitions_cached(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    # ------------------------------------------------------------------ request

    def new_context(self, session_id: int, epoch: int, requested: list[FetchRequestPartition],
                    forgotten: list[TopicPartition], privileged: bool, now_ms: int) -> FetchContext:
        """The context of a request (before reading): Kafka's ``FetchManager.newContext``."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.sessions.pop(session_id, None)
            return FetchContext(requested, create=epoch == INITIAL_EPOCH, privileged=privileged)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext([], ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return FetchContext([], ErrorCode.invalid_fetch_session_epoch)
        cached = session.partitions
        for req in requested:
            key = (req.topic, req.partition)
            entry = cached.get(key)
            if entry is None:
                cached[key] = CachedPartition(req)
            else:
                if entry.request.current_leader_epoch != req.current_leader_epoch:
                    entry.high_watermark = entry.log_start_offset = -1  # a new epoch: tell all again
                entry.request = req
        for key in forgotten:
            cached.pop(key, None)
        if not cached:
            del self.sessions[session.id]
            return FetchContext(requested)
        session.last_used_ms = now_ms
        session.epoch = next_epoch(epoch)
        return FetchContext([c.request for c in cached.values()], session=session,
                            expected_epoch=session.epoch)

    # ----------------------------------------------------------------- response

    def respond(self, context: FetchContext, results: list[ReadResult], now_ms: int) -> FetchAnswer:
        """The answer to a request whose ``context.partitions`` read ``results``."""
        if context.error != ErrorCode.none:
            return FetchAnswer(context.error, INVALID_SESSION_ID, [])
        session = context.session
        if session is None:
            pairs = list(zip(context.partitions, results, strict=True))
            session_id = self._create(pairs, context.privileged, now_ms) if context.create else 0
            return FetchAnswer(ErrorCode.none, session_id, pairs)
        if session.epoch != context.expected_epoch:
            # Another request of this session came in while this one waited.
            return FetchAnswer(ErrorCode.invalid_fetch_session_epoch, session.id, [])
        cached = session.partitions
        answered = []
        for req, res in zip(context.partitions, results, strict=True):
            key = (req.topic, req.partition)
            entry = cached.get(key)
            if entry is not None and entry.must_respond(res):
                answered.append((req, res))
                cached[key] = cached.pop(key)  # to the end of the order
        return FetchAnswer(ErrorCode.none, session.id, answered)

    def _create(self, pairs: list[tuple[FetchRequestPartition, ReadResult]], privileged: bool,
                now_ms: int) -> int:
        if not pairs or self.max_sessions <= 0:
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.max_sessions and not self._evict_for(privileged, len(pairs), now_ms):
            return INVALID_SESSION_ID
        session_id = self._rng.randint(1, INT32_MAX)
        while session_id in self.sessions:
            session_id = self._rng.randint(1, INT32_MAX)
        partitions: dict[TopicPartition, CachedPartition] = {}
        for req, res in pairs:
            partitions[(req.topic, req.partition)] = CachedPartition(
                req, res.high_watermark if res.error == ErrorCode.none else -1, res.log_start_offset)
        self.sessions[session_id] = FetchSession(session_id, privileged, partitions, now_ms, now_ms,
                                                 next_epoch(INITIAL_EPOCH))
        return session_id

    def _evict_for(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Kafka's ``tryEvict``: make room for a new session of ``size`` partitions."""
        if not self.sessions:
            return False
        stalest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stalest.last_used_ms > self.eviction_ms:
            self._evict(stalest)
            return True
        old = [s for s in self.sessions.values() if now_ms - s.created_ms > self.eviction_ms]
        if privileged:
            old += [s for s in self.sessions.values()
                    if not s.privileged and now_ms - s.created_ms <= self.eviction_ms]
        if not old:
            return False
        victim = min(old, key=lambda s: (s.privileged, len(s.partitions), s.id))
        if (privileged, size, 0) < (victim.privileged, len(victim.partitions), victim.id):
            return False
        self._evict(victim)
        return True

    def _evict(self, session: FetchSession) -> None:
        del self.sessions[session.id]
        self.evictions += 1


# The fetcher's view of one partition it asks for: (current leader epoch, fetch offset,
# its own log start offset, partition max bytes).
PartitionRequest = tuple[int, int, int, int]


@dataclass(slots=True)
class FetchSessionHandler:
    """The fetcher's side of a session with one leader (the Java client's
    FetchSessionHandler). ``build`` says what the next request carries; ``handle_response``
    moves the epoch on or, after any error, starts over with a full request. A request
    whose answer never comes (a broken connection, a timeout) or whose answer was not
    wholly taken must be followed by ``reset``. A full request after a session carries
    that session's id with epoch 0, which closes it on the leader (Java's
    ``nextCloseExistingAttemptNew``) rather than leave it to eviction. One request at a
    time."""

    session_id: int = INVALID_SESSION_ID  # the open session, or the one the next full request closes
    epoch: int = INITIAL_EPOCH  # INITIAL: the next request is a full one
    sent: dict[TopicPartition, PartitionRequest] = field(default_factory=dict)

    def build(self, wanted: dict[TopicPartition, PartitionRequest]
              ) -> tuple[int, int, dict[TopicPartition, PartitionRequest], list[TopicPartition]]:
        """(session id, epoch, partitions to list, partitions to forget) for a request that
        fetches exactly ``wanted``."""
        previous, self.sent = self.sent, dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            return self.session_id, INITIAL_EPOCH, wanted, []
        changed = {tp: v for tp, v in wanted.items() if previous.get(tp) != v}
        forgotten = [tp for tp in previous if tp not in wanted]
        return self.session_id, self.epoch, changed, forgotten

    def handle_response(self, error: ErrorCode, session_id: int) -> bool:
        """Take the answer's top-level error and session id; False: the answer carries no
        partitions and the next request is a full one."""
        if error != ErrorCode.none:
            self.reset()
            return False
        if self.epoch == INITIAL_EPOCH:
            self.session_id = session_id
            # No session (the leader keeps none, or had no room): full requests go on.
            self.epoch = INITIAL_EPOCH if session_id == INVALID_SESSION_ID else next_epoch(INITIAL_EPOCH)
        elif session_id == INVALID_SESSION_ID:
            # The leader closed the session (all its partitions forgotten) and answered the
            # listed partitions sessionless: the next request is a full one.
            self.session_id = INVALID_SESSION_ID
            self.reset()
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def reset(self) -> None:
        self.epoch = INITIAL_EPOCH
        self.sent = {}
