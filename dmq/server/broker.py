"""Broker: wires storage, replication, metadata and handlers behind one listener.

Startup: open the metadata store (embedded, or ZooKeeper with
``zookeeper.connect``), load and recover every log, take the roles the
metadata gives this broker, listen, then register. Shutdown (SIGTERM/SIGINT):
in a cluster, the ClusterBackend's controlled shutdown first (stop following, ask the controller to
move leadership away, wait for it); then stop listening, flush every log,
write checkpoints and the clean-shutdown marker.

In a cluster, the ZooKeeper store's watch-fed cache lives on the event loop
and calls ``_on_metadata_change`` there when it changes: the ClusterBackend
reconciles (the ReplicaManager, the fetchers and the group coordinator follow
the cached partition states; the same reconcile serves the embedded store
after a topic change), and the Controller handles the same events if this
broker is the elected controller. No ZooKeeper call blocks the loop: the store's
writes are async and bounded (REQUEST_TIMED_OUT when ZooKeeper is unreachable).
Background tasks: retention, flushing rolled segments, flush.ms, checkpoints,
ISR shrinking.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import functools
import logging
import os
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.client.channels import BrokerChannels
from dmq.client.security import inter_broker_security
from dmq.cluster.admin_manager import AdminManager
from dmq.cluster.backend import ClusterBackend
from dmq.cluster.controller import Controller, ControllerEvent
from dmq.cluster.metadata import (
    DEFAULT_BROKER_ENTITY,
    OFFSETS_TOPIC,
    BrokerInfo,
    EmbeddedMetadataStore,
    MetadataError,
)
from dmq.cluster.producer_ids import ProducerIdManager
from dmq.cluster.zk.client import ZooKeeperSasl, ZooKeeperTls, ZooKeeperUnavailable
from dmq.cluster.zookeeper import ZooKeeperMetadataStore
from dmq.config import (
    LONG_MAX,
    BrokerConfig,
    ConfigError,
    ListenerEndpoint,
    LogConfig,
    ShareGroupSettings,
    inter_broker_listener,
    listener_endpoints,
    share_group_settings,
)
from dmq.coordinator.internal_topic import InternalTopic
from dmq.group.coordinator import GroupConfig, GroupCoordinator, ShareConfig, ShareTopic
from dmq.group.offsets_topic import Coordinators
from dmq.handlers import EAGER_API_KEYS, HANDLERS, api_versions, supported_apis
from dmq.handlers.context import BrokerServices, CloseConnection, RequestContext
from dmq.metrics import heap
from dmq.metrics.http import MetricsServer
from dmq.metrics.requests import RequestStats
from dmq.protocol import bounds as request_bounds
from dmq.protocol.codec import (
    FrameError,
    decode_request,
    encode_response,
    peek_header,
    response_module,
)
from dmq.record import check as record_check
from dmq.replication.delayed import TICK_MS as DELAYED_TICK_MS
from dmq.replication.delayed import DelayedDelivery
from dmq.replication.fetch_session import FetchSessionCache
from dmq.replication.fetcher import ReplicaFetcherManager
from dmq.replication.replica_manager import ReplicaManager
from dmq.security.acl import kafka_host
from dmq.security.authorizer import AclAuthorizer, authorizer_for
from dmq.security.credentials import ScramCredentials
from dmq.security.sasl import ANONYMOUS, Authenticator, ConnectionAuth, sasl_settings
from dmq.security.tls import peer_principal, server_context
from dmq.server.add_partitions_to_txn_manager import AddPartitionsToTxnManager
from dmq.server.markers import BrokerMarkerWriter
from dmq.server.network import CLOSE, CloseAfter, KafkaConnection, Listener
from dmq.server.pacing import CpuIdleMeter, LoopSharePacer
from dmq.server.share_membership import ShareGroupMembership
from dmq.share.admin import LatestOffsetReader, ShareGroupAdmin
from dmq.share.broker_persister import BrokerSharePersister
from dmq.share.coordinator import SHARE_STATE_TOPIC, ShareCoordinator, ShareCoordinatorConfig
from dmq.share.dead_letter import DeadLetterWriter
from dmq.share.manager import SharePartitionManager
from dmq.share.partition import SharePartitionConfig
from dmq.share.service import ShareService
from dmq.share.session import ShareSessionCache
from dmq.storage.cleaner import LogCleaner
from dmq.storage.key_indexer import KeyIndexer
from dmq.storage.log_manager import LogManager
from dmq.storage.producer_state import VerificationGuard
from dmq.storage.segment import close_fds, take_due_closes
from dmq.transaction.coordinator import TRANSACTION_STATE_TOPIC, TransactionCoordinator
from dmq.transaction.markers import TransactionMarkerSender
from dmq.transaction.shard import TransactionConfig

log = logging.getLogger("dmq.broker")

# How long a shutdown waits for the ZooKeeper session to close.
ZK_CLOSE_TIMEOUT_S = 5.0
# How long a starting broker in a ZooKeeper cluster waits for a controller before saying it is up.
CONTROLLER_WAIT_S = 10.0
KEY_INDEX_SLICE_S = 0.002  # one slice of the key indexer on the event loop


def parse_host_port(text: str, default_port: int = 9092) -> tuple[str, int]:
    text = text.strip()
    if "://" in text:  # NAME://HOST:PORT (the listener's name does not matter here)
        text = text.split("://", 1)[1]
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, default_port
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid port in {text!r}: expected HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def data_dir_error(data_dir: str, e: OSError) -> str:
    """One line for a data directory the broker cannot create or write."""
    path = data_dir
    while os.path.dirname(path) != path and not os.path.exists(path):
        path = os.path.dirname(path)
    if os.path.exists(path) and not os.path.isdir(path):
        reason = ("it is a file, not a directory" if path == data_dir
                  else f"{path} is a file, not a directory")
    else:
        reason = (e.strerror or str(e)).lower()
        if e.filename and os.path.abspath(str(e.filename)) != data_dir:
            reason += f" ({e.filename})"
    return (f"error: cannot use {data_dir} as the data directory: {reason}; pass another "
            f"--data-dir (log.dirs)")


def listen_error(host: str, port: int, e: OSError) -> str:
    """One line for a listener address the broker cannot bind."""
    if e.errno == errno.EADDRINUSE:
        return (f"error: cannot listen on {host}:{port}: address already in use. Is another "
                f"broker using it? Stop it or pick another address with --listen HOST:PORT.")
    reason = (e.strerror or str(e)).lower()
    return f"error: cannot listen on {host}:{port}: {reason}; pick another address with --listen HOST:PORT."


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = int(config["broker.id"])
        self.data_dir = os.path.abspath(str(config["log.dirs"]).split(",")[0])
        try:
            self.endpoints = listener_endpoints(config)
            advertised_endpoints = listener_endpoints(config, "advertised.listeners")
            self.inter_broker = inter_broker_listener(config, self.endpoints)
            self.inter_broker_security = inter_broker_security(config) if config["zookeeper.connect"] else None
        except ConfigError as e:
            raise SystemExit(f"error: {e}") from None
        if not self.endpoints:
            raise SystemExit("error: listeners is empty: give at least one NAME://HOST:PORT")
        names = {e.name for e in self.endpoints}
        unknown = [e.name for e in advertised_endpoints if e.name not in names]
        if unknown:
            raise SystemExit(f"error: advertised.listeners names {', '.join(unknown)}, which is "
                             f"not in listeners")
        self.advertised_endpoints = {e.name: e for e in advertised_endpoints}
        self.listen_host, self.listen_port = self.endpoints[0].host, self.endpoints[0].port
        first_advertised = self.advertised_endpoints.get(self.endpoints[0].name)
        self.advertised = (first_advertised.host, first_advertised.port) if first_advertised else None
        self.listeners: list[Listener] = []
        # connection id -> its authentication state and its connection (dmq.security)
        self._sessions: dict[int, ConnectionAuth] = {}
        self._open: dict[int, KafkaConnection] = {}
        self.authenticator: Authenticator | None = None
        self.stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._one_off: set[asyncio.Future[None]] = set()  # short background work, kept referenced
        self.listener: Listener | None = None
        self.bound: tuple[str, int] = (self.listen_host, self.listen_port)
        # listener name -> its bound address, once every listener listens
        self.bound_listeners: dict[str, tuple[str, int]] = {}
        self.zk: ZooKeeperMetadataStore | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self.controller: Controller | None = None
        self._reregistering: asyncio.Future[None] | None = None  # registering again after a lost session
        self.metrics_server: MetricsServer | None = None  # metrics.listener: Prometheus' /metrics
        self.request_stats = RequestStats(known=HANDLERS)  # every listener's requests (read by dmq.metrics)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._share_settings_cache: dict[tuple[str, tuple[tuple[str, str], ...]], ShareGroupSettings] = {}

    # ----------------------------------------------------------------- startup

    def _lock_data_dir(self) -> None:
        """Hold an exclusive lock on the data dir, as Kafka's ``.lock``: one broker per directory."""
        try:
            os.makedirs(self.data_dir, exist_ok=True)
            self._lock_file = open(os.path.join(self.data_dir, ".lock"), "a")  # noqa: SIM115 - held for life
        except OSError as e:
            raise SystemExit(data_dir_error(self.data_dir, e)) from None
        try:
            fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise SystemExit(
                f"error: {self.data_dir} is in use by another dmq broker; stop it or pass "
                f"another --data-dir") from None

    async def start(self) -> None:
        started = time.monotonic()
        heap.install()  # times the cycle collector's pauses from here on
        self._lock_data_dir()
        self._loop = asyncio.get_running_loop()
        connect = self.config["zookeeper.connect"]
        if connect:
            try:
                zk_tls = ZooKeeperTls.from_config(self.config)
                zk_sasl = ZooKeeperSasl.from_config(self.config)
                if self.config["zookeeper.set.acl"] and zk_sasl is None:
                    raise ValueError("zookeeper.set.acl needs the broker's ZooKeeper identity: set "
                                     "zookeeper.sasl.jaas.config")
            except ValueError as e:
                raise SystemExit(f"error: {e}") from None
            try:
                connection_timeout = self.config["zookeeper.connection.timeout.ms"]
                self.zk = await ZooKeeperMetadataStore.connect(
                    str(connect), self.broker_id, int(self.config["zookeeper.session.timeout.ms"]),
                    connection_timeout_ms=int(connection_timeout) if connection_timeout else None,
                    tls=zk_tls, sasl=zk_sasl)
            except Exception as e:
                secured = ("; are zookeeper.ssl.* and zookeeper.sasl.jaas.config what this "
                           "ZooKeeper asks for?" if zk_tls or zk_sasl else "")
                raise SystemExit(
                    f"error: cannot connect to ZooKeeper at {connect}: {e or type(e).__name__}. "
                    f"Is ZooKeeper running there? (dmq cluster start runs one for development){secured}"
                ) from None
            self.store: EmbeddedMetadataStore | ZooKeeperMetadataStore = self.zk
        else:
            self.store = EmbeddedMetadataStore(self.data_dir, self.broker_id)
        self._write_meta_properties()
        self.log_manager = LogManager(self.data_dir, self._log_config_for)
        self.cleaner = LogCleaner(self.data_dir, int(self.config["log.cleaner.dedupe.buffer.size"]),
                                  log_manager=self.log_manager)
        backend = self.backend = ClusterBackend(self.broker_id, self.store, self.log_manager,
                                                self.cleaner)
        load_s = self.log_manager.load_logs(backend.known_partition)
        self.replica_manager = ReplicaManager(self.broker_id, self.log_manager,
                                              backend.write_isr if self.zk else None,
                                              backend.partition_exists, backend.replica_eligible,
                                              backend.resign_leadership if self.zk else None,
                                              replica_lag_time_max_ms=int(self.config["replica.lag.time.max.ms"]),
                                              replica_alive=backend.broker_registered)
        if self.zk is not None:
            self.fetchers = ReplicaFetcherManager(self.broker_id, self.replica_manager, self.config,
                                                  backend.broker_address, self.inter_broker_security)
            self.controller = Controller(self.zk, self.config)
        self._apply_dynamic_configs()
        # Whatever a topic change made through this broker, the backend makes it good locally.
        self.admin_manager = AdminManager(self.store, self.config, lambda t: backend.reconcile_now(),
                                     lambda t: backend.reconcile_now(), self.log_manager.update_config,
                                     self._apply_dynamic_configs)
        self.producer_ids = ProducerIdManager(self.store)
        offsets_topic = self.store.topic(OFFSETS_TOPIC)
        group_config = GroupConfig(
            num_partitions=len(offsets_topic.partitions) if offsets_topic else int(self.config["offsets.topic.num.partitions"]),
            min_session_timeout_ms=int(self.config["group.min.session.timeout.ms"]),
            max_session_timeout_ms=int(self.config["group.max.session.timeout.ms"]),
            initial_rebalance_delay_ms=int(self.config["group.initial.rebalance.delay.ms"]),
            offset_metadata_max_bytes=int(self.config["offset.metadata.max.bytes"]),
            offsets_retention_ms=int(self.config["offsets.retention.minutes"]) * 60_000,
            max_group_size=int(self.config["group.max.size"]),
            share=ShareConfig(
                session_timeout_ms=int(self.config["group.share.session.timeout.ms"]),
                heartbeat_interval_ms=int(self.config["group.share.heartbeat.interval.ms"]),
                max_size=int(self.config["group.share.max.size"]),
                per_group=self._share_timeouts,
            ),
        )
        self.offsets_topic = InternalTopic(OFFSETS_TOPIC, self.replica_manager, self.admin_manager,
                                           group_config.num_partitions,
                                           int(self.config["offsets.topic.segment.bytes"]),
                                           int(self.config["offsets.topic.replication.factor"]),
                                           int(self.config["offsets.commit.timeout.ms"]),
                                           "offsets.topic.replication.factor")
        self.group_coordinator = GroupCoordinator(group_config, self.offsets_topic,
                                                  backend.partition_exists,
                                                  int(self.config["offsets.commit.timeout.ms"]),
                                                  self._share_topic)
        self.coordinators = Coordinators(self.group_coordinator, self.offsets_topic, self.store,
                                         self.broker_id)
        txn_topic = self.store.topic(TRANSACTION_STATE_TOPIC)
        txn_config = TransactionConfig(
            num_partitions=len(txn_topic.partitions) if txn_topic else int(self.config["transaction.state.log.num.partitions"]),
            max_timeout_ms=int(self.config["transaction.max.timeout.ms"]),
            abort_interval_ms=int(self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]),
            id_expiration_ms=int(self.config["transactional.id.expiration.ms"]),
            expire_interval_ms=int(self.config["transaction.remove.expired.transaction.cleanup.interval.ms"]),
            check_delay_ms=int(self.config["transaction.check.delay.ms"]),
            check_interval_ms=int(self.config["transaction.check.interval.ms"]),
            check_max=int(self.config["transaction.check.max"]),
        )
        self.transaction_topic = InternalTopic(
            TRANSACTION_STATE_TOPIC, self.replica_manager, self.admin_manager, txn_config.num_partitions,
            int(self.config["transaction.state.log.segment.bytes"]),
            int(self.config["transaction.state.log.replication.factor"]),
            int(self.config["offsets.commit.timeout.ms"]), "transaction.state.log.replication.factor",
            int(self.config["transaction.state.log.min.isr"]))
        self.transaction_coordinator = TransactionCoordinator(
            txn_config, self.transaction_topic, self.producer_ids.generate, self.store,
            int(self.config["offsets.commit.timeout.ms"]))
        share_state_topic = self.store.topic(SHARE_STATE_TOPIC)
        share_config = ShareCoordinatorConfig(
            num_partitions=len(share_state_topic.partitions) if share_state_topic
            else int(self.config["share.coordinator.state.topic.num.partitions"]))
        self.share_state_topic = InternalTopic(
            SHARE_STATE_TOPIC, self.replica_manager, self.admin_manager, share_config.num_partitions,
            int(self.config["share.coordinator.state.topic.segment.bytes"]),
            int(self.config["share.coordinator.state.topic.replication.factor"]),
            int(self.config["offsets.commit.timeout.ms"]), "share.coordinator.state.topic.replication.factor",
            int(self.config["share.coordinator.state.topic.min.isr"]))
        self.share_coordinator = ShareCoordinator(
            share_config, self.share_state_topic, self.store, self._share_partition_exists,
            int(self.config["offsets.commit.timeout.ms"]))
        self.share_persister = BrokerSharePersister(self.broker_id, self.store, self.share_coordinator,
                                                    security=self.inter_broker_security)
        for internal in (self.offsets_topic, self.transaction_topic, self.share_state_topic):
            self.admin_manager.internal_topic_creators[internal.name] = internal.ensure_exists

        def on_internal_leadership(topic: str, led: dict[int, int]) -> None:
            if topic == OFFSETS_TOPIC:
                self.coordinators.set_led_partitions(led)
            elif topic == TRANSACTION_STATE_TOPIC:
                self.transaction_coordinator.set_led(led)
            elif topic == SHARE_STATE_TOPIC:
                self.share_coordinator.set_led(led)

        backend.attach(self.replica_manager, self.fetchers, on_internal_leadership, self._on_topics_deleted)
        self.share_channels = BrokerChannels(f"dmq-share-{self.broker_id}", self._broker_address,
                                             self.inter_broker_security)
        share_admin = ShareGroupAdmin(
            self.group_coordinator, self.share_persister, self.store,
            LatestOffsetReader(self.store, self._local_high_watermark, self.share_channels))
        self.services = BrokerServices(
            broker_id=self.broker_id, config=self.config, metadata=self.store,
            admin_manager=self.admin_manager, replica_manager=self.replica_manager,
            log_manager=self.log_manager, producer_ids=self.producer_ids,
            coordinators=self.coordinators, transactions=self.transaction_coordinator,
            supported_apis=supported_apis(), share_coordinator=self.share_coordinator,
            share_admin=share_admin, authorizer=self._authorizer(),
            fetch_sessions=FetchSessionCache(
                int(self.config["max.incremental.fetch.session.cache.slots"])),
            share=ShareService(
                ShareSessionCache(int(self.config["group.share.max.share.sessions"])),
                SharePartitionManager(
                    self.replica_manager, self.share_persister, self._topic_name,
                    config=SharePartitionConfig(
                        max_in_flight_records=int(self.config["group.share.partition.max.record.locks"]),
                        delivery_count_limit=int(self.config["group.share.delivery.count.limit"]),
                        lock_duration_ms=int(self.config["group.share.record.lock.duration.ms"])),
                    group_settings=self._share_settings,
                    may_initialize=ShareGroupMembership(
                        lambda group_id: self.group_coordinator.share_group_describe([group_id])[0],
                        self.coordinators.group_coordinator_node, self.broker_id, self.share_channels),
                    dead_letters=DeadLetterWriter(self.broker_id, self.store, self.admin_manager,
                                                  self.replica_manager, self.share_channels,
                                                  self.producer_ids.generate))),
        )
        self.services.credentials = ScramCredentials(self.store)
        try:
            self.authenticator = Authenticator(
                sasl_settings(self.config, [e.name for e in self.endpoints if e.uses_sasl]),
                self.services.credentials)
            contexts = {e.name: server_context(self.config, e.name) for e in self.endpoints if e.uses_ssl}
        except ConfigError as e:
            raise SystemExit(f"error: {e}") from None
        self.marker_writer = BrokerMarkerWriter(self.broker_id, self.store, self.services,
                                                self.inter_broker_security)
        self.marker_sender = TransactionMarkerSender(self.marker_writer, self.transaction_coordinator.complete)
        self.txn_verifier = AddPartitionsToTxnManager(
            self.broker_id, self._transaction_coordinator_of, self.transaction_coordinator.verify_partitions,
            BrokerChannels(f"dmq-txn-verify-{self.broker_id}", self._broker_address, self.inter_broker_security))
        if self.config["transaction.partition.verification.enable"]:
            self.replica_manager.txn_verifier = self.txn_verifier
            self.group_coordinator.verify_transaction = self._verify_offsets_transaction
        self.transaction_coordinator.send_markers = self.marker_sender.send
        if self.zk is None:
            await backend.reconcile_now()  # leads every partition: loads the coordinators' shards
        await self._start_metrics()
        bound: dict[str, tuple[str, int]] = {}
        for endpoint in self.endpoints:
            listener = Listener(endpoint.host, endpoint.port, self.dispatch,
                                int(self.config["socket.request.max.bytes"]),
                                on_close=self._connection_closed, eager_api_keys=EAGER_API_KEYS,
                                name=endpoint.name, ssl_context=contexts.get(endpoint.name),
                                on_open=functools.partial(self._connection_opened, endpoint),
                                stats=self.request_stats)
            try:
                bound[endpoint.name] = await listener.start()
            except OSError as e:
                for opened in self.listeners:
                    await opened.stop()
                raise SystemExit(listen_error(endpoint.host, endpoint.port, e)) from None
            self.listeners.append(listener)
        self.listener = self.listeners[0]
        self.bound = bound[self.endpoints[0].name]
        self.bound_listeners = bound
        advertised = tuple((name, *self._advertised_address(name, bound[name]),
                            next(e.security_protocol for e in self.endpoints if e.name == name))
                           for name in (e.name for e in self.endpoints))
        host, port = next((h, p) for n, h, p, _ in advertised if n == self.endpoints[0].name)
        inter_host, inter_port = next((h, p) for n, h, p, _ in advertised if n == self.inter_broker.name)
        rack = self.config["broker.rack"]
        info = BrokerInfo(self.broker_id, inter_host, inter_port, str(rack) if rack else None,
                          advertised if len(advertised) > 1 or advertised[0][0] != "PLAINTEXT" else ())
        if self.zk is not None:
            await self._register(self.zk, info)
            self.zk.on_change = self._on_metadata_change
            assert self.controller is not None
            self._spawn(self.controller.run(self.stopping))
            lag = int(self.config["replica.lag.time.max.ms"])
            # A leader resigns once its followers have been silent for longer than a dead
            # follower's session takes to expire (ZooKeeper notices within about half a
            # session more), so that only live, cut-off followers count against it.
            resign_after = max(lag, int(self.config["zookeeper.session.timeout.ms"]) * 3 // 2 + 1000)
            self._spawn(self._every(max(min(lag // 2, 1000), 10),
                                    lambda: self.replica_manager.maybe_shrink_isr(lag, resign_after)))
            backend.reconcile()
            await self._await_controller(CONTROLLER_WAIT_S)
        else:
            await self.store.register_broker(info)
        self._spawn(self._every(int(self.config["log.retention.check.interval.ms"]),
                                self._retention))
        self._spawn(self._every(1000, self._flush_rolled))
        self._spawn(self._every(int(self.config["log.flush.offset.checkpoint.interval.ms"]),
                                self._checkpoint))
        self._spawn(self._every(int(self.config["replica.high.watermark.checkpoint.interval.ms"]),
                                self._checkpoint_high_watermarks))
        self._spawn(self._every(int(self.config["producer.id.expiration.check.interval.ms"]),
                                self._expire_producers))
        if self.config["log.cleaner.enable"]:
            self._spawn(self._every(int(self.config["log.cleaner.backoff.ms"]), self._clean_logs))
        if self.config["log.key.index.enable"]:
            self._spawn(self._index_keys())
        self._spawn(self._every(int(self.config["offsets.retention.check.interval.ms"]),
                                self._expire_offsets))
        self.delayed_delivery = DelayedDelivery(self.replica_manager)
        self._spawn(self._every(DELAYED_TICK_MS, self._deliver_delayed))
        for key in self.config.unknown:
            log.warning("ignoring unknown broker config %s", key)
        if record_check.IMPLEMENTATION != "c" or request_bounds.IMPLEMENTATION != "c":
            log.info("checking produced records and request frames in Python (dmq's C extensions "
                     "were not built: with gcc and python3-dev installed, reinstall dmq for faster checks)")
        log.info("loaded %d logs in %.2fs (%s shutdown); started in %.2fs",
                 len(self.log_manager.logs), load_s,
                 "clean" if self.log_manager.clean_shutdown else "unclean",
                 time.monotonic() - started)
        # The modules, schemas and state loaded so far live as long as the process: out of
        # the cycle collector's walks, whose pauses stop the loop (dmq.metrics.heap).
        heap.freeze_startup_heap()
        others = "".join(f", {bound[e.name][0]}:{bound[e.name][1]} ({e.name})" for e in self.endpoints[1:])
        first = f" ({self.endpoints[0].name})" if others or self.endpoints[0].name != "PLAINTEXT" else ""
        print(f"dmq broker {self.broker_id} listening on {self.bound[0]}:{self.bound[1]}{first}{others} "
              f"(advertised {host}:{port}, data dir {self.data_dir}, cluster id "
              f"{self.store.cluster_id})", flush=True)

    def _advertised_address(self, name: str, bound: tuple[str, int]) -> tuple[str, int]:
        """What clients are told for listener ``name``: its advertised.listeners entry (port
        0: the bound port), else the bound address (0.0.0.0 given as 127.0.0.1)."""
        advertised = self.advertised_endpoints.get(name)
        host, port = (advertised.host, advertised.port) if advertised else bound
        if advertised and advertised.port == 0:
            port = bound[1]
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return host, port

    async def _start_metrics(self) -> None:
        """Serve /metrics on metrics.listener, when set (dmq.metrics)."""
        address = self.config["metrics.listener"]
        if not address:
            return
        host, port = parse_host_port(str(address), 9404)
        self.metrics_server = MetricsServer(self, host, port)
        try:
            host, port = await self.metrics_server.start()
        except OSError as e:
            self.metrics_server = None
            reason = ("address already in use" if e.errno == errno.EADDRINUSE
                      else (e.strerror or str(e)).lower())
            raise SystemExit(f"error: cannot serve metrics on {address}: {reason}; pick another "
                             f"address with --metrics HOST:PORT (metrics.listener)") from None
        print(f"dmq broker {self.broker_id} serves metrics on http://{host}:{port}/metrics", flush=True)

    def _write_meta_properties(self) -> None:
        path = os.path.join(self.data_dir, "meta.properties")
        text = f"version=0\nbroker.id={self.broker_id}\ncluster.id={self.store.cluster_id}\n"
        if os.path.exists(path):
            with open(path) as f:
                existing = dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)
            if existing.get("broker.id", str(self.broker_id)) != str(self.broker_id):
                raise SystemExit(
                    f"{self.data_dir} belongs to broker {existing['broker.id']}, not "
                    f"{self.broker_id}: use --data-dir with another directory or the right --broker-id")
            return
        with open(path, "w") as f:
            f.write(text)

    def _log_config_for(self, topic: str) -> LogConfig:
        meta = self.store.topic(topic)
        return LogConfig(self.config, meta.configs if meta else {})

    # ------------------------------------------------------------- cluster mode

    def _on_metadata_change(self, what: str) -> None:
        """Called on the event loop by the store when its cache changed."""
        self._metadata_event(what)

    def _apply_dynamic_configs(self) -> None:
        """Overlay the dynamic broker configs (AlterConfigs on a broker) over the static ones."""
        changed = self.config.apply_dynamic(self.store.broker_configs(str(self.broker_id)),
                                            self.store.broker_configs(DEFAULT_BROKER_ENTITY))
        for name in changed:
            log.info("dynamic broker config %s is now %s (%s)", name, self.config[name],
                     self.config.source(name).name)

    def _authorizer(self) -> AclAuthorizer | None:
        """The ACL authorizer ``authorizer.class.name`` names; None: no authorization."""
        try:
            return authorizer_for(self.config["authorizer.class.name"], self.store,
                                  self.config["super.users"], self.config["allow.everyone.if.no.acl.found"])
        except MetadataError as e:
            raise SystemExit(str(e)) from None

    def _share_topic(self, name: str) -> ShareTopic | None:
        """A topic's id and partition count, for the share groups' assignor."""
        meta = self.store.topic(name)
        return ShareTopic(meta.uuid, len(meta.partitions)) if meta is not None else None

    def _share_settings(self, group_id: str) -> ShareGroupSettings:
        """A share group's configs (its overrides in the metadata over group.share.*),
        remembered per set of overrides."""
        overrides = self.store.group_configs(group_id)
        key = (group_id, tuple(sorted(overrides.items())))
        found = self._share_settings_cache.get(key)
        if found is None:
            if len(self._share_settings_cache) > 10_000:
                self._share_settings_cache.clear()
            found = self._share_settings_cache[key] = share_group_settings(self.config, overrides)
        return found

    def _share_timeouts(self, group_id: str) -> tuple[int, int]:
        s = self._share_settings(group_id)
        return s.session_timeout_ms, s.heartbeat_interval_ms

    async def _verify_offsets_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                          partition: int) -> tuple[VerificationGuard | None, ErrorCode]:
        return await self.replica_manager.verify_transaction(transactional_id, producer_id, producer_epoch,
                                                             (OFFSETS_TOPIC, partition))

    def _transaction_coordinator_of(self, transactional_id: str) -> int | None:
        """The leader of the id's ``__transaction_state`` partition, None if there is none."""
        meta = self.store.topic(TRANSACTION_STATE_TOPIC)
        state = meta.partitions.get(self.transaction_coordinator.partition_for(transactional_id)) \
            if meta is not None else None
        return None if state is None else state.leader

    def _broker_address(self, broker_id: int) -> tuple[str, int] | None:
        return next(((b.host, b.port) for b in self.store.brokers() if b.broker_id == broker_id), None)

    def _local_high_watermark(self, topic: str, index: int) -> int | None:
        """The high watermark of a partition this broker leads; None if it does not."""
        p = self.replica_manager.get_partition(topic, index)
        return p.high_watermark if p is not None and p.is_leader else None

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        meta = self.store.topic_by_id(topic_id)
        return meta.name if meta is not None else None

    def _connection_opened(self, endpoint: ListenerEndpoint, conn: KafkaConnection) -> None:
        """A client connected: its authentication state, from its listener (and on SSL its
        client certificate). Until a SASL client has authenticated, its requests are
        bounded by sasl.server.max.receive.size."""
        principal = peer_principal(conn.transport) if endpoint.security_protocol == "SSL" else None
        auth = ConnectionAuth(endpoint.name, endpoint.security_protocol, self.authenticator,
                              principal or ANONYMOUS)
        conn.session = auth
        self._sessions[conn.id] = auth
        if auth.sasl:
            self._open[conn.id] = conn
            conn.max_request_bytes = min(conn.max_request_bytes,
                                         int(self.config["sasl.server.max.receive.size"]))

    def _connection_closed(self, connection_id: int) -> None:
        """A client connection ended: its share sessions end and release their records."""
        self._sessions.pop(connection_id, None)
        self._open.pop(connection_id, None)
        if self.services.share is not None:
            self.services.share.connection_closed(connection_id)

    def _share_partition_exists(self, topic_id: uuid.UUID, partition: int) -> bool:
        """Whether a share-partition's data partition exists (the share coordinator's check)."""
        meta = self.store.topic_by_id(topic_id)
        return meta is not None and partition in meta.partitions

    def _metadata_event(self, what: str) -> None:
        if what == "configs":
            self._apply_dynamic_configs()
            return
        event = ControllerEvent.from_notification(what)
        if self.controller is not None and event is not None:
            self.controller.enqueue(event)
        if what == "session" and (self._reregistering is None or self._reregistering.done()):
            self._reregistering = self._spawn(self._reregister())
        self.backend.schedule()

    async def _reregister(self) -> None:
        assert self.zk is not None
        if await self.zk.reregister():
            log.info("registered again in ZooKeeper after the session expired")
            self.backend.reconcile()

    # ---------------------------------------------------------------- dispatch

    async def dispatch(self, frame: bytes, peer: str, dispatched: Callable[[], None] = lambda: None,
                       connection_id: int = 0) -> object:
        auth = self._sessions.get(connection_id)
        if auth is not None and auth.raw and auth.server is not None:
            return await self._raw_sasl_token(auth, frame, peer, connection_id)
        try:
            api_key, version, correlation_id = peek_header(frame)
        except FrameError as e:
            log.warning("closing connection from %s: %s", peer, e)
            return CLOSE
        if auth is not None and auth.sasl and not auth.allows(api_key, int(time.monotonic() * 1000)):
            log.info("closing connection from %s (listener %s): API key %d %s", peer, auth.listener,
                     api_key, "before authentication" if not auth.authenticated or auth.server
                     else "after its SASL session expired (connections.max.reauth.ms)")
            return CLOSE
        handler = HANDLERS.get(api_key)
        if handler is None:
            log.warning("closing connection from %s: unsupported API key %d", peer, api_key)
            return CLOSE
        if not handler.MIN_VERSION <= version <= handler.MAX_VERSION:
            if api_key == api_versions.API_KEY:
                # KIP-511: answer in v0 with UNSUPPORTED_VERSION and the versions we speak.
                schema = response_module(api_key, 0)
                response = api_versions.build_response(self.services, schema,
                                                       ErrorCode.unsupported_version)
                return encode_response(correlation_id, api_key, response)
            log.warning("closing connection from %s: API key %d version %d is not supported "
                        "(%d-%d)", peer, api_key, version, handler.MIN_VERSION, handler.MAX_VERSION)
            return CLOSE
        try:
            header, request = decode_request(frame, api_key, version)
        except FrameError as e:
            log.warning("closing connection from %s: malformed request: %s (first bytes: %s)",
                        peer, e, frame[:96].hex())
            return CLOSE
        ctx = RequestContext(api_key, version, correlation_id, header.client_id,
                             kafka_host(peer.rsplit(":", 1)[0]), response_module(api_key, version), dispatched,
                             connection_id,
                             principal=auth.principal if auth is not None else ANONYMOUS,
                             listener=auth.listener if auth is not None else "PLAINTEXT",
                             auth=auth)
        try:
            response = await handler.handle(self.services, ctx, request)
        except CloseConnection as e:
            log.info("closing connection from %s (client %s): %s", peer, header.client_id, e)
            return CLOSE
        except Exception:
            log.exception("error handling API key %d v%d from %s (client %s); closing the connection",
                          api_key, version, peer, header.client_id)
            return CLOSE
        if response is None:
            return None
        data = encode_response(correlation_id, api_key, response)
        if auth is not None and auth.sasl:
            if auth.close_after_response:
                log.info("closing connection from %s (listener %s): SASL %s failed", peer,
                         auth.listener, "handshake" if api_key == 17 else "authentication")
                return CloseAfter(data) if isinstance(data, bytes) else CLOSE
            if api_key == 36 and auth.authentications > 1 and auth.server is None:
                log.info("connection from %s (listener %s) re-authenticated as %s (%s)", peer,
                         auth.listener, auth.principal, auth.mechanism)
            conn = self._open.pop(connection_id, None) if auth.authenticated else None
            if conn is not None:  # authenticated: full-size requests from now on
                conn.max_request_bytes = int(self.config["socket.request.max.bytes"])
        return data

    async def _raw_sasl_token(self, auth: ConnectionAuth, frame: bytes, peer: str, connection_id: int) -> object:
        """A SASL token after SaslHandshake v0: a raw frame, answered by a raw frame; a
        failure closes the connection without an answer, as Kafka does in this mode."""
        error, message, token, _ = await auth.authenticate(frame, int(time.monotonic() * 1000))
        if error != "none":
            log.info("closing connection from %s (listener %s): SASL authentication failed: %s",
                     peer, auth.listener, message)
            return CLOSE
        conn = self._open.pop(connection_id, None) if auth.authenticated and auth.server is None else None
        if conn is not None:
            conn.max_request_bytes = int(self.config["socket.request.max.bytes"])
        return len(token).to_bytes(4, "big") + token

    # -------------------------------------------------------------- background

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.append(task)
        return task

    async def _every(self, interval_ms: int, fn: Callable[[], Awaitable[None] | None]) -> None:
        interval = max(interval_ms, 10) / 1000.0
        while not self.stopping.is_set():
            try:
                await asyncio.wait_for(self.stopping.wait(), interval)
                return
            except TimeoutError:
                pass
            try:
                result: Any = fn()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("background task %s failed", getattr(fn, "__name__", fn))

    def _deliver_delayed(self) -> None:
        self.delayed_delivery.tick()

    def _retention(self) -> None:
        deleted = self.log_manager.run_retention()
        if deleted:
            log.info("retention deleted %d segments", deleted)

    async def _flush_rolled(self) -> None:
        due = take_due_closes()  # descriptors of deleted or replaced segments past file.delete.delay.ms
        if due:
            await asyncio.to_thread(close_fds, due)
        await asyncio.to_thread(self.log_manager.flush_pending)
        if any(lg.config.flush_ms < LONG_MAX for lg in self.log_manager.logs.values()):
            self.log_manager.flush_dirty()

    async def _clean_logs(self) -> None:
        plan = self.cleaner.plan(list(self.log_manager.logs.values()))
        if plan is not None:
            result = await asyncio.to_thread(self.cleaner.run, plan)
            if result is not None:
                self.cleaner.swap(result)

    async def _index_keys(self) -> None:
        """The key indexer (message query) in slices of KEY_INDEX_SLICE_S on the event loop,
        looking for new records every log.key.index.interval.ms once it has caught up.

        While it is behind it pauses between slices to take a share of the loop, as a
        LoopSharePacer sets it: up to log.key.index.max.loop.share while nothing else needs
        the CPU, down to a tenth of it while the broker itself is busy (produce, fetch) or
        the machine's CPUs are (a client on the same small host: dmq.server.pacing)."""
        most = float(self.config["log.key.index.max.loop.share"])
        idle = int(self.config["log.key.index.interval.ms"]) / 1000.0
        pacer = LoopSharePacer(most) if most > 0 else None
        machine = CpuIdleMeter()
        indexer = KeyIndexer()
        try:
            while not self.stopping.is_set():
                started = time.monotonic()
                busy = False
                if pacer is not None:
                    try:
                        busy = indexer.run(list(self.log_manager.logs.values()), started + KEY_INDEX_SLICE_S)
                    except Exception:
                        log.exception("key indexer failed; it starts again")
                        indexer.close()
                        indexer = KeyIndexer()
                spent = time.monotonic() - started
                pause = pacer.pause_after(spent) if busy and pacer is not None else idle
                cpu = time.process_time()
                machine.sample()
                await asyncio.sleep(pause)
                if busy and pacer is not None:
                    pacer.observe(time.monotonic() - started - spent, time.process_time() - cpu,
                                  machine.sample())
        finally:
            indexer.close()

    def _expire_producers(self) -> None:
        removed = self.log_manager.expire_producers(int(self.config["producer.id.expiration.ms"]))
        if removed:
            log.info("expired the state of %d idle producers", removed)

    def _on_topics_deleted(self, names: frozenset[str]) -> None:
        task = asyncio.ensure_future(self._forget_deleted_topics(names))
        self._one_off.add(task)
        task.add_done_callback(self._one_off.discard)

    async def _forget_deleted_topics(self, names: frozenset[str]) -> None:
        try:
            removed = await self.group_coordinator.on_topics_deleted(names)
        except Exception:
            log.exception("removing the committed offsets of deleted topics %s failed", sorted(names))
            return
        if removed:
            log.info("removed %d committed offsets and groups of deleted topics %s", removed,
                     ", ".join(sorted(names)))

    async def _expire_offsets(self) -> None:
        expired = await self.group_coordinator.expire_offsets()
        if expired:
            log.info("removed %d expired offsets and groups", expired)

    async def _checkpoint(self) -> None:
        # Snapshots on the loop, the writes (fsync and rename) on a worker thread.
        await asyncio.to_thread(self.log_manager.checkpoint_snapshots())

    async def _checkpoint_high_watermarks(self) -> None:
        write = self.replica_manager.high_watermarks_snapshot()
        if write is not None:
            await asyncio.to_thread(write)

    async def _await_controller(self, timeout_s: float) -> None:
        """Wait until some broker is the controller (bounded), before saying this broker is
        up. A client that asked for metadata in between got controller id -1, and
        librdkafka's admin client then waits for a controller it never asks about again:
        the first CreateTopics after a one-broker cluster started went unanswered for its
        whole timeout (the ZooKeeper SASL tests caught it)."""
        deadline = time.monotonic() + timeout_s
        while self.store.controller_id() < 0:
            if time.monotonic() >= deadline or self.stopping.is_set():
                log.info("no controller elected within %.0f s of starting; serving anyway", timeout_s)
                return
            await asyncio.sleep(0.02)

    # --------------------------------------------------------------- shutdown

    async def _register(self, zk: ZooKeeperMetadataStore, info: BrokerInfo) -> None:
        """Register in ZooKeeper. ZooKeeper going away meanwhile (say it restarts while this
        broker waits for its previous session's registration to expire) is waited out for as
        long as it takes, as Kafka's ZooKeeper client retries a request until connected once
        the first connection (bounded by ``zookeeper.connection.timeout.ms``) succeeded; a
        line every 30 s says the broker is still waiting."""
        connect = self.config["zookeeper.connect"]
        unreachable_since: float | None = None
        told = 0.0
        while True:
            try:
                await zk.register_broker(info)
                if unreachable_since is not None:
                    log.info("ZooKeeper answers again; broker %d registered after %.0f s",
                             self.broker_id, time.monotonic() - unreachable_since)
                return
            except ZooKeeperUnavailable as e:  # a MetadataError too: caught first
                now = time.monotonic()
                if unreachable_since is None:
                    unreachable_since = told = now
                    log.warning("ZooKeeper stopped answering while broker %d registers (%s); "
                                "retrying until it answers", self.broker_id, e)
                elif now - told >= 30:
                    told = now
                    log.warning("still waiting for ZooKeeper at %s to register broker %d "
                                "(unreachable for %.0f s)", connect, self.broker_id,
                                now - unreachable_since)
                await asyncio.sleep(0.5)
            except MetadataError as e:
                raise SystemExit(f"error: {e}") from None

    async def run(self) -> None:
        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.stopping.set)
            except (NotImplementedError, RuntimeError):
                pass
        await self.stopping.wait()
        await self.shutdown()

    async def shutdown(self) -> None:
        log.info("shutting down")
        if self.zk is not None and self.config["controlled.shutdown.enable"] and not self.zk.session_lost:
            try:
                await self.backend.controlled_shutdown(
                    int(self.config["controlled.shutdown.max.retries"]),
                    int(self.config["controlled.shutdown.retry.backoff.ms"]) / 1000)
            except Exception:
                log.exception("controlled shutdown failed; shutting down anyway")
        self.stopping.set()
        if self.fetchers is not None:
            await self.fetchers.shutdown()
        for listener in self.listeners:
            await listener.stop()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        await self.marker_sender.close()
        self.marker_writer.close()
        self.txn_verifier.close()
        await self.group_coordinator.close()
        await self.transaction_coordinator.close()
        if self.services.share is not None:
            self.services.share.close()
        self.share_persister.close()
        self.share_channels.close()
        await self.share_coordinator.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.log_manager.flush_pending()
        self.replica_manager.checkpoint_high_watermarks()
        self.log_manager.shutdown()
        if self.zk is not None:
            await self.zk.stop(ZK_CLOSE_TIMEOUT_S)
        log.info("shut down cleanly")
        print("dmq broker stopped cleanly", flush=True)
