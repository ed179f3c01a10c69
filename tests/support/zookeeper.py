"""Run Debian's ZooKeeper (package ``zookeeper``, Java 17) on a free loopback port for tests."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from support.broker import free_port
from support.signals import sigstop

if TYPE_CHECKING:
    from dmq.cluster.zookeeper import ZooKeeperMetadataStore

ZK_JAR = "/usr/share/java/zookeeper.jar"


def available() -> bool:
    return os.path.exists(ZK_JAR)


async def wait_for(cond: Callable[[], object], timeout: float = 15) -> None:
    """Poll ``cond`` on the event loop until it is true; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


async def connected_store(zk: ZooKeeperProcess, broker_id: int, chroot: str = "/dmq",
                          register: bool = True) -> ZooKeeperMetadataStore:
    """A broker's metadata store on ``zk`` (3 s sessions), registered unless told not to."""
    from dmq.cluster.metadata import BrokerInfo
    from dmq.cluster.zookeeper import ZooKeeperMetadataStore

    s = await ZooKeeperMetadataStore.connect(zk.connect + chroot, broker_id, session_timeout_ms=3000)
    if register:
        await s.register_broker(BrokerInfo(broker_id, "127.0.0.1", 9090 + broker_id))
    return s


class ZooKeeperProcess:
    def __init__(self, base: Path, port: int | None = None, host: str = "127.0.0.1",
                 command_prefix: list[str] | None = None, tls: tuple[Path, Path] | None = None,
                 sasl_users: dict[str, str] | None = None) -> None:
        """``host`` and ``command_prefix`` run it elsewhere, e.g. in a test network
        namespace (``ip netns exec NAME``, see support.netns). ``tls`` (a PEM key store with
        an unencrypted key, a PEM trust store) serves TLS only on the port, client
        certificates required (Netty's connection factory). ``sasl_users`` (name -> password)
        makes every client log in with SASL DIGEST-MD5 as one of them (enforce.auth)."""
        self.tls = tls
        self.jvm_flags: list[str] = []
        self.base = base
        self.host = host
        self.command_prefix = list(command_prefix or [])
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        (base / "data").mkdir(parents=True, exist_ok=True)
        listen = f"clientPort={self.port}\nclientPortAddress={host}\n"
        if tls is not None:
            listen = (f"secureClientPort={self.port}\nsecureClientPortAddress={host}\n"
                      "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
                      f"ssl.keyStore.location={tls[0]}\nssl.keyStore.type=PEM\n"
                      f"ssl.trustStore.location={tls[1]}\nssl.trustStore.type=PEM\n"
                      "ssl.clientAuth=need\n")
        if sasl_users:
            users = "".join(f'  user_{name}="{password}"\n' for name, password in sasl_users.items())
            (base / "server_jaas.conf").write_text(
                f"Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n{users};\n}};\n")
            self.jvm_flags.append(f"-Djava.security.auth.login.config={base / 'server_jaas.conf'}")
            listen += ("authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n"
                       "enforce.auth.enabled=true\nenforce.auth.schemes=sasl\n")
        (base / "zoo.cfg").write_text(
            f"tickTime=500\ndataDir={base / 'data'}\n{listen}admin.enableServer=false\n"
            "minSessionTimeout=1000\nmaxSessionTimeout=60000\n"
            "4lw.commands.whitelist=*\n")
        self.paused = False

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30) -> ZooKeeperProcess:
        log = open(self.base / "zookeeper.log", "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [*self.command_prefix, "java", "-Xmx256m", *self.jvm_flags, "-cp",
             # Debian's zookeeper.jar leaves netty-codec (TLS) off its class path
             f"/etc/zookeeper/conf:{ZK_JAR}" + (":/usr/share/java/netty-codec.jar" if self.tls else ""),
             f"-Dzookeeper.log.dir={self.base}",
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.base / "zoo.cfg")],
            stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._accepts() and (self.command_prefix or self.serving()):
                return self
            time.sleep(0.05)
        raise TimeoutError("ZooKeeper did not start")

    def serving(self) -> bool:
        """Whether the server answers requests: its port takes TCP connections as soon as
        it is bound, 0.15-0.2 s before it serves them on an idle machine (longer on a busy
        one), so ``srvr`` must report its mode."""
        if self.tls:
            return True  # the four-letter words go through the plaintext port only
        try:
            return "Mode:" in self.four_letter("srvr", 0.5)
        except OSError:
            return False

    def _accepts(self) -> bool:
        if self.command_prefix:  # elsewhere: probe from there
            probe = f"import socket; socket.create_connection(({self.host!r}, {self.port}), 0.5)"
            return subprocess.run([*self.command_prefix, sys.executable, "-c", probe],
                                  capture_output=True).returncode == 0
        try:
            with socket.create_connection((self.host, self.port), 0.5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            if self.paused:
                os.kill(self.proc.pid, signal.SIGCONT)
                self.paused = False
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def pause(self) -> None:
        """SIGSTOP the java process: TCP connections stay open, nothing answers."""
        assert self.proc is not None
        sigstop(self.proc.pid)
        self.paused = True

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def restart(self, timeout: float = 30) -> ZooKeeperProcess:
        """Start again on the same port and data dir (sessions are restored from the log)."""
        if self.proc is not None and self.paused:
            self.resume()
        self.stop()
        return self.start(timeout)

    def four_letter(self, command: str, timeout: float = 2.0) -> str:
        """A four-letter-word command (``cons``, ``mntr``, ``ruok``), whitelisted in zoo.cfg."""
        with socket.create_connection(("127.0.0.1", self.port), timeout) as s:
            s.sendall(command.encode())
            chunks = []
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks).decode(errors="replace")
