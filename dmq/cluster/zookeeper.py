"""ZooKeeperMetadataStore: cluster metadata in ZooKeeper with classic Kafka's znode layout.

Znodes (under an optional chroot, ``host:port/chroot``)::

    /cluster/id                                   {"version":"1","id":"<cluster id>"}
    /brokers/ids/<id>                 ephemeral   {"version":5,"host","port","endpoints","rack",...}
    /brokers/topics/<topic>                       {"version":3,"topic_id","partitions":{"0":[1,2]}}
    /brokers/topics/<topic>/partitions/<p>/state  {"controller_epoch","leader","leader_epoch","isr","version":1}
    /config/topics/<topic>                        {"version":1,"config":{...}}
    /config/brokers/<id> and /config/brokers/<default>   dynamic broker configs, same shape
    /config/groups/<group>                        group configs (dmq's: Kafka keeps them in KRaft), same shape
    /config/users/<user>                          SCRAM credentials, Kafka's: {"version":1,"config":{"SCRAM-SHA-256":"salt=...,iterations=4096"}}
    /controller                       ephemeral   {"version":1,"brokerid":N,"timestamp":"..."}
    /controller_epoch                             "<epoch>"
    /latest_producer_id_block                     {"version":1,"broker","block_start","block_end"}
    /admin/reassign_partitions                    {"version":1,"partitions":[{"topic","partition","replicas"}]}
    /admin/preferred_replica_election             {"version":1,"partitions":[{"topic","partition"}]}
    /admin/controlled_shutdown/<id>   ephemeral   a broker asks the controller to move its leadership away
    /admin/topic_epoch_floors/<topic>             dmq's: "<epoch>", the highest leader epoch a deleted
                                                  topic of that name reached (a new one starts above it)
    /kafka-acl..., /kafka-acl-extended...         ACLs and their change notifications (``dmq.cluster.zk.acls``)

(paths in ``dmq.cluster.zk.paths``, payloads in ``dmq.cluster.zk.codecs``).

Partition state znodes change only by version compare-and-set, so a stale
controller (older ``controller_epoch``) cannot overwrite a newer one's
decision. Every controller write also checks ``/controller_epoch`` at the znode
version its election wrote, in the same transaction (Kafka's
``wrapRequestWithControllerEpochCheck``): a deposed controller's writes fail
with ``ControllerMovedError`` whatever partition or admin znode they touch.

Threading: everything here runs on the event loop. ZooKeeper is reached only
through the async ``ZooKeeperClient`` (bounded calls: ZooKeeperUnavailable,
REQUEST_TIMED_OUT, when it does not answer). The cache (topics, brokers,
controller, broker configs, reassignments in flight, brokers shutting down)
is owned by the loop: watches post their events to the loop; one refresher
task re-reads what changed, in order, and replaces cache entries; reads
(``topics()``, ``brokers()``, ...) are synchronous and never touch ZooKeeper.
Writes are ``async`` and update the cache with what they wrote.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from dmq.cluster.acls import LITERAL as LITERAL_ACLS
from dmq.cluster.acls import PREFIXED as PREFIXED_ACLS
from dmq.cluster.acls import AclChange, AclMap, AclResource, StoredAce, decode_aces, encode_aces
from dmq.cluster.metadata import (
    DEFAULT_BROKER_ENTITY,
    BrokerInfo,
    ConfigChange,
    MetadataError,
    MetadataStore,
    PartitionState,
    TopicMetadata,
)
from dmq.cluster.zk import acls as zk_acls
from dmq.cluster.zk import codecs, paths
from dmq.cluster.zk.client import (
    CONNECTED,
    LOST,
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    Op,
    RolledBackError,
    Stat,
    ZooKeeperClient,
    ZooKeeperSasl,
    ZooKeeperTls,
)
from dmq.cluster.zk.codecs import topic_id_from_kafka, topic_id_to_kafka

log = logging.getLogger("dmq.zookeeper")

__all__ = ["ZooKeeperMetadataStore", "assign_replicas", "stale_registration_wait_s",
           "topic_id_from_kafka", "topic_id_to_kafka"]

# A refresh that failed (ZooKeeper unreachable) is tried again this much later.
REFRESH_RETRY_S = 1.0
# Pause after a failed registration after a lost session (times the failures, at most 2 s).
REREGISTER_BACKOFF_S = 0.5
# Pause before connecting again after kazoo gave up on a failed SASL login.
RELOGIN_BACKOFF_S = 1.0



class ControllerMovedError(MetadataError):
    """A controller write refused because ``/controller_epoch`` moved past the epoch this
    broker was elected in: another broker is the controller now (Kafka's
    ControllerMovedException). The caller stops acting as the controller."""

    def __init__(self, message: str) -> None:
        super().__init__("not_controller", message)


ELECTION_ATTEMPTS = 10  # controller election transactions tried before the caller retries later
DELETE_ATTEMPTS = 5  # transactions tried to delete a topic and record its epochs at once
MAX_ATOMIC_DELETE_PARTITIONS = 2000  # above this, one transaction may pass jute.maxbuffer
DELETE_EPOCH_MARGIN = 1000  # a floor written apart from the deletion keeps this far above

class ZooKeeperMetadataStore(MetadataStore):
    """Cluster metadata in ZooKeeper, cached on the event loop (see the module docstring).

    Create with ``await ZooKeeperMetadataStore.connect(...)``: it returns once the cache
    holds what ZooKeeper had. Only the event-loop thread may call its methods, except
    ``close`` (blocking: call it off the loop).
    """

    def __init__(self, client: ZooKeeperClient, broker_id: int,
                 on_change: Callable[[str], None] | None = None) -> None:
        self.client = client
        self.broker_id = broker_id
        self.on_change = on_change
        self.session_timeout_ms = client.session_timeout_ms
        self.cluster_id = ""
        self._topics: dict[str, TopicMetadata] = {}
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller = -1
        self.controller_epoch = 0
        # /controller_epoch's znode version as this broker's election wrote it; -1: never
        # elected. Controller writes check it (ControllerMovedError).
        self.controller_epoch_version = -1
        self._watched: set[str] = set()
        self.broker_epoch = -1
        self.adding_replicas: dict[str, dict[int, list[int]]] = {}
        self.removing_replicas: dict[str, dict[int, list[int]]] = {}
        self.registration: BrokerInfo | None = None
        self.session_lost = False
        self.session_expirations = 0  # sessions lost (Kafka's ZooKeeperExpiresPerSec), for metrics
        self.shutting_down: set[int] = set()
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._group_configs: dict[str, dict[str, str]] = {}
        self._group_config_watches: set[str] = set()
        self._acls: dict[AclResource, frozenset[StoredAce]] = {}
        # Change notifications read so far, per parent, with their creation times.
        self._acl_changes_seen: dict[str, dict[str, int]] = {
            zk_acls.ACL_CHANGES: {}, zk_acls.ACL_EXTENDED_CHANGES: {}}
        self._user_configs: dict[str, dict[str, str]] = {}
        self._user_config_watches: set[str] = set()
        self._refreshes: asyncio.Queue[tuple[str, Any, asyncio.Future[None] | None]] = asyncio.Queue()
        self._refresher: asyncio.Task[None] | None = None
        self._closed = False
        self._relogin: asyncio.Task[None] | None = None

    @classmethod
    async def connect(cls, connect: str, broker_id: int, session_timeout_ms: int = 18000,
                      on_change: Callable[[str], None] | None = None,
                      connection_timeout_ms: int | None = None,
                      tls: ZooKeeperTls | None = None,
                      sasl: ZooKeeperSasl | None = None) -> ZooKeeperMetadataStore:
        client = ZooKeeperClient(connect, session_timeout_ms, tls=tls, sasl=sasl)
        await client.start(max(10.0, (connection_timeout_ms or session_timeout_ms) / 1000))
        store = cls(client, broker_id, on_change)
        try:
            await store._setup()
        except BaseException:
            await asyncio.to_thread(store.close, 2.0)
            raise
        return store

    async def _setup(self) -> None:
        for path in paths.PERSISTENT_PARENTS:
            await self.client.ensure_path(path)
        self.cluster_id = await self._cluster_id()
        self._refresher = asyncio.ensure_future(self._refresh_loop())
        self.client.on_state(self._session_state)
        await self.client.watch_children(paths.BROKER_IDS, lambda c: self._enqueue("brokers", c))
        await self.client.watch_children(paths.BROKER_TOPICS, lambda c: self._enqueue("topics", c))
        await self.client.watch_data_forever(paths.CONTROLLER, self._controller_changed)
        await self.client.watch_children(paths.CONTROLLED_SHUTDOWN, self._shutdown_requests_changed)
        for admin in (paths.REASSIGN_PARTITIONS, paths.PREFERRED_REPLICA_ELECTION,
                      paths.LEADER_RESIGNATIONS):
            await self.client.watch_data_forever(admin, lambda d, s: self._notify("admin"))
        for entity in (DEFAULT_BROKER_ENTITY, str(self.broker_id)):
            await self.client.watch_data_forever(paths.broker_config(entity),
                                                 self._broker_config_watch(entity))
        await self.client.watch_children(paths.CONFIG_GROUPS, lambda c: self._enqueue("group_configs", c))
        await self._load_acls()
        for parent in (zk_acls.ACL_CHANGES, zk_acls.ACL_EXTENDED_CHANGES):
            await self.client.watch_children(
                parent, lambda c, parent=parent: self._enqueue("acl_changes", (parent, c)))  # type: ignore[misc]
        await self.client.watch_children(paths.CONFIG_USERS, lambda c: self._enqueue("user_configs", c))
        await self.synced()

    def close(self, timeout: float = 10.0) -> bool:
        """End the session (its ephemeral znodes go) within ``timeout`` seconds; blocking."""
        self._closed = True
        return self.client.close(timeout)

    async def stop(self, timeout: float = 10.0) -> bool:
        """``close`` from the event loop: the refresher stops, the session ends."""
        self._closed = True
        if self._refresher is not None:
            self._refresher.cancel()
        if self._relogin is not None:
            self._relogin.cancel()
        return await asyncio.to_thread(self.client.close, timeout)

    # ------------------------------------------------------------------ cache

    def _notify(self, what: str) -> None:
        if self.on_change is not None:
            self.on_change(what)

    def _session_state(self, state: str) -> None:
        if state == LOST:
            self.session_lost = True
            self.session_expirations += 1
            log.warning("ZooKeeper session lost: this broker's registration and watches are gone")
            self._notify("session_lost")
            if self.client.login_failed and not self._closed and (self._relogin is None or self._relogin.done()):
                self._relogin = asyncio.ensure_future(self._connect_again())
        elif state == CONNECTED and self.session_lost:
            self._notify("session")

    async def _connect_again(self) -> None:
        """kazoo stopped connecting after a failed SASL login: a connection dropped during
        the login ends there too (ZooKeeper restarting, a network blip), and the broker would
        stay out of ZooKeeper for good. As Kafka's ZooKeeperClient reinitializes after an
        AuthFailed once it has been connected, start a new connection, every
        RELOGIN_BACKOFF_S until one is up (a password changed under a running broker keeps
        failing, a line each time). The new session then re-registers the broker."""
        timeout_s = max(2.0, self.session_timeout_ms / 1000)
        log.warning("the login to ZooKeeper failed (kazoo stops there; a connection dropped during "
                    "the SASL exchange ends the same way); connecting again every %.0fs", RELOGIN_BACKOFF_S)
        while not self._closed and not self.client.connected:
            await asyncio.sleep(RELOGIN_BACKOFF_S)
            if self._closed:
                return
            try:
                await self.client.reconnect(timeout_s)
            except MetadataError as e:
                log.warning("connecting to ZooKeeper again failed: %s", e)
                continue
            log.info("connected to ZooKeeper again after the failed login")
            return

    def _broker_config_watch(self, entity: str) -> Callable[[bytes | None, Stat | None], None]:
        def changed(data: bytes | None, stat: Stat | None) -> None:
            self._broker_configs[entity] = codecs.decode_config(data)
            self._notify("configs")
        return changed

    def _group_config_watch(self, group_id: str) -> Callable[[bytes | None, Stat | None], None]:
        def changed(data: bytes | None, stat: Stat | None) -> None:
            if data is None:
                self._group_configs.pop(group_id, None)
            else:
                self._group_configs[group_id] = codecs.decode_config(data)
        return changed

    async def _watch_group_configs(self, children: list[str]) -> None:
        """Every group with configs is watched (for good: a group's znode may come back)."""
        for group_id in children:
            if group_id not in self._group_config_watches:
                await self.client.watch_data_forever(paths.group_config(group_id),
                                                     self._group_config_watch(group_id))
                self._group_config_watches.add(group_id)

    def _user_config_watch(self, user: str) -> Callable[[bytes | None, Stat | None], None]:
        def changed(data: bytes | None, stat: Stat | None) -> None:
            if data is None:
                self._user_configs.pop(user, None)
            else:
                self._user_configs[user] = codecs.decode_config(data)
        return changed

    async def _watch_user_configs(self, children: list[str]) -> None:
        """Every user with configs (SCRAM credentials) is watched, as group configs are."""
        for child in children:
            user = paths.desanitize(child)
            if user not in self._user_config_watches:
                await self.client.watch_data_forever(paths.user_config(user),
                                                     self._user_config_watch(user))
                self._user_config_watches.add(user)

    def _shutdown_requests_changed(self, children: list[str]) -> None:
        self.shutting_down = {int(c) for c in children if c.isdigit()}
        self._notify("admin")

    def _controller_changed(self, data: bytes | None, stat: Stat | None) -> None:
        self._controller = codecs.decode_controller(data)
        self._notify("controller")

    def _enqueue(self, kind: str, arg: Any) -> None:
        if not self._closed:
            self._refreshes.put_nowait((kind, arg, None))

    async def synced(self) -> None:
        """Wait until every refresh queued so far is done."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._refreshes.put_nowait(("sync", None, done))
        await done

    async def _refresh_loop(self) -> None:
        """Apply queued refreshes one at a time, so that cache updates keep their order."""
        while True:
            kind, arg, done = await self._refreshes.get()
            try:
                if kind == "brokers":
                    await self._load_brokers(arg)
                elif kind == "topics":
                    await self._load_topics(arg)
                elif kind == "topic":
                    await self.refresh_topic(arg)
                elif kind == "group_configs":
                    await self._watch_group_configs(arg)
                elif kind == "acl_changes":
                    await self._acl_changes(*arg)
                elif kind == "user_configs":
                    await self._watch_user_configs(arg)
            except MetadataError as e:
                log.warning("refreshing %s from ZooKeeper failed (%s); retrying", kind, e)
                # The broker list is read again when retried: the watch's list may be older
                # than one applied meanwhile, and it replaces the whole cache.
                asyncio.get_running_loop().call_later(REFRESH_RETRY_S, self._enqueue, kind,
                                                      None if kind == "brokers" else arg)
            except Exception:
                log.exception("refreshing %s from ZooKeeper failed", kind)
            finally:
                if done is not None and not done.done():
                    done.set_result(None)

    async def _cluster_id(self) -> str:
        new_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        try:
            await self.client.create(paths.CLUSTER_ID, codecs.encode_cluster_id(new_id), makepath=True)
        except NodeExistsError:
            pass
        data, _ = await self.client.get(paths.CLUSTER_ID)
        return codecs.decode_cluster_id(data)

    async def _load_brokers(self, children: list[str] | None) -> None:
        """Replace the broker cache with the registrations of ``children`` (None: read the
        list from ZooKeeper now)."""
        if children is None:
            children = await self.client.children(paths.BROKER_IDS)
        brokers: dict[int, BrokerInfo] = {}
        for child in children:
            found = await self.client.get_or_none(paths.broker(child))
            if found is not None and child.isdigit():
                brokers[int(child)] = codecs.decode_broker(int(child), found[0])
        self._brokers = brokers
        self._notify("brokers")

    async def _load_topics(self, children: list[str]) -> None:
        for name in children:
            await self.refresh_topic(name, notify=False)
        for gone in set(self._topics) - set(children):
            # The list may be older than a topic this broker just created: read it again.
            await self.refresh_topic(gone, notify=False)
        self._notify("topics")

    async def _watch(self, path: str, topic: str) -> None:
        """Refresh a topic when its assignment or config changes; a partition when its state does."""
        if path in self._watched:
            return
        self._watched.add(path)
        located = paths.parse_partition_state(path)
        first = [True]

        def changed(data: bytes | None, stat: Stat | None) -> None:
            if data is None:
                self._watched.discard(path)
                if located is None:
                    self._enqueue("topic", topic)
                return
            if located is not None:
                assert stat is not None
                self._state_changed(topic, located[1], data, int(stat.version))
            elif first[0]:
                first[0] = False  # the watch's first call: what was just read
            else:
                self._enqueue("topic", topic)

        try:
            await self.client.watch_data(path, changed)
        except MetadataError:
            self._watched.discard(path)
            raise

    def _state_changed(self, topic: str, partition: int, data: bytes, version: int) -> None:
        meta = self._topics.get(topic)
        if meta is None or partition not in meta.partitions:
            return
        old = meta.partitions[partition]
        if 0 <= version < old.version:
            return  # an older state than the one cached (a watch racing our own write)
        state = codecs.decode_state(data)
        meta.partitions[partition] = PartitionState(old.replicas, state.leader, state.leader_epoch,
                                                    state.isr, version)
        self._notify("topics")

    async def _read_topic(self, name: str) -> TopicMetadata | None:
        found = await self.client.get_or_none(paths.topic(name))
        if found is None:
            return None
        assignment = codecs.decode_assignment(found[0])
        partitions = {}
        for p, replicas in assignment.partitions.items():
            state_found = await self.client.get_or_none(paths.partition_state(name, p))
            if state_found is None:
                partitions[p] = PartitionState(list(replicas), -1, -1, [])
            else:
                s = codecs.decode_state(state_found[0])
                partitions[p] = PartitionState(list(replicas), s.leader, s.leader_epoch, s.isr,
                                               int(state_found[1].version))
        cfg = await self.client.get_or_none(paths.topic_config(name))
        configs = codecs.decode_config(cfg[0]) if cfg is not None else {}
        self.adding_replicas[name] = assignment.adding
        self.removing_replicas[name] = assignment.removing
        return TopicMetadata(name, assignment.topic_id, partitions, configs)

    async def refresh_topic(self, name: str, notify: bool = True) -> None:
        topic = await self._read_topic(name)
        if topic is None:
            self._topics.pop(name, None)
            self.adding_replicas.pop(name, None)
            self.removing_replicas.pop(name, None)
        else:
            old = self._topics.get(name)
            if old is not None and old.topic_id == topic.topic_id:
                # Keep a newer state a watch brought meanwhile (not of an earlier topic of
                # the same name: its state versions say nothing of this one's).
                for p, state in topic.partitions.items():
                    cached = old.partitions.get(p)
                    if cached is not None and cached.version > state.version:
                        topic.partitions[p] = PartitionState(state.replicas, cached.leader,
                                                             cached.leader_epoch, cached.isr,
                                                             cached.version)
            self._topics[name] = topic
            await self._watch(paths.topic(name), name)
            await self._watch(paths.topic_config(name), name)
            for p in topic.partitions:
                await self._watch(paths.partition_state(name, p), name)
        if notify:
            self._notify("topics")

    # ------------------------------------------------------------- interface

    def topics(self) -> dict[str, TopicMetadata]:
        return dict(self._topics)

    def brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.broker_id)

    def controller_id(self) -> int:
        return self._controller

    async def register_broker(self, info: BrokerInfo, wait_s: float | None = None) -> None:
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
        The wait starts over when this client reconnects (ZooKeeper restarted meanwhile).
        """
        body = codecs.encode_broker(info, int(time.time() * 1000), self.session_timeout_ms)
        path = paths.broker(info.broker_id)
        deadline: float | None = None
        connections = self.client.connections
        while True:
            if self.client.connections != connections:
                # Reconnected meanwhile: a restarted ZooKeeper gives every session, the
                # earlier one too, its full timeout again, so the wait starts over.
                connections, deadline = self.client.connections, None
            try:
                await self.client.create(path, body, ephemeral=True)
                break
            except NodeExistsError:
                pass
            found = await self.client.get_or_none(path)
            if found is None:
                continue  # it expired meanwhile
            data, stat = found
            owner = int(stat.ephemeralOwner)
            if owner == self.client.session_id:
                break
            old = codecs.load(data) or {}
            if deadline is None:
                bound = wait_s if wait_s is not None else stale_registration_wait_s(
                    max(codecs.broker_session_timeout_ms(data), self.session_timeout_ms))
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
            gone = asyncio.Event()
            if await self.client.exists(path, watch=gone.set) is not None:
                try:
                    await asyncio.wait_for(gone.wait(), min(remaining, 1.0))
                except TimeoutError:
                    pass
        _, stat = await self.client.get(path)
        self.broker_epoch = int(stat.czxid)
        self.registration = info
        self.session_lost = False

    async def reregister(self) -> bool:
        """After a session expiry: register again (the old ephemeral znode is gone), trying
        until it is done or the store closes (Kafka's RegisterBrokerAndReelect retries until
        connected); True once registered. Until then the broker takes no metadata change
        (``session_lost``): tried once, a call that timed out while the old registration
        expired left the broker unregistered and frozen for good, the partitions created
        meanwhile without a leader."""
        if self.registration is None:
            return False
        failures = 0
        told = 0.0
        while not self._closed:
            try:
                await self.register_broker(self.registration)
                if failures:
                    log.info("broker %d registered again after %d failed attempts", self.broker_id, failures)
                return True
            except MetadataError as e:  # ZooKeeperUnavailable, or the old registration still held
                failures += 1
                now = time.monotonic()
                if failures == 1 or now - told >= 30:
                    told = now
                    log.warning("registering broker %d again in ZooKeeper failed (%s); retrying until it "
                                "succeeds", self.broker_id, e)
                await asyncio.sleep(min(REREGISTER_BACKOFF_S * failures, 2.0))
        return False

    async def try_become_controller(self) -> bool:
        """Controller election: create the ephemeral /controller and bump /controller_epoch,
        in one transaction (Kafka's registerControllerAndIncrementControllerEpoch).

        Done in two steps, a create whose answer was lost (or an epoch write that timed
        out) left /controller held by this session with the election unfinished: the
        retry met NodeExists on its own znode and no broker was ever the controller while
        this session lived. Now a /controller held by this very session means the
        transaction went through: the epoch it wrote is read back and this broker is the
        controller (Kafka's checkControllerAndEpoch).
        """
        body = codecs.encode_controller(self.broker_id, int(time.time() * 1000))
        for _ in range(ELECTION_ATTEMPTS):
            found = await self.client.get_or_none(paths.CONTROLLER_EPOCH)
            if found is None:
                epoch, ops = 1, [Op.create(paths.CONTROLLER, body, ephemeral=True),
                                 Op.create(paths.CONTROLLER_EPOCH, b"1")]
            else:
                epoch = int(found[0].decode()) + 1
                ops = [Op.create(paths.CONTROLLER, body, ephemeral=True),
                       Op.set(paths.CONTROLLER_EPOCH, str(epoch).encode(), int(found[1].version))]
            results = await self.client.transaction(ops)
            if not any(isinstance(r, Exception) for r in results):
                break
            held = await self.client.get_or_none(paths.CONTROLLER)
            if held is None:
                continue  # the epoch moved (another election) or the holder just went: again
            if int(held[1].ephemeralOwner) != self.client.session_id:
                return False
            # Ours: an earlier attempt of this session went through.
            data, stat = await self.client.get(paths.CONTROLLER_EPOCH)
            self.controller_epoch = int(data.decode())
            self.controller_epoch_version = int(stat.version)
            log.info("broker %d is the controller (epoch %d, an earlier attempt's)", self.broker_id,
                     self.controller_epoch)
            return True
        else:
            raise MetadataError("unknown_server_error", f"controller election kept failing: {results}")
        _, stat = await self.client.get(paths.CONTROLLER_EPOCH)
        self.controller_epoch = epoch
        self.controller_epoch_version = int(stat.version)
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        return True

    def _controller_check(self) -> list[Op]:
        """The op that fences a deposed controller's write (nothing before an election)."""
        if self.controller_epoch_version < 0:
            return []
        return [Op.check(paths.CONTROLLER_EPOCH, self.controller_epoch_version)]

    async def _controller_write(self, op: Op, what: str) -> None:
        """One controller write, refused when /controller_epoch moved since this broker's
        election (ControllerMovedError) or when ``op`` itself fails (MetadataError)."""
        checks = self._controller_check()
        results = await self.client.transaction([*checks, op])
        # A failed transaction answers the failing op's error, RolledBackError before it.
        if checks and isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise ControllerMovedError(f"another broker is the controller now ({what} not written)")
        if isinstance(results[-1], Exception):
            raise MetadataError("not_controller", f"{what} changed meanwhile")

    async def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        found = await self.read_partition_state(topic, partition)
        return found[0] if found is not None else None

    async def _replicas(self, topic: str, partition: int) -> list[int]:
        found = await self.client.get_or_none(paths.topic(topic))
        if found is None:
            return []
        return list(codecs.decode_assignment(found[0]).partitions.get(partition, []))

    async def update_partition_state(self, topic: str, partition: int, state: PartitionState,
                                     expected_version: int, base_epoch: int = -1) -> int:
        """Compare-and-set a partition's leader/ISR; returns the new znode version.

        Raises MetadataError("not_controller") when the znode changed meanwhile or a
        newer controller wrote it: the caller's view is stale. With ``base_epoch``, also
        when the znode is in another leader epoch than the state the caller decided from
        (a topic deleted and created again has a new znode at version 0 too; its epochs
        start above the old topic's, so this tells them apart).
        """
        path = paths.partition_state(topic, partition)
        data, _ = await self.client.get(path)
        current = codecs.decode_state(data)
        if current.controller_epoch > self.controller_epoch:
            raise MetadataError("not_controller", "a newer controller owns this partition state")
        if base_epoch >= 0 and current.leader_epoch != base_epoch:
            raise MetadataError("not_controller", f"partition state of {topic}-{partition} is in leader epoch "
                                f"{current.leader_epoch}, not {base_epoch}")
        body = codecs.encode_state(codecs.LeaderAndIsr(self.controller_epoch, state.leader,
                                                       state.leader_epoch, state.isr))
        await self._controller_write(Op.set(path, body, expected_version), f"partition state of {topic}-{partition}")
        new_version = expected_version + 1
        self._state_changed(topic, partition, body, new_version)  # the watch may come later
        return new_version

    async def partition_state_version(self, topic: str, partition: int) -> int:
        _, stat = await self.client.get(paths.partition_state(topic, partition))
        return int(stat.version)

    async def read_partition_state(self, topic: str, partition: int) -> tuple[PartitionState, int] | None:
        """(state, znode version) read through from ZooKeeper."""
        found = await self.client.get_or_none(paths.partition_state(topic, partition))
        if found is None:
            return None
        data, stat = found
        s = codecs.decode_state(data)
        return (PartitionState(await self._replicas(topic, partition), s.leader, s.leader_epoch,
                               s.isr, int(stat.version)), int(stat.version))

    async def update_isr(self, topic: str, partition: int, leader: int, leader_epoch: int,
                         isr: list[int], expected_version: int) -> int | None:
        """A leader's ISR change (Kafka's AlterPartition in ZooKeeper mode).

        A compare-and-set against the state version the leader last saw: it is
        refused (None) when anyone changed the state since, say the controller
        dropping a dead broker from the ISR, so a leader never overwrites a state
        it has not seen; the watch then brings it the new one. Returns the new version;
        raises ZooKeeperUnavailable when ZooKeeper does not answer in time.
        """
        path = paths.partition_state(topic, partition)
        found = await self.client.get_or_none(path)
        if found is None:
            return None
        data, stat = found
        current = codecs.decode_state(data)
        if int(stat.version) != expected_version or current.leader != leader \
                or current.leader_epoch != leader_epoch:
            return None
        body = codecs.encode_state(codecs.LeaderAndIsr(current.controller_epoch, leader,
                                                       leader_epoch, list(isr)))
        try:
            new_version = int((await self.client.set(path, body, version=expected_version)).version)
        except (BadVersionError, NoNodeError):
            return None
        self._state_changed(topic, partition, body, new_version)
        return new_version

    async def request_controlled_shutdown(self, timeout: float | None = None) -> None:
        """Ask the controller to move this broker's leadership away; raises
        ZooKeeperUnavailable when ZooKeeper does not answer within ``timeout``."""
        try:
            await self.client.create(paths.controlled_shutdown(self.broker_id), b"", ephemeral=True,
                                     timeout=timeout)
        except NodeExistsError:
            pass

    async def read_admin(self, path: str) -> tuple[list[dict[str, Any]], int]:
        found = await self.client.get_or_none(path)
        if found is None:
            return [], -1
        return codecs.decode_admin(found[0]), int(found[1].version)

    async def write_admin(self, path: str, partitions: list[dict[str, Any]], version: int,
                          as_controller: bool = False) -> None:
        """Replace (or delete, when empty) an /admin request znode; version -1 creates it.
        ``as_controller``: the controller's write, fenced by its epoch (ControllerMovedError)."""
        body = codecs.encode_admin(partitions)
        if as_controller and version >= 0:
            op = Op.set(path, body, version) if partitions else Op.delete(path, version)
            try:
                await self._controller_write(op, path)
            except ControllerMovedError:
                raise
            except MetadataError:
                raise MetadataError("concurrent_transactions", f"{path} changed meanwhile") from None
            return
        if version < 0:
            if partitions:
                try:
                    await self.client.create(path, body, makepath=True)
                except NodeExistsError:
                    raise MetadataError("concurrent_transactions", f"{path} changed meanwhile") from None
            return
        try:
            if partitions:
                await self.client.set(path, body, version=version)
            else:
                await self.client.delete(path, version=version)
        except (BadVersionError, NoNodeError):
            raise MetadataError("concurrent_transactions", f"{path} changed meanwhile") from None

    async def request_reassignments(self, targets: dict[tuple[str, int], list[int]],
                                    cancelled: frozenset[tuple[str, int]] = frozenset()) -> None:
        """Merge into /admin/reassign_partitions. A cancelled move that the controller has
        started becomes an entry back to the replicas before it, marked ``"cancel": true``
        (dmq's addition to Kafka's format); one not yet started is simply dropped."""
        path = paths.REASSIGN_PARTITIONS
        for _ in range(5):
            current, version = await self.read_admin(path)
            merged: dict[tuple[str, int], dict[str, Any]] = {
                (str(e["topic"]), int(e["partition"])): e for e in current}
            for (t, p), r in targets.items():
                merged[(t, p)] = {"topic": t, "partition": p, "replicas": r}
            for t, p in cancelled:
                found = await self.read_assignment(t)
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
                await self.write_admin(path, entries, version)
                return
            except MetadataError as e:
                if e.error != "concurrent_transactions":
                    raise
                continue
        raise MetadataError("concurrent_transactions", "the reassignment request kept changing; retry")

    async def ongoing_reassignments(self) -> dict[tuple[str, int], tuple[list[int], list[int]]]:
        out: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
        for topic, parts in self.adding_replicas.items():
            removing = self.removing_replicas.get(topic, {})
            for p in set(parts) | set(removing):
                out[(topic, p)] = (parts.get(p, []), removing.get(p, []))
        pending, _ = await self.read_admin(paths.REASSIGN_PARTITIONS)
        for e in pending:  # accepted, not yet started by the controller
            tp = (str(e["topic"]), int(e["partition"]))
            if tp not in out:
                current = await self._replicas(*tp)
                target = list(e["replicas"])
                out[tp] = ([r for r in target if r not in current], [r for r in current if r not in target])
        return out

    async def request_preferred_elections(self, partitions: list[tuple[str, int]]) -> None:
        path = paths.PREFERRED_REPLICA_ELECTION
        for _ in range(5):
            current, version = await self.read_admin(path)
            wanted = {(str(e["topic"]), int(e["partition"])) for e in current} | set(partitions)
            try:
                await self.write_admin(path, [{"topic": t, "partition": p} for t, p in sorted(wanted)],
                                       version)
                return
            except MetadataError as e:
                if e.error != "concurrent_transactions":
                    raise
                continue

    async def request_leader_resignation(self, topic: str, partition: int, leader_epoch: int) -> None:
        """Ask the controller to elect another ISR member in this broker's place (dmq's own
        ``/admin/leader_resignations``: a list of {topic, partition, leader, leader_epoch});
        the controller ignores an entry whose leader or epoch is no longer current."""
        path = paths.LEADER_RESIGNATIONS
        entry = {"topic": topic, "partition": partition, "leader": self.broker_id,
                 "leader_epoch": leader_epoch}
        for _ in range(5):
            current, version = await self.read_admin(path)
            kept = [e for e in current if (e.get("topic"), e.get("partition")) != (topic, partition)]
            try:
                await self.write_admin(path, [*kept, entry], version)
                return
            except MetadataError as e:
                if e.error != "concurrent_transactions":
                    raise
        raise MetadataError("concurrent_transactions", f"{path} kept changing; retry")

    async def read_assignment(self, topic: str) -> tuple[dict[str, Any], int] | None:
        found = await self.client.get_or_none(paths.topic(topic))
        if found is None:
            return None
        return codecs.load(found[0]), int(found[1].version)

    async def write_assignment(self, topic: str, raw: dict[str, Any], version: int) -> None:
        """The controller's write of a topic's assignment (a reassignment step), fenced by
        its epoch (ControllerMovedError)."""
        await self._controller_write(Op.set(paths.topic(topic), codecs.dump(raw), version),
                                     f"assignment of {topic}")
        await self.refresh_topic(topic)

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: dict[str, str], assignment: dict[int, list[int]] | None = None
                           ) -> TopicMetadata:
        live = await self.broker_ids()
        if assignment is None:
            assignment = assign_replicas(live, num_partitions, replication_factor, self._racks())
        topic_id = uuid.uuid4().hex
        config_path, config = paths.topic_config(name), codecs.encode_config(configs)
        floor_path = paths.topic_epoch_floor(name)
        results: list[Any] = []
        for _ in range(3):
            # Above every epoch an earlier topic of this name reached (epoch_floor's docstring),
            # as the floor stands when the transaction commits: it checks the floor's version
            # (or, without one, that none appears: create and delete it in the same transaction).
            floor, floor_version = await self._epoch_floor(name)
            epoch = floor + 1
            guard = [Op.check(floor_path, floor_version)] if floor_version >= 0 else \
                [Op.create(floor_path, b"-1"), Op.delete(floor_path)]
            # The config goes in the same transaction as the topic: a losing concurrent create
            # (say, a Metadata auto-create racing CreateTopics) must not overwrite the winner's.
            config_exists = await self.client.exists(config_path) is not None
            ops = [*guard, Op.set(config_path, config) if config_exists else Op.create(config_path, config),
                   Op.create(paths.topic(name), codecs.encode_assignment(
                       codecs.Assignment(topic_id, dict(assignment)))),
                   Op.create(paths.partitions(name))]
            for p, replicas in assignment.items():
                ops.append(Op.create(paths.partition(name, p)))
                ops.append(Op.create(paths.partition_state(name, p), codecs.encode_state(
                    codecs.LeaderAndIsr(self.controller_epoch, replicas[0], epoch, list(replicas)))))
            results = await self.client.transaction(ops)
            if not any(isinstance(r, Exception) for r in results):
                break
            if await self.client.exists(paths.topic(name)) is not None:
                raise MetadataError("topic_already_exists", f"Topic '{name}' already exists.")
        else:
            raise MetadataError("unknown_server_error", f"creating {name} in ZooKeeper failed: {results}")
        return await self._refreshed(name)

    async def _refreshed(self, name: str) -> TopicMetadata:
        await self.refresh_topic(name)
        topic = self._topics.get(name)
        if topic is None:
            raise MetadataError("unknown_topic_or_partition", f"Topic {name} was deleted meanwhile.")
        return topic

    async def epoch_floor(self, name: str) -> int:
        """The highest leader epoch an earlier, deleted topic of this name reached (-1: none).

        Fetch v12 and OffsetForLeaderEpoch name topics, not topic ids. A broker whose
        metadata lags behind a topic deleted and created again would fetch, truncate
        against or write ISRs for the other incarnation in the same epochs (both starting
        at 0) and keep the old records as the new topic's, or have the leader count its
        position. A new topic's epochs start above the deleted one's instead, so each
        side's epoch check refuses the other (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH);
        clients that remember the old topic's epochs (KIP-320) take the new ones as newer.
        Kafka fences incarnations with topic ids (Fetch v13) instead."""
        return (await self._epoch_floor(name))[0]

    async def _epoch_floor(self, name: str) -> tuple[int, int]:
        """(floor, its znode's version), or (-1, -1) without one."""
        found = await self.client.get_or_none(paths.topic_epoch_floor(name))
        if found is None:
            return -1, -1
        try:
            return int(found[0].decode()), int(found[1].version)
        except ValueError:
            log.warning("ignoring the unreadable leader-epoch floor of topic %s: %r", name, found[0][:40])
            return -1, int(found[1].version)

    async def delete_topic(self, name: str) -> TopicMetadata:
        """Delete the topic's znodes and, in the same transaction, record the highest leader
        epoch its partitions reached (``epoch_floor``): the states' versions are checked, so
        no election can slip in between. After a few attempts that lost to changes (or for a
        topic too large for one transaction), the floor is written first, above the epochs
        last read, and the znodes deleted after it."""
        topic = self._topics.get(name) or await self._read_topic(name)
        if topic is None:
            raise MetadataError("unknown_topic_or_partition", "This server does not host this topic-partition.")
        floor_path = paths.topic_epoch_floor(name)
        floor = await self.epoch_floor(name)
        for attempt in range(DELETE_ATTEMPTS):
            if attempt:
                await asyncio.sleep(random.uniform(0.05, 0.2) * attempt)
            ops: list[Op] = []
            deletes: list[Op] = []
            try:
                indexes = await self.client.children(paths.partitions(name))
            except NoNodeError:
                indexes = []  # a topic written without partition znodes (say by an old Kafka tool)
            for index in indexes:
                found = await self.client.get_or_none(paths.partition_state(name, int(index)))
                if found is not None:
                    floor = max(floor, codecs.decode_state(found[0]).leader_epoch)
                    ops.append(Op.check(paths.partition_state(name, int(index)), int(found[1].version)))
                    deletes.append(Op.delete(paths.partition_state(name, int(index))))
                deletes.append(Op.delete(paths.partition(name, int(index))))
            if await self.client.exists(paths.partitions(name)) is not None:
                deletes.append(Op.delete(paths.partitions(name)))
            if await self.client.exists(paths.topic(name)) is None:
                break  # deleted meanwhile
            deletes.append(Op.delete(paths.topic(name)))
            body = str(floor).encode()
            ops.append(Op.set(floor_path, body) if await self.client.exists(floor_path) is not None
                       else Op.create(floor_path, body))
            if len(indexes) > MAX_ATOMIC_DELETE_PARTITIONS:
                break  # too large for one transaction: the fallback below
            results = await self.client.transaction(ops + deletes)
            if not any(isinstance(r, Exception) for r in results):
                break
        else:
            log.warning("deleting topic %s: its partition states kept changing; recording leader epoch %d "
                        "and above as used before deleting it", name, floor + DELETE_EPOCH_MARGIN)
        if await self.client.exists(paths.topic(name)) is not None:
            # Not deleted by a transaction: write a floor with a margin for elections that
            # may land between it and the deletion, then delete.
            body = str(floor + DELETE_EPOCH_MARGIN).encode()
            if await self.client.exists(floor_path) is not None:
                await self.client.set(floor_path, body)
            else:
                await self.client.create(floor_path, body)
            try:
                await self.client.delete(paths.topic(name), recursive=True)
            except NoNodeError:
                pass
        try:
            await self.client.delete(paths.topic_config(name))
        except NoNodeError:
            pass
        await self.refresh_topic(name)
        return topic

    async def create_partitions(self, name: str, total: int,
                                assignment: dict[int, list[int]] | None = None) -> TopicMetadata:
        """Written with the version of the topic's znode read here: a reassignment started
        meanwhile (or another change of the assignment) fails it."""
        found = await self.client.get_or_none(paths.topic(name))
        if found is None:
            raise MetadataError("unknown_topic_or_partition", f"The topic '{name}' does not exist.")
        data, stat = found
        raw = codecs.load(data)
        if raw.get("adding_replicas") or raw.get("removing_replicas"):
            raise MetadataError("reassignment_in_progress",
                                f"A partition reassignment is in progress for the topic '{name}'.")
        current = len(raw["partitions"])
        rf = len(next(iter(raw["partitions"].values())))
        live = await self.broker_ids()
        extra = dict(assignment) if assignment is not None else assign_replicas(live, total, rf, self._racks())
        for p in range(current, total):
            raw["partitions"][str(p)] = extra[p]
        ops = [Op.set(paths.topic(name), codecs.dump(raw), version=stat.version)]
        epoch = await self.epoch_floor(name) + 1  # as the topic's first partitions
        for p in range(current, total):
            ops.append(Op.create(paths.partition(name, p)))
            ops.append(Op.create(paths.partition_state(name, p), codecs.encode_state(
                codecs.LeaderAndIsr(self.controller_epoch, extra[p][0], epoch, extra[p]))))
        results = await self.client.transaction(ops)
        if any(isinstance(r, Exception) for r in results):
            raise MetadataError("invalid_partitions", f"adding partitions to {name} failed: {results}")
        return await self._refreshed(name)

    def _racks(self) -> dict[int, str]:
        return {b.broker_id: b.rack for b in self.brokers() if b.rack}

    async def broker_epochs(self) -> dict[int, int]:
        """Each registered broker's epoch (the czxid of its registration), read through: a
        broker registered again (restarted) has a greater one (Kafka's
        getAllBrokerAndEpochsInCluster)."""
        epochs: dict[int, int] = {}
        for child in await self.client.children(paths.BROKER_IDS):
            if child.isdigit():
                stat = await self.client.exists(paths.broker(child))
                if stat is not None:
                    epochs[int(child)] = int(stat.czxid)
        return epochs

    async def broker_ids(self) -> list[int]:
        # Read through: the watch-fed cache may lag just after a registration.
        return sorted(int(c) for c in await self.client.children(paths.BROKER_IDS) if c.isdigit())

    async def _update_config(self, path: str, change: ConfigChange, sensitive: bool = False,
                             remove_empty: bool = False,
                             may_create: Callable[[], Awaitable[None]] | None = None) -> dict[str, str]:
        """Compare-and-set of a config znode (its version), read again and retried when
        another writer (this broker or another) changed it in between: no change is lost.
        ``remove_empty``: an empty map removes the znode. ``may_create``: awaited before
        creating a missing znode (it raises MetadataError to refuse)."""
        while True:
            found = await self.client.get_or_none(path)
            current = codecs.decode_config(found[0]) if found is not None else {}
            new = dict(change(dict(current)))
            if found is not None and new == current:
                return new
            try:
                if found is None:
                    if not new and remove_empty:
                        return new
                    if may_create is not None:
                        await may_create()
                    await self.client.create(path, codecs.encode_config(new), makepath=True,
                                             sensitive=sensitive)
                elif not new and remove_empty:
                    await self.client.delete(path, version=found[1].version)
                else:
                    await self.client.set(path, codecs.encode_config(new), version=found[1].version)
            except (NodeExistsError, BadVersionError, NoNodeError):
                continue
            return new

    async def update_topic_configs(self, name: str, change: ConfigChange) -> dict[str, str]:
        async def topic_exists() -> None:
            if await self.client.exists(paths.topic(name)) is None:
                raise MetadataError("unknown_topic_or_partition", f"Topic {name} does not exist.")
        configs = await self._update_config(paths.topic_config(name), change, may_create=topic_exists)
        await self.refresh_topic(name)
        return configs

    def broker_configs(self, entity: str) -> dict[str, str]:
        return dict(self._broker_configs.get(entity, {}))

    async def update_broker_configs(self, entity: str, change: ConfigChange) -> dict[str, str]:
        configs = await self._update_config(paths.broker_config(entity), change, sensitive=True)
        if entity in self._broker_configs:  # watched: what the watch will bring
            self._broker_configs[entity] = dict(configs)
        return configs

    def group_configs(self, group_id: str) -> dict[str, str]:
        return dict(self._group_configs.get(group_id, {}))

    async def update_group_configs(self, group_id: str, change: ConfigChange) -> dict[str, str]:
        configs = await self._update_config(paths.group_config(group_id), change, remove_empty=True)
        if configs:
            self._group_configs[group_id] = dict(configs)  # what the watch will bring
        else:
            self._group_configs.pop(group_id, None)
        return configs

    # ------------------------------------------------------------------ ACLs

    def acls(self) -> AclMap:
        return self._acls

    def _set_acls(self, resource: AclResource, aces: frozenset[StoredAce]) -> None:
        if aces:
            self._acls[resource] = aces
        else:
            self._acls.pop(resource, None)
        self.acl_version += 1

    @staticmethod
    def _decode_aces(resource: AclResource, data: bytes | None) -> frozenset[StoredAce]:
        try:
            return decode_aces(data)
        except ValueError as e:
            log.warning("ignoring the ACLs of %s: %s", zk_acls.resource_path(resource), e)
            return frozenset()

    async def _load_acls(self) -> None:
        """Every ACL in ZooKeeper, read once at startup; notifications bring the changes.
        The notifications present now are taken as read: what they name is loaded here."""
        for parent in zk_acls.PARENTS:
            await self.client.ensure_path(parent)
        for parent, seen in self._acl_changes_seen.items():
            seen.update(dict.fromkeys(await self.client.children(parent), 0))
        acls: dict[AclResource, frozenset[StoredAce]] = {}
        for pattern in (LITERAL_ACLS, PREFIXED_ACLS):
            root = zk_acls.store_root(pattern)
            for resource_type in await self.client.children(root):
                for name in await self.client.children(f"{root}/{resource_type}"):
                    resource = AclResource(resource_type, pattern, name)
                    found = await self.client.get_or_none(zk_acls.resource_path(resource))
                    aces = self._decode_aces(resource, found[0] if found else None)
                    if aces:
                        acls[resource] = aces
        self._acls = acls
        self.acl_version += 1

    async def _acl_changes(self, parent: str, children: list[str]) -> None:
        """Re-read the resources that new change notifications name (Kafka's
        ZkNodeChangeNotificationListener); remove notifications older than 15 minutes."""
        seen = self._acl_changes_seen[parent]
        now_ms = int(time.time() * 1000)
        for child in sorted(c for c in children if c not in seen and c.startswith(zk_acls.CHANGE_PREFIX)):
            found = await self.client.get_or_none(f"{parent}/{child}")
            if found is not None:
                try:
                    resource = zk_acls.decode_change(parent, found[0])
                except ValueError as e:
                    log.warning("ignoring ACL change notification %s/%s: %s", parent, child, e)
                else:
                    current = await self.client.get_or_none(zk_acls.resource_path(resource))
                    self._set_acls(resource, self._decode_aces(resource, current[0] if current else None))
            # Only once read: a refresh that failed comes back to it.
            seen[child] = found[1].ctime if found is not None else 0
        present = set(children)
        for child, ctime in list(seen.items()):
            if child not in present:
                del seen[child]
            elif 0 < ctime < now_ms - zk_acls.CHANGE_EXPIRATION_MS:
                try:
                    await self.client.delete(f"{parent}/{child}")
                except NoNodeError:
                    pass

    async def update_acls(self, resource: AclResource, change: AclChange) -> frozenset[StoredAce]:
        """Compare-and-set on the resource's znode (retried on a concurrent change), then a
        change notification that every broker (this one too) acts on."""
        if "/" in resource.name or "\x00" in resource.name or resource.name in (".", ".."):
            raise MetadataError("invalid_request",
                                f"this resource name cannot be stored in ZooKeeper (a znode name): {resource.name!r}")
        path = zk_acls.resource_path(resource)
        while True:
            found = await self.client.get_or_none(path)
            current = self._decode_aces(resource, found[0]) if found is not None else frozenset()
            new = change(current)
            if new == current:
                return new
            try:
                if found is None:
                    await self.client.create(path, encode_aces(new), makepath=True)
                elif new:
                    await self.client.set(path, encode_aces(new), version=found[1].version)
                else:
                    await self.client.delete(path, version=found[1].version)
            except (NodeExistsError, BadVersionError, NoNodeError):
                continue
            break
        await self.client.create(
            f"{zk_acls.change_parent(resource.pattern_type)}/{zk_acls.CHANGE_PREFIX}",
            zk_acls.encode_change(resource), sequence=True)
        self._set_acls(resource, new)  # what the notification will bring
        return new

    def user_configs(self, user: str) -> dict[str, str]:
        return dict(self._user_configs.get(user, {}))

    def users(self) -> list[str]:
        return sorted(self._user_configs)

    async def set_user_configs(self, user: str, configs: dict[str, str]) -> None:
        path = paths.user_config(user)
        if not configs:
            try:
                await self.client.delete(path)
            except NoNodeError:
                pass
            self._user_configs.pop(user, None)
            return
        try:
            await self.client.set(path, codecs.encode_config(configs))
        except NoNodeError:
            await self.client.create(path, codecs.encode_config(configs), makepath=True, sensitive=True)
        self._user_configs[user] = dict(configs)  # what the watch will bring

    async def allocate_producer_ids(self, count: int) -> int:
        path = paths.PRODUCER_ID_BLOCK
        while True:
            found = await self.client.get_or_none(path)
            if found is None:
                try:
                    await self.client.create(path, codecs.encode_producer_id_block(self.broker_id, 0, count))
                    return 0
                except NodeExistsError:
                    continue
            data, stat = found
            start = codecs.decode_producer_id_block_end(data) + 1
            try:
                await self.client.set(path, codecs.encode_producer_id_block(self.broker_id, start, count),
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
