"""ShareSessionCache: the share sessions of a broker (KIP-932 "Share sessions"), pure.

A share session is keyed by ``(group_id, member_id)`` and holds the partitions
(``(topic_id, partition)``) its member fetches from this broker, the epoch its next
request must carry, and the connection it was last used on. Kafka's epoch table
(``SharePartitionManager.newContext`` / ``acknowledgeSessionUpdate``)::

    ShareFetch 0        full request: acks -> INVALID_REQUEST; any session of the key is
                        replaced (the old one is returned for its records to be released);
                        a new one with the listed partitions, epoch 1; the cache full ->
                        SHARE_SESSION_LIMIT_REACHED
    ShareFetch N>0      no session -> SHARE_SESSION_NOT_FOUND; N != its epoch ->
                        INVALID_SHARE_SESSION_EPOCH; else add Topics, drop
                        ForgottenTopicsData, epoch -> next(N), fetch all its partitions
    ShareFetch -1       no session -> SHARE_SESSION_NOT_FOUND; partitions not in the
                        session or forgotten ones -> INVALID_REQUEST; acks, nothing
                        fetched, then the session closes
    ShareAcknowledge 0  INVALID_SHARE_SESSION_EPOCH
    ShareAcknowledge N  as ShareFetch N (no partitions added), epoch -> next(N)
    ShareAcknowledge -1 the session must exist (no epoch check); acks, then it closes

``next(N)`` is N+1, INT32_MAX wrapping to 1. Requests carry the same partition several
times (librdkafka sends one entry to add it and another with its acks): entries are
merged by ``(topic_id, partition)``, their acknowledgement batches concatenated in
offset order.

Nothing here awaits or reads a clock: the share-partition manager's caller (the
ShareFetch/ShareAcknowledge handlers, event-loop thread) calls ``share_fetch`` /
``share_acknowledge`` first, processes the acks and fetch the answer says, then
``close`` for a final request; the server's connection-close hook calls
``connection_closed`` and releases the records of the sessions it returns.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from dmq.share.partition import AckBatch

INT32_MAX = 2**31 - 1
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
DEFAULT_MAX_SESSIONS = 2000  # group.share.max.share.sessions

TopicIdPartition = tuple[uuid.UUID, int]
SessionKey = tuple[str, str]

_session_ids = itertools.count(1)


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's ShareRequestMetadata.nextEpoch): INT32_MAX -> 1,
    the final epoch stays final."""
    if epoch == FINAL_EPOCH:
        return FINAL_EPOCH
    return 1 if epoch >= INT32_MAX else epoch + 1


@dataclass(frozen=True, slots=True)
class PartitionEntry:
    """One request entry: a partition and its acknowledgement batches (maybe none)."""
    topic_id: uuid.UUID
    partition: int
    acks: tuple[AckBatch, ...] = ()


def merge_entries(entries: Iterable[PartitionEntry]) -> dict[TopicIdPartition, tuple[AckBatch, ...]]:
    """Entries merged by partition, in first-seen order, acks sorted by first offset
    (overlaps, if the client sent any, are left for the acknowledgement checks)."""
    merged: dict[TopicIdPartition, list[AckBatch]] = {}
    for e in entries:
        merged.setdefault((e.topic_id, e.partition), []).extend(e.acks)
    return {tp: tuple(sorted(acks, key=lambda b: b.first)) for tp, acks in merged.items()}


@dataclass(slots=True)
class ShareSession:
    """One member's session on this broker. ``epoch``: what its next request must carry
    (>= 1). ``partitions``: insertion-ordered, no duplicates. ``session_id``: unique in
    this process, never reused: records are acquired under it, so that releasing a
    session's records leaves those of a newer session of the same key alone."""
    group_id: str
    member_id: str
    epoch: int
    partitions: dict[TopicIdPartition, None] = field(default_factory=dict)
    connection: Hashable | None = None
    session_id: int = field(default_factory=lambda: next(_session_ids))

    @property
    def key(self) -> SessionKey:
        return (self.group_id, self.member_id)


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """What the cache decided for one ShareFetch or ShareAcknowledge.

    ``error``: the request's top-level error (nothing else applies then, except
    ``replaced``). ``acks``: merged per partition, only partitions that carried some.
    ``fetch``: the partitions to fetch from (empty for ShareAcknowledge and final
    requests). ``full``: an epoch-0 fetch, whose answer lists every requested partition.
    ``final``: epoch -1; the caller processes the acks, then calls ``close``.
    ``replaced``: a session an epoch-0 fetch dropped, whose records (those acquired in
    it, not the new session's) the caller releases (dmq releases them at once, as
    librdkafka's mock does; Kafka lets the locks time out)."""
    error: ErrorCode = ErrorCode.none
    session: ShareSession | None = None
    acks: dict[TopicIdPartition, tuple[AckBatch, ...]] = field(default_factory=dict)
    fetch: tuple[TopicIdPartition, ...] = ()
    full: bool = False
    final: bool = False
    replaced: ShareSession | None = None


class ShareSessionCache:
    """The broker's share sessions, at most ``max_sessions``.

    Invariants: a key has at most one session; ``_by_connection[c]`` holds exactly the
    keys of the sessions whose ``connection`` is ``c``; every session's epoch is in
    ``1..INT32_MAX``. Event-loop thread only (the handlers and the connection-close hook).
    """

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions {max_sessions}")
        self.max_sessions = max_sessions
        self._sessions: dict[SessionKey, ShareSession] = {}
        self._by_connection: dict[Hashable, set[SessionKey]] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def sessions(self) -> list[ShareSession]:
        return list(self._sessions.values())

    # ------------------------------------------------------------------ requests

    def share_fetch(self, group_id: str, member_id: str, epoch: int, entries: Sequence[PartitionEntry],
                    forgotten: Iterable[TopicIdPartition], connection: Hashable | None) -> SessionRequest:
        merged = merge_entries(entries)
        acks = {tp: a for tp, a in merged.items() if a}
        forgotten = list(forgotten)
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if acks:
                return SessionRequest(ErrorCode.invalid_request)
            old = self._sessions.get(key)
            if old is None and len(self._sessions) >= self.max_sessions:
                return SessionRequest(ErrorCode.share_session_limit_reached)
            if old is not None:
                self._remove(old)
            new = ShareSession(group_id, member_id, 1, dict.fromkeys(merged), connection)
            self._add(new)
            return SessionRequest(session=new, fetch=tuple(new.partitions), full=True, replaced=old)
        session = self._sessions.get(key)
        if session is None:
            return SessionRequest(ErrorCode.share_session_not_found)
        if epoch == FINAL_EPOCH:
            if forgotten or any(tp not in session.partitions for tp in merged):
                return SessionRequest(ErrorCode.invalid_request, session)
            return SessionRequest(session=session, acks=acks, final=True)
        if epoch != session.epoch:
            return SessionRequest(ErrorCode.invalid_share_session_epoch, session)
        for tp in merged:
            session.partitions.setdefault(tp, None)
        for tp in forgotten:
            session.partitions.pop(tp, None)
        self._advance(session, connection)
        return SessionRequest(session=session, acks=acks, fetch=tuple(session.partitions))

    def share_acknowledge(self, group_id: str, member_id: str, epoch: int, entries: Sequence[PartitionEntry],
                          connection: Hashable | None) -> SessionRequest:
        acks = {tp: a for tp, a in merge_entries(entries).items() if a}
        if epoch == INITIAL_EPOCH:
            return SessionRequest(ErrorCode.invalid_share_session_epoch)
        session = self._sessions.get((group_id, member_id))
        if session is None:
            return SessionRequest(ErrorCode.share_session_not_found)
        if epoch == FINAL_EPOCH:
            return SessionRequest(session=session, acks=acks, final=True)
        if epoch != session.epoch:
            return SessionRequest(ErrorCode.invalid_share_session_epoch, session)
        self._advance(session, connection)
        return SessionRequest(session=session, acks=acks)

    def close(self, session: ShareSession) -> bool:
        """Remove a session (after a final request's acks); False if it was already gone
        or replaced."""
        if self._sessions.get(session.key) is not session:
            return False
        self._remove(session)
        return True

    def connection_closed(self, connection: Hashable) -> list[ShareSession]:
        """The client's connection closed: its sessions are removed and returned, for the
        caller to release their members' records."""
        keys = self._by_connection.pop(connection, set())
        closed = [self._sessions.pop(k) for k in keys if k in self._sessions]
        return closed

    # ------------------------------------------------------------------ internals

    def _advance(self, session: ShareSession, connection: Hashable | None) -> None:
        session.epoch = next_epoch(session.epoch)
        if connection is not None and connection != session.connection:
            self._unindex(session)
            session.connection = connection
            self._by_connection.setdefault(connection, set()).add(session.key)

    def _add(self, session: ShareSession) -> None:
        self._sessions[session.key] = session
        if session.connection is not None:
            self._by_connection.setdefault(session.connection, set()).add(session.key)

    def _remove(self, session: ShareSession) -> None:
        self._sessions.pop(session.key, None)
        self._unindex(session)

    def _unindex(self, session: ShareSession) -> None:
        if session.connection is None:
            return
        keys = self._by_connection.get(session.connection)
        if keys is not None:
            keys.discard(session.key)
            if not keys:
                del self._by_connection[session.connection]
