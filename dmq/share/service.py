"""ShareService: what ShareFetch (78) and ShareAcknowledge (79) do, without the wire types.

It puts the share sessions (``ShareSessionCache``) and the share-partitions
(``SharePartitionManager``) together in Kafka's order: the session decides (epoch
table, merged entries), the acknowledgements are applied and written, then the fetch
runs over the session's partitions; a final request (epoch -1) fetches nothing and
closes the session, releasing the records acquired in it; a full request (epoch 0) that
replaces a session releases the old one's records first. Records are acquired under the
session's ``session_id``, and every release names it: a session that goes (or a fetch
of it still waiting when it went) never releases what a newer session of the same
member holds. The answer lists what
Kafka's does: for a full fetch every requested partition, otherwise the partitions
with records, an error or acknowledgements — every partition that carried
acknowledgements is in it (librdkafka reports a missing one as INVALID_RECORD_STATE).

Called by the ShareFetch and ShareAcknowledge handlers and the server's connection-
close hook (``connection_closed``), on the event-loop thread.

Wiring (the broker's part): ``BrokerServices.share = ShareService(ShareSessionCache(
group.share.max.share.sessions), SharePartitionManager(replica_manager, persister,
topic_name, config=SharePartitionConfig(group.share.partition.max.record.locks,
group.share.delivery.count.limit, group.share.record.lock.duration.ms),
group_settings=<a group's configs over the broker's>))``; the Listener's
``on_close`` calls ``connection_closed``; leadership changes may call
``partitions.partition_changed(topic, index)`` (each operation checks leadership
anyway); appends and high-watermark moves need nothing (the fetch purgatory carries
them); shutdown calls ``close``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from dmq.share.manager import SharePartitionManager
from dmq.share.partition import AcquiredRange
from dmq.share.session import (
    PartitionEntry,
    SessionRequest,
    ShareSession,
    ShareSessionCache,
    TopicIdPartition,
)

log = logging.getLogger("dmq.share")


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """One partition of the answer. ``ack_error`` is None when it carried no
    acknowledgements (ShareFetch's AcknowledgeErrorCode is then NONE); ShareAcknowledge
    answers its ack error as the partition's ErrorCode."""
    error: ErrorCode = ErrorCode.none
    ack_error: ErrorCode | None = None
    records: bytes = b""
    acquired: tuple[AcquiredRange, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareOutcome:
    error: ErrorCode = ErrorCode.none
    partitions: dict[TopicIdPartition, PartitionOutcome] = field(default_factory=dict)


class ShareService:
    """The share sessions and share-partitions of this broker.

    Invariants: the records acquired in a session are released whenever the session
    goes (final request, replaced by an epoch-0 fetch, its connection closed), and those
    a fetch of it acquires after it went are released when that fetch ends; a release
    touches only records acquired in the session it is for (``session_id``), never
    those of another session of the same member. Tasks started by
    ``connection_closed`` are kept until done (``close`` cancels them)."""

    def __init__(self, sessions: ShareSessionCache, partitions: SharePartitionManager) -> None:
        self.sessions = sessions
        self.partitions = partitions
        self._tasks: set[asyncio.Task[None]] = set()

    def lock_duration_ms(self, group_id: str) -> int:
        return self.partitions.lock_duration_ms(group_id)

    async def share_fetch(self, group_id: str | None, member_id: str | None, epoch: int,
                          entries: Sequence[PartitionEntry], forgotten: Iterable[TopicIdPartition],
                          connection: int, *, max_wait_ms: int, max_bytes: int, max_records: int,
                          batch_size: int, waiting: Callable[[], None] | None = None,
                          readable: Callable[[TopicIdPartition], bool] | None = None) -> ShareOutcome:
        """``readable`` (None: all) says which of the session's partitions the requester may
        read now: the others are answered TOPIC_AUTHORIZATION_FAILED and neither fetched nor
        acquired, as Kafka authorises the session's partitions on every ShareFetch (an ACL
        taken away, or another principal fetching in this member's session)."""
        if not group_id or not member_id:
            return ShareOutcome(ErrorCode.invalid_request)
        req = self.sessions.share_fetch(group_id, member_id, epoch, entries, forgotten, connection)
        await self._release_replaced(req)
        if req.error is not ErrorCode.none:
            if req.error is ErrorCode.share_session_limit_reached and max_wait_ms > 0:
                if waiting is not None:
                    waiting()
                await asyncio.sleep(max_wait_ms / 1000.0)  # as Kafka: answered after MaxWaitMs
            return ShareOutcome(req.error)
        assert req.session is not None
        ack_errors = await self.partitions.acknowledge(group_id, member_id, req.acks) if req.acks else {}
        if req.final:
            await self._close(req.session)
            return ShareOutcome(partitions={tp: PartitionOutcome(ack_error=e) for tp, e in ack_errors.items()})
        refused = frozenset(tp for tp in req.fetch if not readable(tp)) if readable is not None else frozenset()
        order = [tp for tp in req.fetch if tp not in refused] if refused else list(req.fetch)
        if order:
            k = req.session.epoch % len(order)  # rotate, so that no partition always comes last
            order = order[k:] + order[:k]
        fetched = await self.partitions.fetch(group_id, member_id, order, max_wait_ms=max_wait_ms,
                                              max_bytes=max_bytes, max_records=max_records,
                                              batch_size=max(1, batch_size), waiting=waiting,
                                              session_id=req.session.session_id)
        if self.sessions.get(group_id, member_id) is not req.session:
            # The session went while the fetch waited (its connection closed, a new full
            # fetch replaced it): nobody will acknowledge what was just acquired in it.
            # Only that is released: a newer session of the member may hold records here.
            await self.partitions.release_member(group_id, member_id,
                                                 [tp for tp, f in fetched.items() if f.acquired],
                                                 session_id=req.session.session_id)
        out: dict[TopicIdPartition, PartitionOutcome] = {}
        for tp in req.fetch:
            if tp in refused:
                out[tp] = PartitionOutcome(ErrorCode.topic_authorization_failed, ack_errors.get(tp))
                continue
            f = fetched[tp]
            if req.full or f.acquired or f.error is not ErrorCode.none or tp in ack_errors:
                out[tp] = PartitionOutcome(f.error, ack_errors.get(tp), f.records, f.acquired)
        for tp, e in ack_errors.items():
            if tp not in out:
                out[tp] = PartitionOutcome(ack_error=e)
        return ShareOutcome(partitions=out)

    async def share_acknowledge(self, group_id: str | None, member_id: str | None, epoch: int,
                                entries: Sequence[PartitionEntry], connection: int) -> ShareOutcome:
        if not group_id or not member_id:
            return ShareOutcome(ErrorCode.invalid_request)
        req = self.sessions.share_acknowledge(group_id, member_id, epoch, entries, connection)
        if req.error is not ErrorCode.none:
            return ShareOutcome(req.error)
        assert req.session is not None
        ack_errors = await self.partitions.acknowledge(group_id, member_id, req.acks) if req.acks else {}
        if req.final:
            await self._close(req.session)
        return ShareOutcome(partitions={tp: PartitionOutcome(ack_error=e) for tp, e in ack_errors.items()})

    def connection_closed(self, connection: int) -> None:
        """The server's close hook: the connection's sessions go, their records are
        released in the background."""
        closed = self.sessions.connection_closed(connection)
        if not closed:
            return
        task = asyncio.get_running_loop().create_task(self._release_all(closed))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self.partitions.close()

    async def _release_all(self, sessions: list[ShareSession]) -> None:
        for s in sessions:
            try:
                await self.partitions.release_member(s.group_id, s.member_id, list(s.partitions),
                                                     session_id=s.session_id)
            except Exception:
                log.exception("releasing the records of share session %s failed", s.key)

    async def _release_replaced(self, req: SessionRequest) -> None:
        old = req.replaced
        if old is not None:
            await self.partitions.release_member(old.group_id, old.member_id, list(old.partitions),
                                                 session_id=old.session_id)

    async def _close(self, session: ShareSession) -> None:
        if self.sessions.close(session):
            await self.partitions.release_member(session.group_id, session.member_id,
                                                 list(session.partitions), session_id=session.session_id)
