"""Run the web console (``dmq console``) as a real process, and fetch its pages."""

from __future__ import annotations

import html
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from support.ports import free_port

SERVING = re.compile(r"dmq console on (http://\S+)")

CHROMIUM = "/usr/bin/chromium"  # Debian's (scripts/test.sh installs it); Playwright drives it
# As root in a container, with no network beyond loopback: no sandbox, no background calls home.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]


def screenshots_dir() -> Path:
    """Where browser tests save screenshots: $DMQ_SCREENSHOTS or tests/web/screenshots/."""
    path = Path(os.environ.get("DMQ_SCREENSHOTS", Path(__file__).parent.parent / "web" / "screenshots"))
    path.mkdir(parents=True, exist_ok=True)
    return path


class ConsoleProcess:
    """``python -m dmq console -b BOOTSTRAP --listen 127.0.0.1:PORT`` on a free port."""

    def __init__(self, bootstrap: str, log_path: Path, sample_interval: float = 1.0,
                 extra_args: list[str] | None = None) -> None:
        self.bootstrap = bootstrap
        self.extra_args = list(extra_args or [])  # more `dmq console` options
        self.port = free_port()
        self.log_path = log_path
        self.sample_interval = sample_interval
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout: float = 30.0) -> ConsoleProcess:
        logf = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dmq", "console", "-b", self.bootstrap, "--listen",
             f"127.0.0.1:{self.port}", "--sample-interval", str(self.sample_interval), *self.extra_args],
            stdout=subprocess.PIPE, stderr=logf, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        logf.close()
        self.url = wait_for_line(self.proc, timeout, self.log_path)
        return self

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


def wait_for_line(proc: subprocess.Popen[bytes], timeout: float, log_path: Path) -> str:
    """The console's URL from the line it prints once it serves."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode()
        if not line:
            raise RuntimeError(f"console exited early (code {proc.wait()}):\n{log_path.read_text()[-3000:]}")
        m = SERVING.search(line)
        if m:
            return m.group(1)
    raise TimeoutError(f"console did not start within {timeout}s")


@dataclass
class Page:
    status: int
    url: str  # after redirects
    text: str
    seconds: float


def get(base: str, path: str, **query: str) -> Page:
    url = base + path + (("?" + urllib.parse.urlencode(query)) if query else "")
    return _open(urllib.request.Request(url))


def post(base: str, path: str, **form: str) -> Page:
    """Submit a form as a browser does (the console answers 303 and the page follows)."""
    data = urllib.parse.urlencode(form).encode()
    return _open(urllib.request.Request(base + path, data=data, method="POST"))


def _open(request: urllib.request.Request) -> Page:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return Page(r.status, r.url, r.read().decode(), time.monotonic() - started)
    except urllib.error.HTTPError as e:
        return Page(e.code, e.url, e.read().decode(), time.monotonic() - started)


def cells(page_html: str, table_id: str) -> list[list[str]]:
    """The text of each row of the table with ``table_id`` (header row included)."""
    m = re.search(rf'<table id="{table_id}"[^>]*>(.*?)</table>', page_html, re.S)
    assert m, f"no table {table_id}"
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", m.group(1), re.S)
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
             for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r, re.S)] for r in rows]
