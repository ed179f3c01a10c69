"""The README's metrics commands, run verbatim, as tests/test_readme.py runs the quickstart.

The blocks after ``<!-- metrics: background -->`` (the broker, kept running) and
``<!-- metrics -->`` run in order with ``bash -euo pipefail``, the virtualenv's
``bin`` first on PATH, inside a network namespace of the test's own so the
README's literal ports are free whatever else runs here.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.netns import available as netns_unavailable

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent
BLOCK = re.compile(r"<!-- metrics(: background)? -->\s*\n```sh\n(.*?)\n```", re.DOTALL)
NS = f"dqmt{os.getpid()}"


def metrics_blocks() -> list[tuple[str, bool]]:
    return [(m.group(2), bool(m.group(1))) for m in BLOCK.finditer(README.read_text())]


def test_the_readme_shows_a_broker_with_metrics_then_a_scrape() -> None:
    blocks = metrics_blocks()
    assert [background for _, background in blocks] == [True, False]
    assert "--metrics 127.0.0.1:9404" in blocks[0][0]
    assert "127.0.0.1:9404/metrics" in blocks[1][0]


@pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable()))
def test_the_readme_metrics_commands_run(tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(VENV_BIN.parent)
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "VIRTUAL_ENV": str(VENV_BIN.parent), "PYTHONUNBUFFERED": "1"}
    env.pop("DMQ_BOOTSTRAP_SERVER", None)
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    subprocess.run(["ip", "netns", "add", NS], check=True, capture_output=True)
    server: subprocess.Popen[bytes] | None = None
    prefix = ["ip", "netns", "exec", NS]
    outputs: list[str] = []
    try:
        subprocess.run(["ip", "-n", NS, "link", "set", "lo", "up"], check=True, capture_output=True)
        for code, background in metrics_blocks():
            if background:
                log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - closed with the test
                server = subprocess.Popen([*prefix, "bash", "-euo", "pipefail", "-c", code], cwd=tmp_path,
                                          env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)
                deadline = time.monotonic() + 60
                while b"listening on" not in (tmp_path / "server.log").read_bytes():
                    assert server.poll() is None, (tmp_path / "server.log").read_text()
                    assert time.monotonic() < deadline, "no 'listening on' within 60 s"
                    time.sleep(0.2)
                continue
            res = subprocess.run([*prefix, "bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=120)
            assert res.returncode == 0, f"{code}\nexited {res.returncode}:\n{res.stdout}\n{res.stderr}"
            outputs.append(res.stdout)
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(10)
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    shown = outputs[-1]
    assert 'dmq_topic_messages_in_total{topic="clicks"} 3.0' in shown, shown
    assert 'dmq_requests_total{request="Produce"}' in shown, shown
    assert "serves metrics on http://127.0.0.1:9404/metrics" in (tmp_path / "server.log").read_text()
    assert "Traceback" not in (tmp_path / "server.log").read_text()
