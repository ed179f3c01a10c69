"""Broker: wires storage, replication, metadata and handlers behind one listener.

Startup: open the metadata store, load and recover every log, take leadership
of the local partitions, then listen. Shutdown (SIGTERM/SIGINT): stop
listening, flush every log, write checkpoints and the clean-shutdown marker.
Background tasks: retention, flushing rolled segments, flush.ms, checkpoints.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.controller import Controller
from dmq.cluster.metadata import BrokerInfo, EmbeddedMetadataStore, TopicMetadata
from dmq.cluster.producer_ids import ProducerIdManager
from dmq.config import LONG_MAX, BrokerConfig, LogConfig
from dmq.group.coordinator import OFFSETS_TOPIC, GroupConfig, GroupCoordinator
from dmq.group.offsets_topic import Coordinators, OffsetsTopic
from dmq.handlers import HANDLERS, api_versions, supported_apis
from dmq.handlers.context import BrokerServices, CloseConnection, RequestContext
from dmq.protocol.codec import (
    FrameError,
    decode_request,
    encode_response,
    peek_header,
    response_module,
)
from dmq.replication.replica_manager import ReplicaManager
from dmq.server.network import CLOSE, Listener
from dmq.storage.cleaner import LogCleaner
from dmq.storage.log_manager import LogManager

log = logging.getLogger("dmq.broker")


def parse_host_port(text: str, default_port: int = 9092) -> tuple[str, int]:
    text = text.strip()
    for prefix in ("PLAINTEXT://", "tcp://"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, default_port
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid port in {text!r}: expected HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = int(config["broker.id"])
        self.data_dir = os.path.abspath(str(config["log.dirs"]).split(",")[0])
        self.listen_host, self.listen_port = parse_host_port(str(config["listeners"]))
        advertised = config["advertised.listeners"]
        self.advertised = parse_host_port(advertised) if advertised else None
        self.stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.listener: Listener | None = None
        self.bound: tuple[str, int] = (self.listen_host, self.listen_port)

    # ----------------------------------------------------------------- startup

    def _lock_data_dir(self) -> None:
        """Hold an exclusive lock on the data dir, as Kafka's ``.lock``: one broker per directory."""
        os.makedirs(self.data_dir, exist_ok=True)
        self._lock_file = open(os.path.join(self.data_dir, ".lock"), "a")  # noqa: SIM115 - held for life
        try:
            fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise SystemExit(
                f"error: {self.data_dir} is in use by another dmq broker; stop it or pass "
                f"another --data-dir") from None

    async def start(self) -> None:
        started = time.monotonic()
        self._lock_data_dir()
        self.store = EmbeddedMetadataStore(self.data_dir, self.broker_id)
        self._write_meta_properties()
        self.log_manager = LogManager(self.data_dir, self._log_config_for)
        load_s = self.log_manager.load_logs(self._known_partition)
        self.cleaner = LogCleaner(self.data_dir)
        self.replica_manager = ReplicaManager(self.broker_id, self.log_manager)
        self.controller = Controller(self.store, self.config, self._apply_topic,
                                     self._remove_topic, self.log_manager.update_config)
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
        )
        self.offsets_topic = OffsetsTopic(self.replica_manager, self.controller,
                                          group_config.num_partitions,
                                          int(self.config["offsets.topic.segment.bytes"]))
        self.group_coordinator = GroupCoordinator(group_config, self.offsets_topic,
                                                  self._partition_exists)
        self.coordinators = Coordinators(self.group_coordinator, self.offsets_topic, self.store,
                                         self.broker_id)
        self.services = BrokerServices(
            broker_id=self.broker_id, config=self.config, metadata=self.store,
            controller=self.controller, replica_manager=self.replica_manager,
            log_manager=self.log_manager, producer_ids=self.producer_ids,
            coordinators=self.coordinators, supported_apis=supported_apis(),
        )
        for topic in self.store.topics().values():
            self._apply_topic(topic)
        loaded = self.coordinators.load()
        if loaded:
            log.info("loaded %d records of group state from %s", loaded, OFFSETS_TOPIC)
        self.listener = Listener(self.listen_host, self.listen_port, self.dispatch,
                                 int(self.config["socket.request.max.bytes"]))
        self.bound = await self.listener.start()
        host, port = self.advertised or (self.bound[0], self.bound[1])
        if self.advertised and self.advertised[1] == 0:
            host, port = self.advertised[0], self.bound[1]
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        self.store.register_broker(BrokerInfo(self.broker_id, host, port))
        self._spawn(self._every(int(self.config["log.retention.check.interval.ms"]),
                                self._retention))
        self._spawn(self._every(1000, self._flush_rolled))
        self._spawn(self._every(int(self.config["log.flush.offset.checkpoint.interval.ms"]),
                                self._checkpoint))
        self._spawn(self._every(int(self.config["producer.id.expiration.check.interval.ms"]),
                                self._expire_producers))
        if self.config["log.cleaner.enable"]:
            self._spawn(self._every(int(self.config["log.cleaner.backoff.ms"]), self._clean_logs))
        self._spawn(self._every(int(self.config["offsets.retention.check.interval.ms"]),
                                self._expire_offsets))
        for key in self.config.unknown:
            log.warning("ignoring unknown broker config %s", key)
        log.info("loaded %d logs in %.2fs (%s shutdown); started in %.2fs",
                 len(self.log_manager.logs), load_s,
                 "clean" if self.log_manager.clean_shutdown else "unclean",
                 time.monotonic() - started)
        print(f"dmq broker {self.broker_id} listening on {self.bound[0]}:{self.bound[1]} "
              f"(advertised {host}:{port}, data dir {self.data_dir}, cluster id "
              f"{self.store.cluster_id})", flush=True)

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

    def _known_partition(self, topic: str, partition: int) -> str | None:
        meta = self.store.topic(topic)
        if meta is None or partition not in meta.partitions:
            return None
        return meta.topic_id

    def _partition_exists(self, topic: str, partition: int) -> bool:
        meta = self.store.topic(topic)
        return meta is not None and partition in meta.partitions

    def _apply_topic(self, topic: TopicMetadata) -> None:
        for index, state in topic.partitions.items():
            if state.leader == self.broker_id:
                self.replica_manager.make_leader(topic.name, index, topic.topic_id,
                                                 state.leader_epoch, state.replicas, state.isr)

    def _remove_topic(self, topic: TopicMetadata) -> None:
        for index in topic.partitions:
            self.replica_manager.remove_partition(topic.name, index, delete=True)
            self.cleaner.forget(topic.name, index)

    # ---------------------------------------------------------------- dispatch

    async def dispatch(self, frame: bytes, peer: str) -> object:
        try:
            api_key, version, correlation_id = peek_header(frame)
        except FrameError as e:
            log.warning("closing connection from %s: %s", peer, e)
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
                             peer.rsplit(":", 1)[0], response_module(api_key, version))
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
        return encode_response(correlation_id, api_key, response)

    # -------------------------------------------------------------- background

    def _spawn(self, coro: Awaitable[None]) -> None:
        self._tasks.append(asyncio.ensure_future(coro))

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

    def _retention(self) -> None:
        deleted = self.log_manager.run_retention()
        if deleted:
            log.info("retention deleted %d segments", deleted)

    async def _flush_rolled(self) -> None:
        await asyncio.to_thread(self.log_manager.flush_pending)
        if any(lg.config.flush_ms < LONG_MAX for lg in self.log_manager.logs.values()):
            self.log_manager.flush_dirty()

    async def _clean_logs(self) -> None:
        plan = self.cleaner.plan(list(self.log_manager.logs.values()))
        if plan is not None:
            result = await asyncio.to_thread(self.cleaner.clean, plan)
            self.cleaner.swap(result)

    def _expire_producers(self) -> None:
        removed = self.log_manager.expire_producers(int(self.config["producer.id.expiration.ms"]))
        if removed:
            log.info("expired the state of %d idle producers", removed)

    def _expire_offsets(self) -> None:
        expired = self.group_coordinator.expire_offsets()
        if expired:
            log.info("removed %d expired offsets and groups", expired)

    def _checkpoint(self) -> None:
        self.log_manager.checkpoint()

    # --------------------------------------------------------------- shutdown

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
        self.stopping.set()
        if self.listener is not None:
            await self.listener.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.log_manager.flush_pending()
        self.log_manager.shutdown()
        log.info("shut down cleanly")
        print("dmq broker stopped cleanly", flush=True)
