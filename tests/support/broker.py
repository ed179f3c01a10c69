"""Run a real ``dmq server`` process for tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.ports import free_port

__all__ = ["BrokerProcess", "free_port"]

LISTENING = re.compile(r"listening on ([\d.]+):(\d+)")


class BrokerProcess:
    """A ``python -m dmq server`` child process on a free loopback port."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None,
                 port: int | None = None, log_path: Path | None = None, host: str = "127.0.0.1",
                 command_prefix: list[str] | None = None, listeners: str | None = None,
                 extra_args: list[str] | None = None) -> None:
        """``host`` and ``command_prefix`` run it elsewhere, e.g. in a test network
        namespace (``ip netns exec NAME``, see support.netns). ``listeners`` replaces the
        one PLAINTEXT listener (``NAME://HOST:PORT,...``; ``port`` should be its first's)."""
        self.listeners = listeners
        self.host = host
        self.command_prefix = list(command_prefix or [])
        self.extra_args = list(extra_args or [])  # more `dmq server` options
        self.lines: list[str] = []  # stdout lines read while starting
        self.data_dir = data_dir
        self.overrides = dict(overrides or {})
        self.port = port or free_port()
        self.log_path = log_path or data_dir.parent / f"broker-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_line = ""
        self.paused = False

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        cmd = [*self.command_prefix, sys.executable, "-m", "dmq", "server", "--listen", self.listeners or self.bootstrap,
               "--data-dir", str(self.data_dir)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        cmd += self.extra_args
        logf = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=logf,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        logf.close()
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode()
            self.lines.append(line)
            if not line:
                raise RuntimeError(f"broker exited early (code {self.proc.wait()}); see {self.log_path}:\n"
                                   + self.log_path.read_text()[-3000:])
            if LISTENING.search(line):
                self.startup_line = line
                return self
        raise TimeoutError(f"broker did not start within {timeout}s; see {self.log_path}")

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: a clean shutdown."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL: a crash."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None
