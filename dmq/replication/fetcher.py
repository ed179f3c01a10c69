"""Follower fetching: ReplicaFetcherManager and one ReplicaFetcher per leader broker.

A ReplicaFetcher owns one connection to a leader and loops: first, for every
partition that just became a follower (or saw a new leader epoch), it asks the
leader with OffsetForLeaderEpoch where its last local epoch ends and
truncates there (KIP-101), so a returning replica never keeps records the new
leader does not have; then it sends Fetch with ``replica_id`` set to this
broker, from each partition's log end offset, appends what comes back as
follower (offsets and epochs kept) and takes the leader's high watermark.
Its next fetch offset is what tells the leader it has the records. Fetches go
through a fetch session (KIP-227, ``FetchSessionHandler``): after the first, full
one, a fetch lists only the partitions whose offset (or epoch, or size limit)
changed and forgets those no longer fetched, and the leader answers only the
partitions with records or a new high watermark, log start offset or error. A
session error, a broken connection or a timeout starts a new session.

Errors back off per partition: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH and
UNKNOWN_TOPIC_OR_PARTITION wait for the metadata to change; a broken
connection waits ``replica.fetch.backoff.ms`` and reconnects. A failed write to
a partition's own log (ENOSPC, EIO: an OSError appending to or truncating it)
backs off that partition alone, as Kafka's KafkaStorageException does
(``markPartitionFailed``): the connection and the other partitions of the
answer go on. Partitions being reassigned onto this broker are throttled to
``follower.replication.throttled.rate``.
Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.client.security import ClientSecurity
from dmq.client.wire import AsyncWireClient
from dmq.config import LONG_MAX, BrokerConfig
from dmq.protocol.codec import make, request_class, request_module
from dmq.protocol.fast import encode_follower_fetch
from dmq.record.batch import InvalidRecordError
from dmq.replication.fetch_session import FetchSessionHandler, PartitionRequest
from dmq.replication.partition import Partition
from dmq.replication.replica_manager import ReplicaManager, TopicPartition

log = logging.getLogger("dmq.fetcher")

FETCH_VERSION = 12  # what encode_follower_fetch writes
EPOCH_VERSION = 4
# A leader that acknowledges nothing for this long is unreachable: its connection is ended
# (see dmq.client.wire.detect_dead_peer) and the fetcher reconnects, rather than waiting out
# replica.socket.timeout.ms and, once the network heals, TCP's retransmission backoff.
DEAD_LEADER_MS = 4000


@dataclass(slots=True)
class FetchState:
    leader_epoch: int
    needs_truncation: bool = True
    retry_at: float = 0.0
    throttled: bool = False
    storage_failed: bool = False  # the last write to the local log failed (logged once)


@dataclass(slots=True)
class ReplicaFetcher:
    leader_id: int
    partitions: dict[TopicPartition, FetchState] = field(default_factory=dict)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    client: AsyncWireClient | None = None
    failing: bool = False
    session: FetchSessionHandler = field(default_factory=FetchSessionHandler)


class ReplicaFetcherManager:
    def __init__(self, broker_id: int, replica_manager: ReplicaManager, config: BrokerConfig,
                 broker_address: Callable[[int], tuple[str, int] | None],
                 security: ClientSecurity | None = None) -> None:
        self.broker_id = broker_id
        self.security = security  # the inter-broker listener's TLS/SASL (dmq.client.security)
        self.replica_manager = replica_manager
        self.broker_address = broker_address
        self.max_wait = int(config["replica.fetch.wait.max.ms"])
        self.min_bytes = int(config["replica.fetch.min.bytes"])
        self.max_bytes = int(config["replica.fetch.max.bytes"])
        self.response_max_bytes = int(config["replica.fetch.response.max.bytes"])
        self.backoff = int(config["replica.fetch.backoff.ms"]) / 1000
        self.socket_timeout = int(config["replica.socket.timeout.ms"]) / 1000
        self.config = config  # follower.replication.throttled.rate is dynamic: read it live
        self.fetchers: dict[int, ReplicaFetcher] = {}
        # Token bucket for throttled replicas: up to one second of rate, may go into debt.
        self._throttle_tokens = 0.0
        self._throttle_at = time.monotonic()
        self._stopped = False
        self._fetch_class = request_class(1, FETCH_VERSION)

    # ----------------------------------------------------------- assignment

    def add_partition(self, tp: TopicPartition, leader_id: int, leader_epoch: int,
                      throttled: bool = False) -> None:
        """Follow ``tp`` from ``leader_id``: truncate first, then fetch."""
        for fetcher in self.fetchers.values():
            if fetcher.leader_id != leader_id:
                fetcher.partitions.pop(tp, None)
        existing = self.fetchers.get(leader_id)
        if existing is None:
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(leader_id)
            fetcher.task = asyncio.ensure_future(self._run(fetcher))
        else:
            fetcher = existing
        state = fetcher.partitions.get(tp)
        if state is None or state.leader_epoch != leader_epoch:
            fetcher.partitions[tp] = FetchState(leader_epoch, throttled=throttled)
        else:
            state.throttled = throttled
            state.retry_at = 0.0
        fetcher.wakeup.set()

    def remove_partition(self, tp: TopicPartition) -> None:
        for fetcher in self.fetchers.values():
            fetcher.partitions.pop(tp, None)

    async def shutdown(self) -> None:
        self._stopped = True
        tasks = [f.task for f in self.fetchers.values() if f.task is not None]
        for fetcher in self.fetchers.values():
            if fetcher.task is not None:
                fetcher.task.cancel()
            if fetcher.client is not None:
                fetcher.client.close()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ----------------------------------------------------------------- loop

    async def _run(self, fetcher: ReplicaFetcher) -> None:
        while not self._stopped:
            now = time.monotonic()
            ready = {tp: s for tp, s in fetcher.partitions.items() if s.retry_at <= now}
            if not ready:
                fetcher.wakeup.clear()
                waits = [s.retry_at - now for s in fetcher.partitions.values()]
                try:
                    await asyncio.wait_for(fetcher.wakeup.wait(), min(waits, default=1.0))
                except TimeoutError:
                    pass
                continue
            address = self.broker_address(fetcher.leader_id)
            if address is None:
                await asyncio.sleep(self.backoff)
                continue
            try:
                if fetcher.client is None or (fetcher.client.host, fetcher.client.port) != address:
                    if fetcher.client is not None:
                        fetcher.client.close()
                    fetcher.session.reset()  # a new connection starts a new fetch session
                    fetcher.client = AsyncWireClient(address[0], address[1],
                                                     f"dmq-replica-{self.broker_id}",
                                                     dead_peer_ms=DEAD_LEADER_MS,
                                                     security=self.security)
                truncating = {tp: s for tp, s in ready.items() if s.needs_truncation}
                if truncating:
                    await self._truncate(fetcher, truncating)
                fetching = {tp: s for tp, s in ready.items() if not s.needs_truncation
                            and tp in fetcher.partitions}
                if fetching:
                    await self._fetch(fetcher, fetching)
                if fetcher.failing:
                    log.info("fetching from broker %d works again", fetcher.leader_id)
                    fetcher.failing = False
            except asyncio.CancelledError:
                raise
            except (OSError, EOFError, TimeoutError, ValueError, asyncio.IncompleteReadError) as e:
                if self._stopped:
                    return
                # One warning per outage; the retries that follow are debug noise.
                log.log(logging.DEBUG if fetcher.failing else logging.WARNING,
                        "fetching from broker %d at %s:%d failed: %s; retrying every %.1fs",
                        fetcher.leader_id, address[0], address[1], e or type(e).__name__,
                        self.backoff)
                fetcher.failing = True
                if fetcher.client is not None:
                    fetcher.client.close()
                    fetcher.client = None
                await asyncio.sleep(self.backoff)
            except Exception:
                if self._stopped:
                    return  # shutting down: the client was closed under the request
                log.exception("replica fetcher for broker %d failed; retrying", fetcher.leader_id)
                if fetcher.client is not None:
                    fetcher.client.close()
                    fetcher.client = None
                await asyncio.sleep(self.backoff)

    def _current(self, fetcher: ReplicaFetcher, tp: TopicPartition, state: FetchState) -> Partition | None:
        """The local partition if it still follows this leader in this epoch."""
        if fetcher.partitions.get(tp) is not state:
            return None
        p = self.replica_manager.get_partition(*tp)
        if p is None or p.is_leader or p.leader_id != fetcher.leader_id or p.leader_epoch != state.leader_epoch:
            return None
        return p

    def _answered(self, fetcher: ReplicaFetcher, states: dict[TopicPartition, FetchState],
                  tp: TopicPartition) -> tuple[FetchState, Partition] | None:
        """The state and partition an answer for ``tp`` applies to, if it still follows as asked."""
        state = states.get(tp)
        if state is None:
            return None
        p = self._current(fetcher, tp, state)
        return None if p is None else (state, p)

    async def _truncate(self, fetcher: ReplicaFetcher, states: dict[TopicPartition, FetchState]) -> None:
        R = request_class(23, EPOCH_VERSION)
        mod = request_module(23, EPOCH_VERSION)
        by_topic: dict[str, list[Any]] = {}
        asked: dict[TopicPartition, int] = {}
        for tp, state in states.items():
            p = self._current(fetcher, tp, state)
            if p is None:
                continue
            epoch = p.log.leader_epochs.latest_epoch
            asked[tp] = epoch
            by_topic.setdefault(tp[0], []).append(make(
                mod.OffsetForLeaderPartition, partition=tp[1], current_leader_epoch=state.leader_epoch,
                leader_epoch=epoch))
        if not by_topic:
            return
        request = make(R, replica_id=self.broker_id, topics=tuple(
            make(mod.OffsetForLeaderTopic, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()))
        assert fetcher.client is not None
        response = await fetcher.client.request(request, self.socket_timeout)
        for t in response.topics:
            for r in t.partitions:
                tp = (t.topic, r.partition)
                found = self._answered(fetcher, states, tp)
                if found is None:
                    continue
                state, p = found
                if r.error_code != ErrorCode.none:
                    self._back_off(tp, state, r.error_code)
                    continue
                leo = p.log.log_end_offset
                done = True
                if r.leader_epoch < 0 or asked[tp] < 0:
                    target = min(p.high_watermark, leo)  # no epoch information: keep what is committed
                elif r.leader_epoch == asked[tp]:
                    target = min(r.end_offset, leo)
                else:
                    local_epoch, local_end = p.log.leader_epochs.end_offset_for(r.leader_epoch, leo)
                    if local_epoch < 0:
                        # No epoch here at all (an older log): keep nothing past the leader's end.
                        target = min(r.end_offset, leo)
                    elif local_epoch == r.leader_epoch:
                        # (Also when every epoch here is newer than the leader's answer: the
                        # first entry's start is the end, as Kafka's endOffsetFor, so nothing
                        # from the first one on stays: none of them is the leader's.)
                        target = min(r.end_offset, local_end, leo)
                    else:
                        # KIP-279: this log lacks the leader's epoch. Cut to the end of the
                        # largest epoch it has below that one and ask again with it: records
                        # of an epoch the leader never had must not survive under its offsets.
                        target = min(local_end, leo)
                        done = False
                if target < leo:
                    log.info("%s-%d: truncating from %d to %d (leader %d epoch %d ends at %d)",
                             tp[0], tp[1], leo, target, fetcher.leader_id, r.leader_epoch, r.end_offset)
                try:
                    if target < p.log.log_start_offset:
                        # The logs part below this one's start: nothing of it can stay (and its
                        # epoch entries below the start would never be cut). As Kafka's truncateTo.
                        p.truncate_fully_and_start_at(target)
                        done = True
                    else:
                        # Also when nothing is cut: an epoch entry at the log end (a leadership here
                        # that wrote nothing) must go before the leader's records come (Kafka's truncateTo).
                        p.truncate_to(target)
                except OSError as e:
                    self._local_write_failed(tp, state, "truncating", e)
                    continue
                state.needs_truncation = not done

    def _back_off(self, tp: TopicPartition, state: FetchState, error: ErrorCode) -> None:
        delay = 0.05 if error == ErrorCode.unknown_leader_epoch else self.backoff
        log.debug("%s-%d: %s from the leader; retrying in %.2fs", tp[0], tp[1], error.name, delay)
        state.retry_at = time.monotonic() + delay

    def _local_write_failed(self, tp: TopicPartition, state: FetchState, doing: str, e: OSError) -> None:
        """A write to this replica's own log of ``tp`` failed (ENOSPC, EIO): the partition
        backs off, not the connection nor the answer's other partitions (Kafka's
        KafkaStorageException -> markPartitionFailed). dmq takes no log directory offline
        (a leader's failed append is answered KAFKA_STORAGE_ERROR and may be retried), so
        it is tried again after ``replica.fetch.backoff.ms``, or at once on a new leader or
        epoch (a new FetchState); logged once until a write succeeds."""
        if not state.storage_failed:
            state.storage_failed = True
            log.error("%s-%d: %s the local log failed: %s; retrying every %.1fs", tp[0], tp[1],
                      doing, e or type(e).__name__, self.backoff)
        self._back_off(tp, state, ErrorCode.kafka_storage_error)

    @property
    def throttle_rate(self) -> int:
        return int(self.config["follower.replication.throttled.rate"])

    def _throttle_allows(self) -> bool:
        """Whether throttled replicas may fetch now: the bucket refills at the rate, holds one
        second of it, and a fetch that overdraws it makes the next ones wait."""
        rate = self.throttle_rate
        now = time.monotonic()
        elapsed, self._throttle_at = now - self._throttle_at, now
        if rate >= LONG_MAX:
            self._throttle_tokens = 0.0
            return True
        self._throttle_tokens = min(float(rate), self._throttle_tokens + elapsed * rate)
        return self._throttle_tokens > 0

    def _throttle_charge(self, nbytes: int) -> None:
        if self.throttle_rate < LONG_MAX:
            self._throttle_tokens -= nbytes

    async def _fetch(self, fetcher: ReplicaFetcher, states: dict[TopicPartition, FetchState]) -> None:
        wanted: dict[TopicPartition, PartitionRequest] = {}
        throttle_open = self._throttle_allows()
        for tp, state in states.items():
            p = self._current(fetcher, tp, state)
            if p is None or (state.throttled and not throttle_open):
                continue
            # A throttled fetch asks for at most one second's worth, so one answer cannot
            # overshoot the rate by a whole replica.fetch.max.bytes.
            max_bytes = min(self.max_bytes, max(self.throttle_rate, 1)) if state.throttled else self.max_bytes
            wanted[tp] = (state.leader_epoch, p.log.log_end_offset, p.log.log_start_offset, max_bytes)
        if not wanted:
            await asyncio.sleep(0.1)
            return
        # KIP-227: after the first (full) fetch, only what changed is listed.
        session = fetcher.session
        session_id, epoch, listed, forgotten_tps = session.build(wanted)
        by_topic: dict[str, list[tuple[int, int, int, int, int]]] = {}
        for (topic, index), (leader_epoch, offset, log_start, max_bytes) in listed.items():
            partitions = by_topic.get(topic)
            if partitions is None:
                partitions = by_topic[topic] = []
            partitions.append((index, leader_epoch, offset, log_start, max_bytes))
        forgotten: dict[str, list[int]] = {}
        for topic, index in forgotten_tps:
            forgotten.setdefault(topic, []).append(index)
        topics, forgotten_topics = list(by_topic.items()), list(forgotten.items())
        assert fetcher.client is not None
        client_id, broker_id = fetcher.client.client_id, self.broker_id
        max_wait, min_bytes, response_max = self.max_wait, self.min_bytes, self.response_max_bytes
        try:
            response = await fetcher.client.request_frame(
                lambda correlation_id: encode_follower_fetch(
                    correlation_id, client_id, broker_id, max_wait, min_bytes, response_max, topics,
                    session_id, epoch, forgotten_topics),
                self._fetch_class, self.socket_timeout + self.max_wait / 1000)
        except BaseException:
            session.reset()  # the leader may have moved the session on without telling
            raise
        if not session.handle_response(response.error_code, response.session_id):
            log.debug("fetch session with broker %d: %s; starting a new one",
                      fetcher.leader_id, response.error_code.name)
            return
        ignored = False
        for t in response.responses:
            for r in t.partitions:
                tp = (t.topic, r.partition_index)
                found = self._answered(fetcher, states, tp)
                if found is None:
                    ignored = True
                    continue
                try:
                    self._handle_partition(tp, *found, r)
                except OSError as e:
                    self._local_write_failed(tp, found[0], "writing to", e)
        if ignored:
            # The leader now believes it told this replica something it did not take (the
            # partition changed while the fetch was out): a full fetch sets that right.
            session.reset()

    def _handle_partition(self, tp: TopicPartition, state: FetchState, p: Partition, r: Any) -> None:
        error = r.error_code
        if error == ErrorCode.offset_out_of_range:
            if r.log_start_offset > p.log.log_end_offset:
                log.info("%s-%d: leader's log starts at %d, after this replica's end %d; restarting there",
                         tp[0], tp[1], r.log_start_offset, p.log.log_end_offset)
                p.truncate_fully_and_start_at(r.log_start_offset)
            else:
                state.needs_truncation = True
            return
        if error != ErrorCode.none:
            self._back_off(tp, state, error)
            return
        records = bytes(r.records) if r.records else b""
        try:
            appended = p.append_as_follower(records, r.high_watermark)
        except InvalidRecordError as e:
            log.error("%s-%d: refusing data from the leader: %s", tp[0], tp[1], e)
            self._back_off(tp, state, ErrorCode.corrupt_message)
            return
        if state.throttled and appended:
            self._throttle_charge(len(records))
        if p.log.log_start_offset < r.log_start_offset <= p.high_watermark:
            p.log.delete_records_before(r.log_start_offset)
        if state.storage_failed:
            state.storage_failed = False
            log.info("%s-%d: writing to the local log works again", tp[0], tp[1])
