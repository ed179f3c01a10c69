"""Drive ``dmq cluster`` as a user would, in a temporary directory on free ports.

Every process the CLI starts has the cluster directory in its command line
(ZooKeeper's zoo.cfg, the brokers' --data-dir, the CLI's own --data-dir), so
``processes_under(base)`` finds what is left of a run and ``close()`` kills it
(by pid), whatever the code under test did.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from support.cluster import FAST
from support.ports import free_port, free_port_block


def _cmdline(pid: int) -> str | None:
    """The command line of a live (not zombie) process, or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat[stat.rindex(")") + 2] in "ZX":
            return None
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError, IndexError):
        return None


def processes_under(base: Path) -> dict[int, str]:
    """Live processes (other than this one) whose command line names ``base``."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            cmd = _cmdline(int(entry))
            if cmd is not None and str(base) in cmd:
                found[int(entry)] = cmd
    return found


class CliCluster:
    """A cluster run by ``dmq cluster`` in ``base``, with brokers on base_port .. base_port + n - 1."""

    def __init__(self, base: Path, brokers: int = 3, overrides: dict[str, str] | None = None) -> None:
        self.base = base
        self.n = brokers
        self.base_port = free_port_block(brokers)
        self.zk_port = free_port()
        self.overrides = {**FAST, **(overrides or {})}
        self.supervisor: subprocess.Popen[bytes] | None = None
        self.out_path = base.parent / f"{base.name}-supervisor.out"

    @property
    def ports(self) -> dict[int, int]:
        return {i: self.base_port + i - 1 for i in range(1, self.n + 1)}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def start_args(self) -> list[str]:
        args = ["cluster", "start", "--brokers", str(self.n), "--data-dir", str(self.base),
                "--base-port", str(self.base_port), "--zookeeper-port", str(self.zk_port)]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        return args

    def env(self) -> dict[str, str]:
        return {**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}

    def run(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        """``dmq ARGS`` to completion (``--data-dir`` is the caller's to give)."""
        res = subprocess.run([sys.executable, "-m", "dmq", *args], capture_output=True,
                             timeout=timeout, env=self.env(), stdin=subprocess.DEVNULL)
        return subprocess.CompletedProcess(res.args, res.returncode, res.stdout.decode(),
                                           res.stderr.decode())

    def cluster(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        """``dmq cluster ARGS --data-dir BASE``."""
        return self.run("cluster", *args, "--data-dir", str(self.base), timeout=timeout)

    def start_foreground(self) -> subprocess.Popen[bytes]:
        """``dmq cluster start`` as a terminal's foreground job: in a process group of its
        own (so a test can send it the terminal's Ctrl-C with killpg), output to a file."""
        out = open(self.out_path, "ab")  # noqa: SIM115 - owned by the child
        self.supervisor = subprocess.Popen([sys.executable, "-m", "dmq", *self.start_args()],
                                           stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=self.env(),
                                           start_new_session=True)
        out.close()
        return self.supervisor

    def output(self) -> str:
        return self.out_path.read_text(errors="replace") if self.out_path.exists() else ""

    def wait_output(self, text: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output():
                return
            if self.supervisor is not None and self.supervisor.poll() is not None:
                raise AssertionError(f"dmq cluster start exited ({self.supervisor.returncode}) "
                                     f"before printing {text!r}:\n{self.output()}")
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {text!r}:\n{self.output()}")

    def log(self, broker: int) -> str:
        path = self.base / f"broker-{broker}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def admin(self, brokers: list[int] | None = None) -> AdminClient:
        ports = self.ports
        ids = brokers or list(ports)
        return AdminClient({"bootstrap.servers": ",".join(f"127.0.0.1:{ports[i]}" for i in ids)})

    def wait_for(self, cond: Callable[[], Any], what: str, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                result = cond()
                if result:
                    return result
            except Exception as e:  # noqa: BLE001 - retried until the deadline
                last = e
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last})\n"
                             f"{self.output()}")

    def close(self) -> None:
        """Kill whatever is left (the supervisor first, so it restarts nothing), by pid."""
        if self.supervisor is not None and self.supervisor.poll() is None:
            self.supervisor.kill()
            self.supervisor.wait(10)
        for pid in processes_under(self.base):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while processes_under(self.base) and time.monotonic() < deadline:
            time.sleep(0.1)


def lines_matching(text: str, pattern: str) -> list[int]:
    """Indexes of the lines of ``text`` that match ``pattern``."""
    rx = re.compile(pattern)
    return [i for i, line in enumerate(text.splitlines()) if rx.search(line)]
