"""Processes a benchmark starts (ZooKeeper, brokers), and their cleanup on every way out.

Each child runs in a session of its own, so a Ctrl-C in the terminal reaches
only the benchmark, whose ``finally`` stops the children in order. A child is
registered with its ``Processes`` the moment it is spawned, so one that starts
while a later one fails is stopped too. ``stop_on_sigterm()`` makes SIGTERM
end the benchmark like Ctrl-C: through the same ``finally`` blocks.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ZK_JAR = "/usr/share/java/zookeeper.jar"


def stop_on_sigterm() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    """One child process that listens on ``port`` once it is up."""

    def __init__(self, cmd: list[str], log: Path, port: int, name: str = "") -> None:
        self.cmd, self.log, self.port = cmd, log, port
        self.name = name or Path(cmd[0]).name
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=out, start_new_session=True)

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.name} was not started")
        return self.proc.pid

    def wait_listening(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                lines = self.log.read_text(errors="replace").strip().splitlines() \
                    if self.log.exists() else []
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} "
                                   f"before listening on {self.port}"
                                   + (f": {lines[-1].strip()}" if lines else ""))
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.5):
                    return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"nothing listens on {self.port} after {timeout:.0f}s (log: {self.log})")

    def peak_rss_mb(self) -> float | None:
        """The process's peak resident memory so far (VmHWM), in MiB; None if it is gone."""
        if self.proc is None:
            return None
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 10) -> None:
        """Signal the child's whole process group and wait for the child."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout)


class Processes:
    """Every child of a benchmark run; ``stop_all()`` (in a ``finally``) kills them all,
    newest first, so brokers go before the ZooKeeper they use."""

    def __init__(self) -> None:
        self.started: list[Proc] = []

    def start(self, proc: Proc, timeout: float = 60) -> Proc:
        self.started.append(proc)
        proc.spawn()
        proc.wait_listening(timeout)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.started):
            try:
                proc.kill()
            except Exception as e:  # noqa: BLE001 - keep stopping the others
                print(f"could not stop {proc.name} (pid {proc.proc.pid if proc.proc else '-'}): {e}",
                      file=sys.stderr)


def sched_seconds(pid: int) -> tuple[float, float] | None:
    """(CPU seconds, seconds spent runnable but waiting for a CPU) of a process's threads
    so far (/proc/PID/task/*/schedstat); None when they cannot be read."""
    run = wait = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                    fields = f.read().split()
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that ended since the listing (a log deletion's, a worker's)
            run += int(fields[0])
            wait += int(fields[1])
    except (OSError, IndexError, ValueError):
        return None
    return run / 1e9, wait / 1e9


def zookeeper(work: Path, tick_ms: int = 500) -> Proc:
    """Debian's ZooKeeper on a free loopback port, its data under ``work``."""
    port = free_port()
    data = work / "zkdata"
    data.mkdir(parents=True, exist_ok=True)
    cfg = work / "zoo.cfg"
    cfg.write_text(f"tickTime={tick_ms}\ndataDir={data}\nclientPort={port}\n"
                   "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                   "minSessionTimeout=1000\nmaxSessionTimeout=60000\n")
    return Proc(["java", "-Xmx256m", "-cp", f"/etc/zookeeper/conf:{ZK_JAR}", f"-Dzookeeper.log.dir={work}",
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)], work / "zookeeper.log", port,
                "ZooKeeper")


def broker(work: Path, broker_id: int, zk_connect: str | None, overrides: list[str]) -> Proc:
    """A ``dmq server`` on a free loopback port (with ZooKeeper when ``zk_connect``)."""
    port = free_port()
    cmd = [sys.executable, "-m", "dmq", "server", "--listen", f"127.0.0.1:{port}",
           "--data-dir", str(work / f"broker-{broker_id}"), "--broker-id", str(broker_id)]
    if zk_connect is not None:
        cmd += ["--zookeeper", zk_connect]
    for o in overrides:
        cmd += ["--override", o]
    return Proc(cmd, work / f"broker-{broker_id}.log", port, f"dmq broker {broker_id}")


def bootstrap_of(brokers: list[Proc]) -> str:
    return ",".join(f"127.0.0.1:{b.port}" for b in brokers)


def start_cluster(procs: Processes, work: Path, overrides: list[str], size: int = 3,
                  tick_ms: int = 2000) -> dict[int, Proc]:
    """ZooKeeper and ``size`` ``dmq server --zookeeper`` brokers (ids 1..size), registered
    with ``procs``; the brokers by id."""
    zk = procs.start(zookeeper(work, tick_ms=tick_ms))
    connect = f"127.0.0.1:{zk.port}/dmq"
    return {i: procs.start(broker(work, i, connect, overrides)) for i in range(1, size + 1)}
