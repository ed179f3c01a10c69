"""BrokerCollector: a broker's state as Prometheus metric families, read at scrape time.

Nothing here runs on the produce or fetch path. The broker's objects keep plain
numbers (``RequestStats`` in the listener, ``TopicStats`` and ISR change counts
in the ReplicaManager, the purgatories' watcher lists, the ZooKeeper store's
session state); ``collect`` reads them when Prometheus scrapes and builds the
families, Kafka's metrics under the names docs/metrics.md lists.

The consumer-group lag needs the end offsets of partitions other brokers may
lead, which takes requests: ``refresh`` (async, bounded) fetches
them right before a scrape's ``collect``. Event-loop thread only: every object
read here belongs to the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sized
from importlib import metadata as importlib_metadata
from typing import Any, Protocol

from kio.schema.errors import ErrorCode
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from dmq.cluster.controller import Controller
from dmq.cluster.metadata import MetadataStore
from dmq.cluster.zookeeper import ZooKeeperMetadataStore
from dmq.group.coordinator import GroupCoordinator
from dmq.handlers import HANDLERS
from dmq.metrics import heap
from dmq.metrics.requests import BOUNDS, LAG_BOUNDS, UNKNOWN_API_KEY, LoopLag, RequestStats
from dmq.replication.fetch_session import FetchSessionCache
from dmq.replication.replica_manager import ReplicaManager

log = logging.getLogger("dmq.metrics")

# How long a scrape waits for other brokers' end offsets (consumer-group lag); what has
# not come by then is left out of that scrape. Prometheus' default scrape timeout is 10 s.
END_OFFSETS_TIMEOUT_S = 5.0
ZOOKEEPER_STATES = ("CONNECTED", "SUSPENDED", "LOST")


class ConnectionView(Protocol):
    @property
    def frames(self) -> Sized: ...
    @property
    def in_flight(self) -> Sized: ...


class ListenerView(Protocol):
    @property
    def stats(self) -> RequestStats: ...
    @property
    def connections(self) -> Iterable[ConnectionView]: ...


class ServicesView(Protocol):
    @property
    def share_admin(self) -> Any: ...  # its ``latest_offsets`` reads partitions' end offsets
    @property
    def fetch_sessions(self) -> FetchSessionCache: ...


class BrokerView(Protocol):
    """What the collector reads of a broker (``dmq.server.broker.Broker``), once started."""

    @property
    def broker_id(self) -> int: ...
    @property
    def store(self) -> MetadataStore: ...
    @property
    def zk(self) -> ZooKeeperMetadataStore | None: ...
    @property
    def controller(self) -> Controller | None: ...
    @property
    def replica_manager(self) -> ReplicaManager: ...
    @property
    def group_coordinator(self) -> GroupCoordinator: ...
    @property
    def listeners(self) -> Any: ...  # a list of ListenerView, one per listener
    @property
    def request_stats(self) -> RequestStats: ...  # shared by all listeners
    @property
    def services(self) -> ServicesView: ...


def api_name(api_key: int) -> str:
    """Kafka's name of an API (``Produce``, ``OffsetForLeaderEpoch``) from its handler
    module's name; the key itself for one this broker does not know."""
    if api_key == UNKNOWN_API_KEY:
        return "unknown"
    handler = HANDLERS.get(api_key)
    if handler is None:
        return str(api_key)
    return "".join(part.capitalize() for part in handler.__name__.rsplit(".", 1)[-1].split("_"))


def _version() -> str:
    try:
        return importlib_metadata.version("dmq")
    except importlib_metadata.PackageNotFoundError:  # pragma: no cover - run from a checkout
        return "unknown"


class BrokerCollector(Collector):
    """The families of one broker. Create it on the broker's event loop: that thread's
    CPU clock is the event loop's busy time, and its ``loop_lag`` probe runs there."""

    def __init__(self, broker: BrokerView) -> None:
        self.broker = broker
        self.version = _version()
        self._loop_clock = time.pthread_getcpuclockid(threading.get_ident())
        self._end_offsets: dict[tuple[str, int], int] = {}
        # (group, topic, partition) -> (start offset, lag) of the share groups coordinated here
        self._share_offsets: dict[tuple[str, str, int], tuple[int, int]] = {}
        self._api_names: dict[int, str] = {}
        self.loop_lag = LoopLag()
        try:
            self.loop_lag.start()
        except RuntimeError:  # no running loop: no lag samples
            pass

    # ---------------------------------------------------------------- scrape

    async def refresh(self) -> None:
        """Before ``collect``: what the lag families need from other brokers and the share
        coordinator, both at once, each within END_OFFSETS_TIMEOUT_S."""
        await asyncio.gather(self._refresh_end_offsets(), self._refresh_share_offsets())

    async def _refresh_end_offsets(self) -> None:
        """Read the end offsets (high watermarks) of every partition a group coordinated
        here has committed offsets for: locally where this broker leads it, else from
        its leader, within END_OFFSETS_TIMEOUT_S."""
        wanted = sorted({tp for g in self.broker.group_coordinator.loaded_groups() for tp in g.offsets})
        found: dict[tuple[str, int], int] = {}
        remote: list[tuple[str, int]] = []
        rm = self.broker.replica_manager
        for tp in wanted:
            p = rm.partitions.get(tp)
            if p is not None and p.is_leader:
                found[tp] = p.high_watermark
            else:
                remote.append(tp)
        admin = getattr(self.broker.services, "share_admin", None)
        if remote and admin is not None:
            latest: Callable[[list[tuple[str, int]]], Awaitable[dict[tuple[str, int], Any]]] = \
                admin.latest_offsets
            try:
                answers = await asyncio.wait_for(latest(remote), END_OFFSETS_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - a scrape never fails for the lag's sake
                log.info("metrics: no end offsets from other brokers for group lag (%s)",
                         str(e) or type(e).__name__)
                answers = {}
            for tp, value in answers.items():
                if not isinstance(value, ErrorCode):
                    found[tp] = value
        self._end_offsets = found

    async def _refresh_share_offsets(self) -> None:
        """Start offset and lag of every initialized share-partition of the share groups
        coordinated here (what DescribeShareGroupOffsets answers)."""
        self._share_offsets = await self._read_share_offsets()

    async def _read_share_offsets(self) -> dict[tuple[str, str, int], tuple[int, int]]:
        admin = getattr(self.broker.services, "share_admin", None)
        if admin is None:
            return {}
        groups = [g.group_id for g in self.broker.group_coordinator.list_groups(types=["share"])]
        if not groups:
            return {}
        try:
            described = await asyncio.wait_for(
                asyncio.gather(*(admin.describe_offsets(g, None) for g in groups)), END_OFFSETS_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - a scrape never fails for the lag's sake
            log.info("metrics: no share-group offsets (%s)", str(e) or type(e).__name__)
            return {}
        out: dict[tuple[str, str, int], tuple[int, int]] = {}
        for group in described:
            if group.error is not ErrorCode.none:
                continue
            for topic in group.topics:
                for p in topic.partitions:
                    if p.error is ErrorCode.none and p.start_offset >= 0:
                        out[(group.group_id, topic.name, p.partition)] = (p.start_offset, p.lag)
        return out

    def collect(self) -> Iterator[Metric]:
        yield from self._broker()
        yield from self._requests()
        yield from self._network()
        yield from self._topics()
        yield from self._replicas()
        yield from self._logs()
        yield from self._controller()
        yield from self._groups()
        yield from self._zookeeper()

    # -------------------------------------------------------------- families

    def _broker(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("dmq_broker_info", "This broker: its id, cluster id and dmq version "
                                 "(always 1).", labels=["broker_id", "cluster_id", "version"])
        info.add_metric([str(self.broker.broker_id), self.broker.store.cluster_id, self.version], 1)
        yield info
        cpu = CounterMetricFamily(
            "dmq_event_loop_cpu_seconds", "CPU time of the broker's event-loop thread, which does "
            "all network and request work (Kafka's network and request-handler threads): "
            "1 - rate() is the idle ratio (NetworkProcessorAvgIdlePercent, "
            "RequestHandlerAvgIdlePercent).")
        cpu.add_metric([], time.clock_gettime(self._loop_clock))
        yield cpu
        lag = self.loop_lag
        family = HistogramMetricFamily(
            "dmq_event_loop_lag_seconds", "How late the event loop runs a timer due every half "
            "second: how long a ready request waits behind other work.")
        family.add_metric([], _cumulative(LAG_BOUNDS, list(lag.buckets), lag.count), lag.seconds)
        yield family
        yield from _gc_families()

    def _requests(self) -> Iterator[Metric]:
        total = CounterMetricFamily("dmq_requests", "Requests answered, by API (Kafka's RequestsPerSec).",
                                    labels=["request"])
        latency = HistogramMetricFamily(
            "dmq_request_duration_seconds", "Time from a request's start to its answer, by API "
            "(Kafka's TotalTimeMs).", labels=["request"])
        stats: RequestStats = self.broker.request_stats  # one for all the broker's listeners
        for api_key, s in sorted(stats.apis.items()):
            name = self._api_names.get(api_key)
            if name is None:
                name = self._api_names[api_key] = api_name(api_key)
            # Copied first: the numbers are one request apart at most, never torn.
            count, seconds, buckets = s.count, s.seconds, list(s.buckets)
            total.add_metric([name], count)
            latency.add_metric([name], _cumulative(BOUNDS, buckets, count), seconds)
        yield total
        yield latency

    def _network(self) -> Iterator[Metric]:
        connections = queued = in_flight = 0
        for listener in self.broker.listeners:
            for c in list(listener.connections):
                connections += 1
                queued += len(c.frames)
                in_flight += len(c.in_flight)
        accepted = self.broker.request_stats.connections_total
        yield GaugeMetricFamily("dmq_network_connections", "Open client connections.",
                                value=connections)
        yield CounterMetricFamily("dmq_network_connections_accepted", "Client connections accepted.",
                                  value=accepted)
        yield GaugeMetricFamily("dmq_network_requests_queued", "Requests read and not started yet "
                                "(Kafka's RequestQueueSize).", value=queued)
        yield GaugeMetricFamily("dmq_network_requests_in_flight", "Requests started and not "
                                "answered yet (waiting in a purgatory, say).", value=in_flight)

    def _topics(self) -> Iterator[Metric]:
        rm = self.broker.replica_manager
        families = {
            "messages_in": CounterMetricFamily(
                "dmq_topic_messages_in", "Records appended as leader (Kafka's MessagesInPerSec).",
                labels=["topic"]),
            "bytes_in": CounterMetricFamily(
                "dmq_topic_bytes_in", "Record batch bytes appended as leader (BytesInPerSec).",
                labels=["topic"]),
            "bytes_out": CounterMetricFamily(
                "dmq_topic_bytes_out", "Record bytes sent to consumers' fetches (BytesOutPerSec).",
                labels=["topic"]),
            "replication_bytes_in": CounterMetricFamily(
                "dmq_topic_replication_bytes_in", "Bytes appended as follower "
                "(ReplicationBytesInPerSec).", labels=["topic"]),
            "replication_bytes_out": CounterMetricFamily(
                "dmq_topic_replication_bytes_out", "Bytes sent to followers' fetches "
                "(ReplicationBytesOutPerSec).", labels=["topic"]),
        }
        for topic, stats in sorted(rm.topic_stats.items()):
            for attr, family in families.items():
                family.add_metric([topic], getattr(stats, attr))
        yield from families.values()

    def _replicas(self) -> Iterator[Metric]:
        rm = self.broker.replica_manager
        partitions = leaders = under_replicated = under_min_isr = 0
        for p in rm.partitions.values():
            partitions += 1
            if p.is_leader:
                leaders += 1
                if len(p.isr) < len(p.replicas):
                    under_replicated += 1
                if len(p.isr) < p.min_insync_replicas:
                    under_min_isr += 1
        yield GaugeMetricFamily("dmq_replica_partitions", "Partitions hosted here, as leader or "
                                "follower (Kafka's PartitionCount).", value=partitions)
        yield GaugeMetricFamily("dmq_replica_leader_partitions", "Partitions this broker leads "
                                "(Kafka's LeaderCount).", value=leaders)
        yield GaugeMetricFamily("dmq_replica_under_replicated_partitions", "Partitions led here "
                                "whose ISR is smaller than their replica set "
                                "(UnderReplicatedPartitions).", value=under_replicated)
        yield GaugeMetricFamily("dmq_replica_under_min_isr_partitions", "Partitions led here whose "
                                "ISR is below min.insync.replicas (UnderMinIsrPartitionCount).",
                                value=under_min_isr)
        yield CounterMetricFamily("dmq_replica_isr_shrinks", "ISR shrinks of partitions led here "
                                  "(IsrShrinksPerSec).", value=rm.isr_shrinks)
        yield CounterMetricFamily("dmq_replica_isr_expands", "ISR expansions of partitions led here "
                                  "(IsrExpandsPerSec).", value=rm.isr_expands)
        for name, purgatory in (("Produce", rm.produce_purgatory), ("Fetch", rm.fetch_purgatory),
                                ("DeleteRecords", rm.delete_records_purgatory)):
            waiting, entries = purgatory.sizes()
            ops = GaugeMetricFamily("dmq_purgatory_delayed_operations", "Requests waiting in a "
                                    "purgatory (NumDelayedOperations).", labels=["operation"])
            ops.add_metric([name], waiting)
            size = GaugeMetricFamily("dmq_purgatory_size", "Watcher entries of a purgatory, one per "
                                     "partition a waiting request watches (PurgatorySize).",
                                     labels=["operation"])
            size.add_metric([name], entries)
            yield ops
            yield size
        sessions = self.broker.services.fetch_sessions
        yield GaugeMetricFamily("dmq_fetch_sessions", "Fetch sessions (KIP-227) kept here "
                                "(NumIncrementalFetchSessions).", value=len(sessions.sessions))
        yield GaugeMetricFamily("dmq_fetch_session_partitions", "Partitions in the fetch sessions "
                                "kept here (NumIncrementalFetchPartitionsCached).",
                                value=sessions.partitions_cached)
        yield CounterMetricFamily("dmq_fetch_session_evictions", "Fetch sessions evicted to make "
                                  "room for new ones (IncrementalFetchSessionEvictionsPerSec).",
                                  value=sessions.evictions)

    def _logs(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("dmq_log_size_bytes", "Bytes of a partition's log on disk "
                                 "(kafka.log Log Size).", labels=labels)
        end = GaugeMetricFamily("dmq_log_end_offset", "A partition's log end offset.", labels=labels)
        start = GaugeMetricFamily("dmq_log_start_offset", "A partition's log start offset.",
                                  labels=labels)
        segments = GaugeMetricFamily("dmq_log_segments", "Segments of a partition's log.",
                                     labels=labels)
        for (topic, index), p in sorted(self.broker.replica_manager.partitions.items()):
            lg = p.log
            values = [topic, str(index)]
            size.add_metric(values, lg.size_in_bytes)
            end.add_metric(values, lg.log_end_offset)
            start.add_metric(values, lg.log_start_offset)
            segments.add_metric(values, len(lg.segments))
        yield from (size, end, start, segments)

    def _controller(self) -> Iterator[Metric]:
        broker = self.broker
        store = broker.store
        controller = broker.controller
        active = controller.active if controller is not None else store.controller_id() == broker.broker_id
        yield GaugeMetricFamily("dmq_controller_active", "1 on the active controller, else 0 "
                                "(ActiveControllerCount).", value=1 if active else 0)
        offline = topics = partitions = 0
        if active:
            live = {b.broker_id for b in store.brokers()}
            for meta in store.topics().values():
                topics += 1
                for state in meta.partitions.values():
                    partitions += 1
                    if state.leader < 0 or state.leader not in live:
                        offline += 1
        yield GaugeMetricFamily("dmq_controller_offline_partitions", "Partitions without a live "
                                "leader, on the active controller (OfflinePartitionsCount).",
                                value=offline)
        yield GaugeMetricFamily("dmq_controller_topics", "Topics in the cluster, on the active "
                                "controller (GlobalTopicCount).", value=topics)
        yield GaugeMetricFamily("dmq_controller_partitions", "Partitions in the cluster, on the "
                                "active controller (GlobalPartitionCount).", value=partitions)
        yield GaugeMetricFamily("dmq_cluster_brokers", "Brokers registered in the cluster, as this "
                                "broker sees it.", value=len(store.brokers()))

    def _groups(self) -> Iterator[Metric]:
        labels = ["group", "topic", "partition"]
        lag = GaugeMetricFamily("dmq_consumergroup_lag", "A group's lag on a partition: its end "
                                "offset (high watermark) minus the committed offset, for the "
                                "groups this broker coordinates.", labels=labels)
        committed = GaugeMetricFamily("dmq_consumergroup_committed_offset", "A group's committed "
                                      "offset on a partition, for the groups this broker "
                                      "coordinates.", labels=labels)
        members = GaugeMetricFamily("dmq_consumergroup_members", "Members of a group this broker "
                                    "coordinates.", labels=["group"])
        end_offsets = self._end_offsets
        for group in sorted(self.broker.group_coordinator.loaded_groups(), key=lambda g: g.group_id):
            members.add_metric([group.group_id], len(group.members))
            for (topic, index), om in sorted(group.offsets.items()):
                values = [group.group_id, topic, str(index)]
                committed.add_metric(values, om.offset)
                end = end_offsets.get((topic, index))
                if end is not None:
                    lag.add_metric(values, max(end - om.offset, 0))
        yield from (lag, committed, members)
        share_lag = GaugeMetricFamily("dmq_sharegroup_lag", "A share group's lag on a partition: "
                                      "records from its start offset to the end offset not yet "
                                      "delivered and acknowledged, for the share groups this broker "
                                      "coordinates.", labels=labels)
        share_start = GaugeMetricFamily("dmq_sharegroup_start_offset", "A share group's start offset "
                                        "on a partition (records below it are done).", labels=labels)
        for (group_id, topic, index), (start, lag_value) in sorted(self._share_offsets.items()):
            values = [group_id, topic, str(index)]
            share_start.add_metric(values, start)
            if lag_value >= 0:
                share_lag.add_metric(values, lag_value)
        yield from (share_lag, share_start)

    def _zookeeper(self) -> Iterator[Metric]:
        zk = self.broker.zk
        if zk is None:
            return
        state = zk.client.state
        family = GaugeMetricFamily("dmq_zookeeper_session_state", "1 for the ZooKeeper session's "
                                   "state (CONNECTED, SUSPENDED: disconnected, LOST: expired), 0 "
                                   "for the others (Kafka's SessionState).", labels=["state"])
        for s in ZOOKEEPER_STATES:
            family.add_metric([s], 1 if s == state else 0)
        yield family
        yield CounterMetricFamily("dmq_zookeeper_session_expirations", "ZooKeeper sessions of this "
                                  "broker that expired (ZooKeeperExpiresPerSec).",
                                  value=zk.session_expirations)
        yield CounterMetricFamily("dmq_zookeeper_connections", "Times the ZooKeeper session "
                                  "connected, reconnections included.", value=zk.client.connections)


def _cumulative(bounds: tuple[float, ...], buckets: list[int], count: int) -> list[tuple[str, float]]:
    """Per-bucket counts (the last above every bound) as Prometheus' cumulative buckets."""
    cumulative: list[tuple[str, float]] = []
    running = 0
    for bound, n in zip(bounds, buckets, strict=False):
        running += n
        cumulative.append((_le(bound), running))
    cumulative.append(("+Inf", count))
    return cumulative


def _le(bound: float) -> str:
    """A bucket bound as the ``le`` label Prometheus' own clients write (0.5, 1.0, 30.0)."""
    return repr(float(bound))


def _gc_families() -> Iterator[Metric]:
    """The cycle collector's pauses (``dmq.metrics.heap``): they stop the event loop."""
    pauses = SummaryMetricFamily(
        "dmq_gc_pause_seconds", "Time the Python cycle collector took, by generation collected "
        "(the event loop waits meanwhile; Kafka's JVM GC pause times).", labels=["generation"])
    longest = GaugeMetricFamily("dmq_gc_pause_max_seconds", "The longest pause of the Python "
                                "cycle collector since the broker started, by generation.",
                                labels=["generation"])
    p = heap.PAUSES
    for g in heap.GENERATIONS:
        pauses.add_metric([str(g)], p.count[g], p.total_s[g])
        longest.add_metric([str(g)], p.max_s[g])
    yield pauses
    yield longest
    yield GaugeMetricFamily("dmq_gc_frozen_objects", "Objects alive when the broker had started, "
                            "moved out of the cycle collector's reach (gc.freeze).",
                            value=heap.frozen_objects())
