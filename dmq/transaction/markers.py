"""TransactionMarkerSender: the markers of prepared transactions, written to every partition.

Kafka's TransactionMarkerChannelManager. When a PrepareCommit/PrepareAbort is
committed (or found on load, or still prepared at the periodic sweep), the
coordinator asks for its markers; the sender writes a COMMIT or ABORT marker
to the leader of every partition of the transaction (WriteTxnMarkers, or a
direct append where this broker leads), retrying until each is written or its
partition no longer exists, then has the coordinator complete the
transaction. The same transaction asked for twice is sent once. Event-loop
thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from dmq.transaction.shard import SendMarkers

log = logging.getLogger("dmq.transaction")

# Per-partition answers that say: try again (Kafka's retriable marker errors).
RETRIABLE = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower, ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out, ErrorCode.kafka_storage_error,
    ErrorCode.leader_not_available, ErrorCode.broker_not_available, ErrorCode.network_exception,
    ErrorCode.coordinator_load_in_progress, ErrorCode.fenced_leader_epoch,
})
MAX_RETRY_BACKOFF_S = 5.0  # retrying an unexpected error
# The marker is stale: a newer coordinator or producer epoch has taken over.
FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced,
                    ErrorCode.transaction_coordinator_fenced})


class MarkerWriter(Protocol):
    def leader_of(self, topic: str, partition: int) -> int | None:
        """The partition's leader (-1: none now); None when the partition does not exist."""
        ...

    async def write(self, broker_id: int, markers: SendMarkers,
                    partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """Write the marker to ``partitions`` led by ``broker_id``; an error per partition."""
        ...


class TransactionMarkerSender:
    def __init__(self, writer: MarkerWriter, complete: Callable[[SendMarkers], Awaitable[ErrorCode]],
                 retry_backoff_ms: int = 100) -> None:
        self.writer = writer
        self.complete = complete
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._sending: dict[tuple[Any, ...], asyncio.Task[None]] = {}
        self._closed = False

    def send(self, markers: SendMarkers) -> None:
        # The transaction, not only its producer: a later one of the same producer id and epoch
        # (asked for while this one's completion is being retried) gets its own sending.
        key = (markers.transactional_id, markers.producer_id, markers.producer_epoch, markers.commit,
               markers.coordinator_epoch, markers.prepared_ms, markers.partitions)
        if self._closed or key in self._sending:
            return
        task = asyncio.get_running_loop().create_task(self._run(markers))
        self._sending[key] = task
        task.add_done_callback(lambda t: self._done(key, t))

    def _done(self, key: tuple[Any, ...], task: asyncio.Task[None]) -> None:
        self._sending.pop(key, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("writing the markers of %s failed", key[0], exc_info=task.exception())

    def in_flight(self) -> int:
        return len(self._sending)

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._sending.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, markers: SendMarkers) -> None:
        remaining = set(markers.partitions)
        reported: set[tuple[tuple[str, int], ErrorCode]] = set()
        backoff = self.retry_backoff_s
        while remaining:
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in sorted(remaining):
                leader = self.writer.leader_of(*tp)
                if leader is None:
                    log.info("dropping the marker of %s for %s-%d: the partition is gone",
                             markers.transactional_id, *tp)
                    remaining.discard(tp)
                elif leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            results = await asyncio.gather(*(self._write(b, markers, tps) for b, tps in by_leader.items()))
            unexpected = False
            for answers in results:
                for tp, error in answers.items():
                    if error == ErrorCode.none:
                        remaining.discard(tp)
                    elif error in FENCED:
                        log.info("markers of %s (producer %d, epoch %d) are fenced: %s",
                                 markers.transactional_id, markers.producer_id, markers.producer_epoch,
                                 error.name)
                        return  # a newer coordinator or epoch finishes this transaction
                    elif error not in RETRIABLE:
                        # Never given up: completing without this marker would leave its
                        # records (or offsets) undecided. (Kafka leaves the transaction
                        # prepared on such an error, without retrying.)
                        unexpected = True
                        if (tp, error) not in reported:
                            reported.add((tp, error))
                            log.error("cannot write the marker of %s to %s-%d: %s; retrying",
                                      markers.transactional_id, tp[0], tp[1], error.name)
            if remaining:
                # Backing off further only while a partition answers an unexpected error.
                backoff = min(backoff * 2, MAX_RETRY_BACKOFF_S) if unexpected else self.retry_backoff_s
                await asyncio.sleep(backoff)
        for _ in range(50):
            error = await self.complete(markers)
            if error in (ErrorCode.none, ErrorCode.not_coordinator):
                return  # done, or the next coordinator finds it prepared and finishes it
            await asyncio.sleep(self.retry_backoff_s)

    async def _write(self, broker_id: int, markers: SendMarkers, partitions: list[tuple[str, int]]
                     ) -> dict[tuple[str, int], ErrorCode]:
        try:
            return await self.writer.write(broker_id, markers, partitions)
        except (TimeoutError, OSError, ConnectionError, EOFError) as e:
            log.info("writing markers to broker %d failed (%s); retrying", broker_id, e)
            return {tp: ErrorCode.network_exception for tp in partitions}
        except Exception:  # a bug must not end the sending: the transaction would hang
            log.exception("writing markers to broker %d failed unexpectedly; retrying", broker_id)
            return {tp: ErrorCode.network_exception for tp in partitions}
