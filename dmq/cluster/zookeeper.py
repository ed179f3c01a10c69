"""ZooKeeperMetadataStore: cluster metadata in ZooKeeper with classic Kafka's znode layout.

Znodes (under an optional chroot, ``host:port/chroot``)::

    /cluster/id                                   {"version":"1","id":"<cluster id>"}
    /brokers/ids/<id>                 ephemeral   {"version":5,"host","port","endpoints","rack",...}
    /brokers/topics/<topic>                       {"version":3,"topic_id","partitions":{"0":[1,2]}}
    /brokers/topics/<topic>/partitions/<p>/state  {"controller_epoch","leader","leader_epoch","isr","version":1}
    /config/topics/<topic>                        {"version":1,"config":{...}}
    /config/brokers/<id> and /config/brokers/<default>   dynamic broker configs, same shape
    /controller                       ephemeral   {"version":1,"brokerid":N,"timestamp":"..."}
    /controller_epoch                             "<epoch>"
    /latest_producer_id_block                     {"version":1,"broker","block_start","block_end"}
    /admin/reassign_partitions                    {"version":1,"partitions":[{"topic","partition","replicas"}]}
    /admin/preferred_replica_election             {"version":1,"partitions":[{"topic","partition"}]}
    /admin/controlled_shutdown/<id>   ephemeral   a broker asks the controller to move its leadership away

Partition state znodes change only by version compare-and-set, so a stale
controller (older ``controller_epoch``) cannot overwrite a newer one's
decision. Watches only refresh the local cache and queue events; callers
read the cache. Thread-safety: kazoo runs watch callbacks on its own thread;
the cache is replaced under a lock and read by the event-loop thread.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from dmq.cluster.metadata import (
    DEFAULT_BROKER_ENTITY,
    BrokerInfo,
    MetadataError,
    MetadataStore,
    PartitionState,
    TopicMetadata,
)
from dmq.cluster.zk.client import new_kazoo_client

log = logging.getLogger("dmq.zookeeper")


def _json(data: bytes) -> Any:
    return json.loads(data.decode()) if data else None


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def topic_id_to_kafka(hex_id: str) -> str:
    """Kafka stores topic ids base64url-encoded without padding."""
    return base64.urlsafe_b64encode(uuid.UUID(hex_id).bytes).decode().rstrip("=")


def topic_id_from_kafka(text: str) -> str:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))).hex


class ZooKeeperMetadataStore(MetadataStore):
    def __init__(self, connect: str, broker_id: int, session_timeout_ms: int = 18000,
                 on_change: Callable[[str], None] | None = None) -> None:
        self.broker_id = broker_id
        self.on_change = on_change
        self.session_timeout_ms = session_timeout_ms
        self.zk = new_kazoo_client(connect, session_timeout_ms)
        self.zk.start(timeout=max(10.0, session_timeout_ms / 1000))
        self._lock = threading.Lock()
        self._topics: dict[str, TopicMetadata] = {}
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller = -1
        self.controller_epoch = 0
        self._watched: set[str] = set()
        self.broker_epoch = -1
        self.adding_replicas: dict[str, dict[int, list[int]]] = {}
        self.removing_replicas: dict[str, dict[int, list[int]]] = {}
        self.registration: BrokerInfo | None = None
        self.session_lost = False
        self.shutting_down: set[int] = set()
        self._broker_configs: dict[str, dict[str, str]] = {}
        for path in ("/brokers/ids", "/brokers/topics", "/config/topics", "/config/brokers",
                     "/admin/delete_topics", "/admin/controlled_shutdown"):
            self.zk.ensure_path(path)
        self.cluster_id = self._cluster_id()
        self.zk.add_listener(self._session_state)
        self.zk.ChildrenWatch("/brokers/ids", self._brokers_changed)
        self.zk.ChildrenWatch("/brokers/topics", self._topics_changed)
        self.zk.DataWatch("/controller", self._controller_changed)
        self.zk.ChildrenWatch("/admin/controlled_shutdown", self._shutdown_requests_changed)
        self.zk.DataWatch("/admin/reassign_partitions", lambda d, s: self._notify("admin"))
        self.zk.DataWatch("/admin/preferred_replica_election", lambda d, s: self._notify("admin"))
        for entity in (DEFAULT_BROKER_ENTITY, str(broker_id)):
            self.zk.DataWatch(f"/config/brokers/{entity}", self._broker_config_watch(entity))

    def _broker_config_watch(self, entity: str) -> Callable[[bytes | None, Any], None]:
        def changed(data: bytes | None, stat: Any) -> None:
            raw = _json(data) if data else None
            configs = {str(k): str(v) for k, v in (raw or {}).get("config", {}).items()}
            with self._lock:
                self._broker_configs[entity] = configs
            self._notify("configs")
        return changed

    def _session_state(self, state: str) -> None:
        # Runs on kazoo's thread and must not call ZooKeeper: only flag and notify.
        if state == KazooState.LOST:
            self.session_lost = True
            log.warning("ZooKeeper session lost: this broker's registration and watches are gone")
            self._notify("session_lost")
        elif state == KazooState.CONNECTED and self.session_lost:
            self._notify("session")

    def _shutdown_requests_changed(self, children: list[str]) -> None:
        self.shutting_down = {int(c) for c in children if c.isdigit()}
        self._notify("admin")

    def close(self, timeout: float = 10.0) -> bool:
        """End the session (its ephemeral znodes go), waiting at most ``timeout`` seconds.

        kazoo's stop joins its callback thread, which can sit in a ZooKeeper call while the
        server is unreachable: the close runs on a daemon thread so that a broker shutting
        down during an outage is never held by it. False when it did not finish in time.
        """
        def stop() -> None:
            try:
                self.zk.stop()
                self.zk.close()
            except Exception as e:  # noqa: BLE001 - closing anyway
                log.warning("closing the ZooKeeper session: %s", e)

        closer = threading.Thread(target=stop, name="zk-close", daemon=True)
        closer.start()
        closer.join(timeout)
        if closer.is_alive():
            log.warning("the ZooKeeper session did not close within %.0fs; leaving it to expire",
                        timeout)
            return False
        return True

    # ------------------------------------------------------------------ cache

    def _cluster_id(self) -> str:
        new_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        try:
            self.zk.create("/cluster/id", _dump({"version": "1", "id": new_id}), makepath=True)
        except NodeExistsError:
            pass
        data, _ = self.zk.get("/cluster/id")
        return str(_json(data)["id"])

    def _brokers_changed(self, children: list[str]) -> None:
        brokers: dict[int, BrokerInfo] = {}
        for child in children:
            try:
                data, _ = self.zk.get(f"/brokers/ids/{child}")
            except NoNodeError:
                continue
            info = _json(data)
            brokers[int(child)] = BrokerInfo(int(child), info["host"], int(info["port"]), info.get("rack"))
        with self._lock:
            self._brokers = brokers
        self._notify("brokers")

    def _topics_changed(self, children: list[str]) -> None:
        topics = {}
        for name in children:
            topic = self._read_topic(name)
            if topic is not None:
                topics[name] = topic
                self._watch(f"/brokers/topics/{name}", name)
                self._watch(f"/config/topics/{name}", name)
                for p in topic.partitions:
                    self._watch(f"/brokers/topics/{name}/partitions/{p}/state", name)
        with self._lock:
            self._topics = topics
        self._notify("topics")

    def _watch(self, path: str, topic: str) -> None:
        """Refresh a topic when its assignment changes; a partition when its state changes."""
        if path in self._watched:
            return
        self._watched.add(path)
        partition = int(path.rsplit("/", 2)[1]) if path.endswith("/state") else None

        def changed(data: bytes | None, stat: Any) -> bool:
            if data is None:
                self._watched.discard(path)
                return False  # deleted: stop watching
            if partition is None:
                self.refresh_topic(topic)
            else:
                self._state_changed(topic, partition, data, int(stat.version))
            return True

        self.zk.DataWatch(path, changed)

    def _state_changed(self, topic: str, partition: int, data: bytes, version: int) -> None:
        raw = _json(data)
        with self._lock:
            meta = self._topics.get(topic)
            if meta is None or partition not in meta.partitions:
                return
            old = meta.partitions[partition]
            if 0 <= version < old.version:
                return  # an older state than the one cached (a watch racing our own write)
            meta.partitions[partition] = PartitionState(old.replicas, int(raw["leader"]),
                                                        int(raw["leader_epoch"]), list(raw["isr"]),
                                                        version)
        self._notify("topics")

    def _read_topic(self, name: str) -> TopicMetadata | None:
        try:
            data, _ = self.zk.get(f"/brokers/topics/{name}")
        except NoNodeError:
            return None
        raw = _json(data)
        partitions = {}
        for p, replicas in raw["partitions"].items():
            state = self.partition_state(name, int(p))
            partitions[int(p)] = state or PartitionState(list(replicas), -1, -1, [])
        try:
            cfg, _ = self.zk.get(f"/config/topics/{name}")
            configs = dict(_json(cfg).get("config", {}))
        except NoNodeError:
            configs = {}
        topic = TopicMetadata(name, topic_id_from_kafka(raw["topic_id"]), partitions, configs)
        self.adding_replicas[name] = {int(p): list(r) for p, r in (raw.get("adding_replicas") or {}).items()}
        self.removing_replicas[name] = {int(p): list(r) for p, r in (raw.get("removing_replicas") or {}).items()}
        return topic

    def refresh_topic(self, name: str) -> None:
        topic = self._read_topic(name)
        if topic is not None:
            for p in topic.partitions:
                self._watch(f"/brokers/topics/{name}/partitions/{p}/state", name)
        with self._lock:
            if topic is None:
                self._topics.pop(name, None)
            else:
                self._topics[name] = topic
        self._notify("topics")

    def _controller_changed(self, data: bytes | None, stat: Any) -> None:
        with self._lock:
            self._controller = int(_json(data)["brokerid"]) if data else -1
        self._notify("controller")

    def _notify(self, what: str) -> None:
        if self.on_change is not None:
            self.on_change(what)

    # ------------------------------------------------------------- interface

    def topics(self) -> dict[str, TopicMetadata]:
        with self._lock:
            return dict(self._topics)

    def brokers(self) -> list[BrokerInfo]:
        with self._lock:
            return sorted(self._brokers.values(), key=lambda b: b.broker_id)

    def controller_id(self) -> int:
        with self._lock:
            return self._controller

    def register_broker(self, info: BrokerInfo, wait_s: float | None = None) -> None:
        """Create this broker's ephemeral ``/brokers/ids/<id>``.

        A registration left by an earlier session of this id (a broker restarted at once
        after a crash) lingers until ZooKeeper expires that session, which can take longer
        than this process's own session timeout: the earlier process may have asked for a
        longer one (its registration says), ZooKeeper may have raised it to its
        ``minSessionTimeout`` (two ticks) and expires sessions a tick late at most. So this
        waits, watching the znode, up to ``stale_registration_wait_s`` (or ``wait_s``) and
        logs one line saying so; a registration still held after that belongs to a live
        session (another broker with this id, or a paused one renewing it): an error.
        One held by this very session (a create that got through before a reconnect) is ours.
        """
        endpoint = f"PLAINTEXT://{info.host}:{info.port}"
        body = {"version": 5, "host": info.host, "port": info.port, "endpoints": [endpoint],
                "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"}, "rack": info.rack,
                "jmx_port": -1, "timestamp": str(int(time.time() * 1000)), "features": {},
                "session_timeout_ms": self.session_timeout_ms}
        path = f"/brokers/ids/{info.broker_id}"
        deadline: float | None = None
        while True:
            try:
                self.zk.create(path, _dump(body), ephemeral=True)
                break
            except NodeExistsError:
                pass
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                continue  # it expired meanwhile
            owner = int(stat.ephemeralOwner)
            if owner == self.zk.client_id[0]:
                break
            old = _json(data) or {}
            if deadline is None:
                earlier_ms = int(old.get("session_timeout_ms") or 0)
                bound = wait_s if wait_s is not None else stale_registration_wait_s(
                    max(earlier_ms, self.session_timeout_ms))
                deadline = time.monotonic() + bound
                log.warning("broker %d is still registered by an earlier session (0x%x, at %s:%s); "
                            "waiting up to %.0f s for it to expire", info.broker_id, owner,
                            old.get("host"), old.get("port"), bound)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MetadataError(
                    "broker_id_not_registered",
                    f"broker id {info.broker_id} is registered in ZooKeeper by a live session "
                    f"(0x{owner:x}, at {old.get('host')}:{old.get('port')}) that did not expire: "
                    f"another broker with this id is running; stop it or give this broker "
                    f"another --broker-id")
            gone = threading.Event()
            if self.zk.exists(path, watch=lambda _event, gone=gone: gone.set()) is not None:
                gone.wait(min(remaining, 1.0))
        _, stat = self.zk.get(path)
        self.broker_epoch = int(stat.czxid)
        self.registration = info
        self.session_lost = False

    def reregister(self) -> None:
        """After a session expiry: register again (the old ephemeral znode is gone)."""
        if self.registration is not None:
            self.register_broker(self.registration)

    def try_become_controller(self) -> bool:
        """Controller election: create the ephemeral /controller and bump /controller_epoch."""
        body = _dump({"version": 1, "brokerid": self.broker_id, "timestamp": str(int(time.time() * 1000))})
        try:
            self.zk.create("/controller", body, ephemeral=True)
        except NodeExistsError:
            return False
        while True:
            try:
                data, stat = self.zk.get("/controller_epoch")
                epoch = int(data.decode()) + 1
                self.zk.set("/controller_epoch", str(epoch).encode(), version=stat.version)
                break
            except NoNodeError:
                try:
                    self.zk.create("/controller_epoch", b"1")
                    epoch = 1
                    break
                except NodeExistsError:
                    continue
            except BadVersionError:
                continue
        self.controller_epoch = epoch
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        return True

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        found = self.read_partition_state(topic, partition)
        return found[0] if found is not None else None

    def _replicas(self, topic: str, partition: int) -> list[int]:
        try:
            data, _ = self.zk.get(f"/brokers/topics/{topic}")
        except NoNodeError:
            return []
        return list(_json(data)["partitions"].get(str(partition), []))

    def update_partition_state(self, topic: str, partition: int, state: PartitionState,
                               expected_version: int) -> int:
        """Compare-and-set a partition's leader/ISR; returns the new znode version.

        Raises MetadataError("not_controller") when the znode changed meanwhile or a
        newer controller wrote it: the caller's view is stale.
        """
        path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        data, stat = self.zk.get(path)
        current = _json(data)
        if int(current.get("controller_epoch", 0)) > self.controller_epoch:
            raise MetadataError("not_controller", "a newer controller owns this partition state")
        body = _dump({"controller_epoch": self.controller_epoch, "leader": state.leader, "version": 1,
                      "leader_epoch": state.leader_epoch, "isr": state.isr})
        try:
            return int(self.zk.set(path, body, version=expected_version).version)
        except BadVersionError:
            raise MetadataError("not_controller", f"partition state of {topic}-{partition} changed") from None

    def partition_state_version(self, topic: str, partition: int) -> int:
        _, stat = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return int(stat.version)

    def read_partition_state(self, topic: str, partition: int) -> tuple[PartitionState, int] | None:
        """(state, znode version) read through from ZooKeeper."""
        try:
            data, stat = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        except NoNodeError:
            return None
        raw = _json(data)
        return (PartitionState(self._replicas(topic, partition), int(raw["leader"]),
                               int(raw["leader_epoch"]), list(raw["isr"]), int(stat.version)),
                int(stat.version))

    def update_isr(self, topic: str, partition: int, leader: int, leader_epoch: int,
                   isr: list[int], expected_version: int) -> int | None:
        """A leader's ISR change (Kafka's AlterPartition in ZooKeeper mode).

        A compare-and-set against the state version the leader last saw: it is
        refused (None) when anyone changed the state since, say the controller
        dropping a dead broker from the ISR, so a leader never overwrites a state
        it has not seen; the watch then brings it the new one. Returns the new version.
        """
        path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return None
        current = _json(data)
        if int(stat.version) != expected_version or int(current["leader"]) != leader \
                or int(current["leader_epoch"]) != leader_epoch:
            return None
        body = _dump({**current, "isr": isr})
        try:
            new_version = int(self.zk.set(path, body, version=expected_version).version)
        except BadVersionError:
            return None
        self._state_changed(topic, partition, body, new_version)
        return new_version

    def request_controlled_shutdown(self, timeout: float) -> None:
        """Ask the controller to move this broker's leadership away; raises (kazoo's
        timeout or connection errors) when ZooKeeper does not answer within ``timeout``."""
        try:
            self.zk.create_async(f"/admin/controlled_shutdown/{self.broker_id}", b"",
                                 ephemeral=True).get(timeout=timeout)
        except NodeExistsError:
            pass

    def read_admin(self, path: str) -> tuple[list[dict[str, Any]], int]:
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return [], -1
        raw = _json(data) or {}
        return list(raw.get("partitions", [])), int(stat.version)

    def write_admin(self, path: str, partitions: list[dict[str, Any]], version: int) -> None:
        """Replace (or delete, when empty) an /admin request znode; version -1 creates it."""
        body = _dump({"version": 1, "partitions": partitions})
        if version < 0:
            if partitions:
                try:
                    self.zk.create(path, body, makepath=True)
                except NodeExistsError:
                    raise MetadataError("concurrent_transactions", f"{path} changed meanwhile") from None
            return
        try:
            if partitions:
                self.zk.set(path, body, version=version)
            else:
                self.zk.delete(path, version=version)
        except (BadVersionError, NoNodeError):
            raise MetadataError("concurrent_transactions", f"{path} changed meanwhile") from None

    def request_reassignments(self, targets: dict[tuple[str, int], list[int]],
                              cancelled: frozenset[tuple[str, int]] = frozenset()) -> None:
        """Merge into /admin/reassign_partitions. A cancelled move that the controller has
        started becomes an entry back to the replicas before it, marked ``"cancel": true``
        (dmq's addition to Kafka's format); one not yet started is simply dropped."""
        path = "/admin/reassign_partitions"
        for _ in range(5):
            current, version = self.read_admin(path)
            merged: dict[tuple[str, int], dict[str, Any]] = {
                (str(e["topic"]), int(e["partition"])): e for e in current}
            for (t, p), r in targets.items():
                merged[(t, p)] = {"topic": t, "partition": p, "replicas": r}
            for t, p in cancelled:
                found = self.read_assignment(t)
                raw = found[0] if found else {}
                adding = (raw.get("adding_replicas") or {}).get(str(p))
                removing = (raw.get("removing_replicas") or {}).get(str(p))
                if adding is None and removing is None:
                    merged.pop((t, p), None)
                else:
                    before = [r for r in raw["partitions"][str(p)] if r not in (adding or [])]
                    merged[(t, p)] = {"topic": t, "partition": p, "replicas": before, "cancel": True}
            entries = [merged[k] for k in sorted(merged)]
            try:
                self.write_admin(path, entries, version)
                return
            except MetadataError:
                continue
        raise MetadataError("concurrent_transactions", "the reassignment request kept changing; retry")

    def ongoing_reassignments(self) -> dict[tuple[str, int], tuple[list[int], list[int]]]:
        out: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
        with self._lock:
            for topic, parts in self.adding_replicas.items():
                removing = self.removing_replicas.get(topic, {})
                for p in set(parts) | set(removing):
                    out[(topic, p)] = (parts.get(p, []), removing.get(p, []))
        pending, _ = self.read_admin("/admin/reassign_partitions")
        for e in pending:  # accepted, not yet started by the controller
            tp = (str(e["topic"]), int(e["partition"]))
            if tp not in out:
                current = self._replicas(*tp)
                target = list(e["replicas"])
                out[tp] = ([r for r in target if r not in current], [r for r in current if r not in target])
        return out

    def request_preferred_elections(self, partitions: list[tuple[str, int]]) -> None:
        path = "/admin/preferred_replica_election"
        for _ in range(5):
            current, version = self.read_admin(path)
            wanted = {(str(e["topic"]), int(e["partition"])) for e in current} | set(partitions)
            try:
                self.write_admin(path, [{"topic": t, "partition": p} for t, p in sorted(wanted)], version)
                return
            except MetadataError:
                continue

    def read_assignment(self, topic: str) -> tuple[dict[str, Any], int] | None:
        try:
            data, stat = self.zk.get(f"/brokers/topics/{topic}")
        except NoNodeError:
            return None
        return _json(data), int(stat.version)

    def write_assignment(self, topic: str, raw: dict[str, Any], version: int) -> None:
        try:
            self.zk.set(f"/brokers/topics/{topic}", _dump(raw), version=version)
        except BadVersionError:
            raise MetadataError("not_controller", f"assignment of {topic} changed meanwhile") from None
        self.refresh_topic(topic)

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, str], assignment: dict[int, list[int]] | None = None
                     ) -> TopicMetadata:
        live = self.broker_ids()
        if assignment is None:
            assignment = assign_replicas(live, num_partitions, replication_factor, self._racks())
        topic_id = uuid.uuid4().hex
        config_path, config = f"/config/topics/{name}", _dump({"version": 1, "config": configs})
        for _ in range(3):
            # The config goes in the same transaction as the topic: a losing concurrent create
            # (say, a Metadata auto-create racing CreateTopics) must not overwrite the winner's.
            config_exists = self.zk.exists(config_path) is not None
            tx = self.zk.transaction()
            if config_exists:
                tx.set_data(config_path, config)
            else:
                tx.create(config_path, config)
            tx.create(f"/brokers/topics/{name}", _dump({
                "version": 3, "topic_id": topic_id_to_kafka(topic_id),
                "partitions": {str(p): r for p, r in assignment.items()},
                "adding_replicas": {}, "removing_replicas": {}}))
            tx.create(f"/brokers/topics/{name}/partitions")
            for p, replicas in assignment.items():
                tx.create(f"/brokers/topics/{name}/partitions/{p}")
                tx.create(f"/brokers/topics/{name}/partitions/{p}/state", _dump({
                    "controller_epoch": self.controller_epoch, "leader": replicas[0], "version": 1,
                    "leader_epoch": 0, "isr": replicas}))
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                break
            if self.zk.exists(f"/brokers/topics/{name}") is not None:
                raise MetadataError("topic_already_exists", f"Topic '{name}' already exists.")
        else:
            raise MetadataError("unknown_server_error", f"creating {name} in ZooKeeper failed: {results}")
        self.refresh_topic(name)
        topic = self.topics()[name]
        return topic

    def delete_topic(self, name: str) -> TopicMetadata:
        topic = self.topics().get(name) or self._read_topic(name)
        if topic is None:
            raise MetadataError("unknown_topic_or_partition", "This server does not host this topic-partition.")
        self.zk.delete(f"/brokers/topics/{name}", recursive=True)
        try:
            self.zk.delete(f"/config/topics/{name}")
        except NoNodeError:
            pass
        self.refresh_topic(name)
        return topic

    def create_partitions(self, name: str, total: int) -> TopicMetadata:
        data, stat = self.zk.get(f"/brokers/topics/{name}")
        raw = _json(data)
        current = len(raw["partitions"])
        rf = len(next(iter(raw["partitions"].values())))
        live = self.broker_ids()
        extra = assign_replicas(live, total, rf, self._racks())
        for p in range(current, total):
            raw["partitions"][str(p)] = extra[p]
        tx = self.zk.transaction()
        tx.set_data(f"/brokers/topics/{name}", _dump(raw), version=stat.version)
        for p in range(current, total):
            tx.create(f"/brokers/topics/{name}/partitions/{p}")
            tx.create(f"/brokers/topics/{name}/partitions/{p}/state", _dump({
                "controller_epoch": self.controller_epoch, "leader": extra[p][0], "version": 1,
                "leader_epoch": 0, "isr": extra[p]}))
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            raise MetadataError("invalid_partitions", f"adding partitions to {name} failed: {results}")
        self.refresh_topic(name)
        return self.topics()[name]

    def _racks(self) -> dict[int, str]:
        return {b.broker_id: b.rack for b in self.brokers() if b.rack}

    def broker_ids(self) -> list[int]:
        # Read through: the watch-fed cache may lag just after a registration.
        return sorted(int(c) for c in self.zk.get_children("/brokers/ids"))

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.zk.ensure_path(f"/config/topics/{name}")
        self.zk.set(f"/config/topics/{name}", _dump({"version": 1, "config": configs}))
        self.refresh_topic(name)

    def broker_configs(self, entity: str) -> dict[str, str]:
        with self._lock:
            cached = self._broker_configs.get(entity)
        if cached is not None:
            return dict(cached)
        try:
            data, _ = self.zk.get(f"/config/brokers/{entity}")
        except NoNodeError:
            return {}
        return {str(k): str(v) for k, v in (_json(data) or {}).get("config", {}).items()}

    def set_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        path = f"/config/brokers/{entity}"
        self.zk.ensure_path(path)
        self.zk.set(path, _dump({"version": 1, "config": configs}))

    def allocate_producer_ids(self, count: int) -> int:
        path = "/latest_producer_id_block"
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                try:
                    self.zk.create(path, _dump({"version": 1, "broker": self.broker_id,
                                                "block_start": "0", "block_end": str(count - 1)}))
                    return 0
                except NodeExistsError:
                    continue
            start = int(_json(data)["block_end"]) + 1
            try:
                self.zk.set(path, _dump({"version": 1, "broker": self.broker_id,
                                         "block_start": str(start), "block_end": str(start + count - 1)}),
                            version=stat.version)
                return start
            except BadVersionError:
                continue


def stale_registration_wait_s(session_timeout_ms: int) -> float:
    """How long a broker waits for an earlier session's registration of its id to expire.

    ZooKeeper expires a session between its negotiated timeout and one tick later, and
    may negotiate up to its minSessionTimeout (two ticks) for a shorter request: 1.5 times
    the timeout covers both; twice the timeout plus 2 s leaves room for a loaded server.
    """
    return 2 * session_timeout_ms / 1000 + 2


def assign_replicas(brokers: list[int], partitions: int, replication_factor: int,
                    racks: dict[int, str] | None = None) -> dict[int, list[int]]:
    """Spread replicas and leaders evenly, like Kafka's assignment.

    With racks, brokers are first ordered alternating between racks (Kafka's
    rack-alternated list), so consecutive replicas of a partition land on
    different racks whenever there are enough racks.
    """
    if not brokers:
        raise MetadataError("broker_not_available", "no broker is registered")
    if replication_factor > len(brokers):
        raise MetadataError("invalid_replication_factor",
                            f"replication factor {replication_factor} is larger than the "
                            f"{len(brokers)} available brokers")
    ordered = sorted(brokers)
    if racks and all(b in racks for b in ordered):
        by_rack: dict[str, list[int]] = {}
        for b in ordered:
            by_rack.setdefault(racks[b], []).append(b)
        alternated: list[int] = []
        lists = [by_rack[r] for r in sorted(by_rack)]
        for i in range(max(len(x) for x in lists)):
            alternated += [x[i] for x in lists if i < len(x)]
        ordered = alternated
    n = len(ordered)
    out = {}
    for p in range(partitions):
        first = p % n
        shift = 1 + (p // n) % max(1, n - 1)
        replicas = [ordered[first]]
        for r in range(1, replication_factor):
            replicas.append(ordered[(first + shift * r) % n if n > 1 else first])
        # guard against duplicates when the shift wraps onto an earlier replica
        seen: list[int] = []
        for b in replicas + ordered[first:] + ordered[:first]:
            if b not in seen:
                seen.append(b)
            if len(seen) == replication_factor:
                break
        out[p] = seen
    return out
