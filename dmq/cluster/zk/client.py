"""dmq's ZooKeeper client: the one module that uses kazoo.

``ZooKeeperClient`` offers ``async`` get/set/create/delete/children/exists and
transactions. Each call runs kazoo on one executor and is bounded by a
timeout: while ZooKeeper is unreachable a call fails with
``ZooKeeperUnavailable`` (a MetadataError, REQUEST_TIMED_OUT) within the
bound instead of hanging, and the event loop never waits on ZooKeeper.
Watches and session-state changes arrive on kazoo's thread and are only
posted to the event loop (``call_soon_threadsafe``): their callbacks run on
the loop. Any task on the loop may call any method; ``start`` and ``close``
are the broker's.

Reconnection: kazoo's default connection retry doubles its pause up to an
hour, so after an outage of a few tens of seconds a broker came back long
after ZooKeeper did and its session had expired meanwhile (ZooKeeper restores
sessions from its log on restart and gives each its full timeout again: a
client that reconnects within that timeout keeps its session, its ephemeral
registration and its watches). Here attempts stay a fraction of the session
timeout apart for ever, and one TCP connect attempt and the wait for the
answer to its Connect request are bounded the same way (a third of the
session timeout), so a server that does not answer, or accepts connections
before it serves them, does not eat the session either.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError as BadVersionError
from kazoo.exceptions import KazooException
from kazoo.exceptions import NodeExistsError as NodeExistsError
from kazoo.exceptions import NoNodeError as NoNodeError
from kazoo.exceptions import RolledBackError as RolledBackError
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol.serialization import Connect
from kazoo.protocol.states import KeeperState
from kazoo.protocol.states import ZnodeStat as Stat
from kazoo.retry import KazooRetry
from kazoo.security import make_acl

from dmq.cluster.metadata import MetadataError
from dmq.config import BrokerConfig

log = logging.getLogger("dmq.zookeeper")


class ZooKeeperUnavailable(MetadataError):
    """ZooKeeper did not answer in time (or the connection is gone): Kafka's REQUEST_TIMED_OUT."""

    def __init__(self, message: str) -> None:
        super().__init__("request_timed_out", message)

# At most one warning about timed-out calls per this many seconds.
TIMEOUT_WARN_INTERVAL_S = 10.0

# Longest pause between two reconnect attempts, whatever the session timeout.
MAX_RECONNECT_PAUSE_S = 0.5
RECONNECT_JITTER = 0.2


def reconnect_pause_s(session_timeout_ms: int) -> float:
    """The cap on the pause between reconnect attempts (before jitter)."""
    return min(MAX_RECONNECT_PAUSE_S, session_timeout_ms / 1000 / 4)


def connection_retry(session_timeout_ms: int) -> KazooRetry:
    """Retry connecting for ever, never more than a fraction of the session timeout apart.

    kazoo sleeps ``delay * jitter`` with ``jitter`` up to ``1 + max_jitter`` and caps the
    next delay at ``max_delay``: the longest pause is ``max_delay * (1 + max_jitter)``,
    at most 0.6 s and a third of the session timeout.
    """
    return KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_jitter=RECONNECT_JITTER,
                      max_delay=reconnect_pause_s(session_timeout_ms))


class _BoundedConnectHandler(SequentialThreadingHandler):
    """kazoo's threading handler with a TCP connect timeout of at most ``limit_s``
    (kazoo uses the whole session timeout per attempt)."""

    def __init__(self, limit_s: float) -> None:
        super().__init__()
        self.limit_s = limit_s

    def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        timeout = kwargs.get("timeout")
        kwargs["timeout"] = self.limit_s if timeout is None else min(timeout, self.limit_s)
        return super().create_connection(*args, **kwargs)


@dataclass(frozen=True, slots=True)
class ZooKeeperTls:
    """TLS to ZooKeeper (KIP-515's ``zookeeper.ssl.*``): the CAs to trust and the broker's
    key and certificate (one PEM file) for ZooKeeper's ``ssl.clientAuth``."""

    cafile: str | None
    certfile: str | None = None
    password: str | None = field(default=None, repr=False)
    check_hostname: bool = True

    @staticmethod
    def from_config(config: BrokerConfig) -> ZooKeeperTls | None:
        """None unless ``zookeeper.ssl.client.enable``; ValueError for a missing file."""
        if not config["zookeeper.ssl.client.enable"]:
            return None
        paths = {}
        for kind in ("keystore", "truststore"):
            location = config[f"zookeeper.ssl.{kind}.location"]
            if location and not os.path.isfile(str(location)):
                raise ValueError(f"zookeeper.ssl.{kind}.location {location} is not a readable file")
            paths[kind] = str(location) if location else None
        password = config["zookeeper.ssl.keystore.password"]
        return ZooKeeperTls(paths["truststore"], paths["keystore"], str(password) if password else None,
                            bool(config["zookeeper.ssl.endpoint.identification.enable"]))


@dataclass(frozen=True, slots=True)
class ZooKeeperSasl:
    """A SASL (DIGEST-MD5) login to ZooKeeper, as the JAAS Client section's
    DigestLoginModule gives Kafka's brokers (``zookeeper.sasl.jaas.config``); with
    ``set_acl`` (``zookeeper.set.acl``) the znodes this broker creates get Kafka's secure
    ACLs: all rights for this identity, read for everyone, none for anyone else on
    sensitive znodes (``create(..., sensitive=True)``: credentials, broker configs)."""

    username: str
    password: str = field(repr=False)
    set_acl: bool = False

    def acls(self, sensitive: bool) -> list[Any]:
        owner = make_acl("sasl", self.username, all=True)
        return [owner] if sensitive else [owner, make_acl("world", "anyone", read=True)]

    @staticmethod
    def from_config(config: BrokerConfig) -> ZooKeeperSasl | None:
        """None without ``zookeeper.sasl.jaas.config``; ValueError says what is wrong
        (never the values)."""
        text = config["zookeeper.sasl.jaas.config"]
        if not text:
            return None
        from dmq.protocol.jaas import JaasError, parse_jaas

        try:
            entry = parse_jaas(str(text))
        except JaasError as e:
            raise ValueError(f"zookeeper.sasl.jaas.config: {e}") from None
        if not entry.login_module.endswith("DigestLoginModule") or not entry.username \
                or entry.password is None:
            raise ValueError("zookeeper.sasl.jaas.config must be 'org.apache.zookeeper.server.auth."
                             "DigestLoginModule required username=\"...\" password=\"...\";'")
        return ZooKeeperSasl(entry.username, entry.password, bool(config["zookeeper.set.acl"]))


def new_kazoo_client(connect: str, session_timeout_ms: int, tls: ZooKeeperTls | None = None,
                     sasl: ZooKeeperSasl | None = None) -> KazooClient:
    """A KazooClient for ``connect`` (``host:port[,...][/chroot]``), not yet started."""
    session_s = session_timeout_ms / 1000
    secure: dict[str, Any] = {}
    if tls is not None:
        secure = {"use_ssl": True, "verify_certs": True, "check_hostname": tls.check_hostname,
                  "ca": tls.cafile, "certfile": tls.certfile, "keyfile": tls.certfile,
                  "keyfile_password": tls.password}
    if sasl is not None:
        secure["sasl_options"] = {"mechanism": "DIGEST-MD5", "username": sasl.username,
                                  "password": sasl.password}
        if sasl.set_acl:
            secure["default_acl"] = sasl.acls(sensitive=False)
    limit_s = max(0.5, session_s / 3)
    client = KazooClient(hosts=connect, timeout=session_s, connection_retry=connection_retry(session_timeout_ms),
                         handler=_BoundedConnectHandler(limit_s), **secure)
    _bound_connect_handshake(client, limit_s)
    return client


def _bound_connect_handshake(client: KazooClient, limit_s: float) -> None:
    """Wait at most ``limit_s`` for the answer to the session's Connect request. kazoo waits
    the whole session timeout (over the number of hosts): a ZooKeeper that accepted the TCP
    connection but did not serve yet (restarting) held a broker's reconnection for 6 s, and
    its session expired although ZooKeeper had been back for most of that time (a flaky
    test_brokers_reconnect_promptly_after_zookeeper_outage). The one place dmq reaches into
    kazoo's connection handler."""
    connection = client._connection
    invoke = connection._invoke

    def bounded(timeout: float, request: Any, xid: int | None = None) -> Any:
        if isinstance(request, Connect):
            timeout = min(timeout, limit_s)
        return invoke(timeout, request, xid)

    connection._invoke = bounded


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a transaction: ``create`` (data), ``set`` (data, version),
    ``delete`` (version) or ``check`` (version)."""

    kind: str
    path: str
    data: bytes = b""
    version: int = -1
    ephemeral: bool = False

    @staticmethod
    def create(path: str, data: bytes = b"", ephemeral: bool = False) -> Op:
        return Op("create", path, data, ephemeral=ephemeral)

    @staticmethod
    def set(path: str, data: bytes, version: int = -1) -> Op:
        return Op("set", path, data, version)

    @staticmethod
    def delete(path: str, version: int = -1) -> Op:
        return Op("delete", path, version=version)

    @staticmethod
    def check(path: str, version: int) -> Op:
        return Op("check", path, version=version)


class ZooKeeperClient:
    """Async access to one ZooKeeper session.

    Invariants: kazoo is called only on ``self.executor``'s threads (and kazoo's own);
    every call returns or raises within ``timeout_s`` (plus scheduling); callbacks given
    to ``watch_data``, ``watch_children`` and ``on_state`` run on the event loop.
    """

    def __init__(self, connect: str, session_timeout_ms: int, timeout_s: float | None = None,
                 tls: ZooKeeperTls | None = None, sasl: ZooKeeperSasl | None = None) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.timeout_s = timeout_s if timeout_s is not None else session_timeout_ms / 1000
        self.kazoo = new_kazoo_client(connect, session_timeout_ms, tls, sasl)
        # ACLs of sensitive znodes (zookeeper.set.acl); None: the default ones
        self.sensitive_acl = sasl.acls(sensitive=True) if sasl is not None and sasl.set_acl else None
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="zk")
        # Calls that timed out since the last warning about them, and when that was: a
        # request answered REQUEST_TIMED_OUT leaves a trace in the log (at most one line
        # per TIMEOUT_WARN_INTERVAL_S) instead of nothing.
        self._timeouts = 0
        self._timeout_warned_at = -TIMEOUT_WARN_INTERVAL_S
        self.loop: asyncio.AbstractEventLoop | None = None
        # How many times the session (re)connected; kazoo's thread counts, anyone reads.
        self.connections = 0
        # kazoo's KeeperState when the session was last LOST ("EXPIRED_SESSION",
        # "AUTH_FAILED", "CLOSED"): kazoo moves on to CLOSED right after, so it is taken in
        # the listener, on kazoo's thread, while it still says why.
        self.lost_by = ""
        self.kazoo.add_listener(self._count_connection)

    def _count_connection(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self.connections += 1
        elif state == KazooState.LOST:
            self.lost_by = str(self.kazoo.client_state)

    # ------------------------------------------------------------ lifecycle

    async def start(self, timeout_s: float) -> None:
        self.loop = asyncio.get_running_loop()
        await self._run(lambda: self.kazoo.start(timeout=timeout_s), timeout_s + 1, "connect")

    @property
    def session_id(self) -> int:
        return int(self.kazoo.client_id[0]) if self.kazoo.client_id else 0

    @property
    def connected(self) -> bool:
        return bool(self.kazoo.connected)

    @property
    def login_failed(self) -> bool:
        """Whether kazoo gave up for good on a refused SASL login (KeeperState.AUTH_FAILED)
        and is not connected since. kazoo cannot tell a wrong password from a connection
        dropped in the middle of the SASL exchange (ZooKeeper drops connections that fail
        to log in): both end there."""
        return self.lost_by == str(KeeperState.AUTH_FAILED) and not self.kazoo.connected

    async def reconnect(self, timeout_s: float) -> None:
        """Start a new connection (and session) after kazoo stopped connecting; raises
        ZooKeeperUnavailable if it is not up within ``timeout_s``. (Not kazoo's ``stop``
        first: with the connection loop already ended, the close request it queues would
        end the next connection.)"""
        def start() -> None:
            try:
                self.kazoo.start(timeout=timeout_s)
            except self.kazoo.handler.timeout_exception:
                raise TimeoutError from None
        await self._run(start, timeout_s + 1, "reconnect")

    @property
    def state(self) -> str:
        """The session's state as kazoo last saw it: "CONNECTED", "SUSPENDED" (disconnected,
        the session may still live) or "LOST" (expired or closed); read by metrics."""
        return str(self.kazoo.state)

    def close(self, timeout: float = 10.0) -> bool:
        """End the session (its ephemeral znodes go), waiting at most ``timeout`` seconds.

        kazoo's stop joins its callback thread, which may be blocked while the server is
        unreachable: the close runs on a daemon thread so a broker shutting down during an
        outage is never held by it. False when it did not finish in time. Blocking: call
        it off the event loop.
        """
        def stop() -> None:
            try:
                self.kazoo.stop()
                self.kazoo.close()
            except Exception as e:  # noqa: BLE001 - closing anyway
                log.warning("closing the ZooKeeper session: %s", e)

        closer = threading.Thread(target=stop, name="zk-close", daemon=True)
        closer.start()
        closer.join(timeout)
        self.executor.shutdown(wait=False, cancel_futures=True)
        if closer.is_alive():
            log.warning("the ZooKeeper session did not close within %.0fs; leaving it to expire",
                        timeout)
            return False
        return True

    # --------------------------------------------------------------- calls

    async def _run(self, fn: Callable[[], Any], timeout: float, what: str) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(loop.run_in_executor(self.executor, fn), timeout + 0.5)
        except TimeoutError:
            self._timed_out(what, timeout)
            raise ZooKeeperUnavailable(f"ZooKeeper did not answer {what} within {timeout:.1f}s") from None
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except KazooException as e:
            raise ZooKeeperUnavailable(f"ZooKeeper {what} failed: {type(e).__name__}") from None
        except RuntimeError as e:  # the executor is shut down: the broker is stopping
            raise ZooKeeperUnavailable(f"ZooKeeper {what}: {e}") from None

    def _timed_out(self, what: str, timeout: float) -> None:
        self._timeouts += 1
        now = time.monotonic()
        if now - self._timeout_warned_at >= TIMEOUT_WARN_INTERVAL_S:
            log.warning("ZooKeeper did not answer %s within %.1fs (session %s; %d call(s) timed out "
                        "since the last such warning; %d waiting for a ZooKeeper thread)", what, timeout,
                        self.state, self._timeouts, self.executor._work_queue.qsize())
            self._timeouts = 0
            self._timeout_warned_at = now

    async def _call(self, what: str, start: Callable[[], Any], timeout: float | None) -> Any:
        bound = self.timeout_s if timeout is None else timeout

        def wait() -> Any:
            try:
                return start().get(timeout=bound)
            except self.kazoo.handler.timeout_exception:
                raise TimeoutError from None
        return await self._run(wait, bound, what)

    async def get(self, path: str, timeout: float | None = None) -> tuple[bytes, Stat]:
        result: tuple[bytes, Stat] = await self._call(
            f"get {path}", lambda: self.kazoo.get_async(path), timeout)
        return result

    async def get_or_none(self, path: str) -> tuple[bytes, Stat] | None:
        try:
            return await self.get(path)
        except NoNodeError:
            return None

    async def exists(self, path: str, watch: Callable[[], None] | None = None) -> Stat | None:
        """The znode's stat, or None; ``watch`` (on the loop) fires once when it changes."""
        watcher = None if watch is None else (lambda _event: self._post(watch))
        result: Stat | None = await self._call(
            f"exists {path}", lambda: self.kazoo.exists_async(path, watch=watcher), None)
        return result

    async def children(self, path: str) -> list[str]:
        result: list[str] = await self._call(
            f"children {path}", lambda: self.kazoo.get_children_async(path), None)
        return result

    async def create(self, path: str, data: bytes = b"", ephemeral: bool = False,
                     makepath: bool = False, timeout: float | None = None,
                     sequence: bool = False, sensitive: bool = False) -> str:
        """``sensitive``: with zookeeper.set.acl, nobody but this broker's identity may read it."""
        acl = self.sensitive_acl if sensitive else None
        result: str = await self._call(
            f"create {path}",
            lambda: self.kazoo.create_async(path, data, acl=acl, ephemeral=ephemeral, makepath=makepath,
                                            sequence=sequence),
            timeout)
        return result

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        result: Stat = await self._call(
            f"set {path}", lambda: self.kazoo.set_async(path, data, version=version), None)
        return result

    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        if recursive:
            await self._run(lambda: self.kazoo.delete(path, recursive=True), self.timeout_s,
                            f"delete {path}")
            return
        await self._call(f"delete {path}", lambda: self.kazoo.delete_async(path, version=version),
                         None)

    async def ensure_path(self, path: str) -> None:
        await self._run(lambda: self.kazoo.ensure_path(path), self.timeout_s, f"ensure {path}")

    async def transaction(self, ops: Sequence[Op]) -> list[Any]:
        """Commit ``ops`` atomically; one result per op, exceptions for failed ones (all fail)."""
        def start() -> Any:
            tx = self.kazoo.transaction()
            for op in ops:
                if op.kind == "create":
                    tx.create(op.path, op.data, ephemeral=op.ephemeral)
                elif op.kind == "set":
                    tx.set_data(op.path, op.data, version=op.version)
                elif op.kind == "delete":
                    tx.delete(op.path, version=op.version)
                else:
                    tx.check(op.path, op.version)
            return tx.commit_async()
        result: list[Any] = await self._call("transaction", start, None)
        return result

    # ------------------------------------------------------- watches, state

    def _post(self, fn: Callable[..., Any], *args: Any) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args)

    async def watch_data(self, path: str, callback: Callable[[bytes | None, Stat | None], bool | None]
                         ) -> None:
        """Call ``callback(data, stat)`` on the loop now and on every change; data is None
        once the znode is gone, and the watch ends then."""
        def changed(data: bytes | None, stat: Stat | None) -> bool:
            self._post(callback, data, stat)
            return data is not None
        await self._run(lambda: self.kazoo.DataWatch(path, changed), self.timeout_s, f"watch {path}")

    async def watch_data_forever(self, path: str,
                                 callback: Callable[[bytes | None, Stat | None], None]) -> None:
        """As ``watch_data``, but the watch stays while the znode is absent."""
        def changed(data: bytes | None, stat: Stat | None) -> None:
            self._post(callback, data, stat)
        await self._run(lambda: self.kazoo.DataWatch(path, changed), self.timeout_s, f"watch {path}")

    async def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> None:
        def changed(children: list[str]) -> None:
            self._post(callback, list(children))
        await self._run(lambda: self.kazoo.ChildrenWatch(path, changed), self.timeout_s,
                        f"watch {path}")

    def on_state(self, callback: Callable[[str], None]) -> None:
        """``callback`` gets "LOST", "SUSPENDED" or "CONNECTED" on the loop."""
        def listener(state: str) -> None:
            self._post(callback, str(state))
        self.kazoo.add_listener(listener)


LOST, SUSPENDED, CONNECTED = str(KazooState.LOST), str(KazooState.SUSPENDED), str(KazooState.CONNECTED)
