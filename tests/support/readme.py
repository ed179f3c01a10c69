"""Run the README's marked blocks verbatim, as a user would from the checkout.

A block is marked by an HTML comment right before its fence: ``<!-- NAME -->``
or ``<!-- NAME: background -->`` (a block that keeps running, a broker, until
the run ends). ``ReadmeRun`` runs them inside a network namespace it creates
and removes, so the README's literal ports (127.0.0.1:9092, :9404) are free
whatever else runs on this machine; sh blocks with ``bash -euo pipefail``,
python blocks with the virtualenv's python, in a directory holding a
``.venv`` link to the running virtualenv (so ``. .venv/bin/activate`` works)
and with its ``bin`` first on PATH as after that activation. Used by
tests/test_readme.py (the quickstart) and tests/metrics/test_metrics_readme.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    background: bool


def readme_blocks(marker: str) -> list[Block]:
    """The blocks marked ``<!-- marker -->`` / ``<!-- marker: background -->``, in README order."""
    pattern = re.compile(rf"<!-- {re.escape(marker)}(: background)? -->\s*\n```(\w+)\n(.*?)\n```", re.DOTALL)
    return [Block(m.group(2), m.group(3), bool(m.group(1))) for m in pattern.finditer(README.read_text())]


class ReadmeRun:
    """One namespace and working directory for a sequence of README blocks (a context manager)."""

    def __init__(self, workdir: Path, namespace: str) -> None:
        self.workdir = workdir
        self.ns = namespace
        self.server: subprocess.Popen[bytes] | None = None
        self.server_log = workdir / "server.log"
        self.env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                    "VIRTUAL_ENV": str(VENV_BIN.parent), "PYTHONUNBUFFERED": "1", "COLUMNS": "120"}
        self.env.pop("DMQ_BOOTSTRAP_SERVER", None)
        self._prefix = ["ip", "netns", "exec", namespace]

    def __enter__(self) -> ReadmeRun:
        link = self.workdir / ".venv"
        if not link.exists():
            link.symlink_to(VENV_BIN.parent)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        subprocess.run(["ip", "netns", "add", self.ns], check=True, capture_output=True)
        subprocess.run(["ip", "-n", self.ns, "link", "set", "lo", "up"], check=True, capture_output=True)
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        server = self.server
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(10)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)

    def start_background(self, code: str, ready: bytes = b"listening on", timeout: float = 60) -> None:
        """Start a background sh block (the broker) and wait until its output shows ``ready``."""
        log = open(self.server_log, "wb")  # noqa: SIM115 - the child holds it; closed with this process
        self.server = subprocess.Popen([*self._prefix, "bash", "-euo", "pipefail", "-c", code], cwd=self.workdir,
                                       env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while ready not in self.server_log.read_bytes():
            if self.server.poll() is not None:
                raise AssertionError(f"{code}\nexited {self.server.returncode}:\n{self.server_log.read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{code}\nno {ready.decode()!r} within {timeout:.0f} s")
            time.sleep(0.2)

    def run(self, block: Block, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """Run a foreground block to its end (TimeoutExpired after ``timeout``)."""
        cmd = ([*self._prefix, "bash", "-euo", "pipefail", "-c", block.code] if block.lang == "sh"
               else [*self._prefix, str(VENV_BIN / "python"), "-c", block.code])
        return subprocess.run(cmd, cwd=self.workdir, env=self.env, capture_output=True, text=True,
                              timeout=timeout)
