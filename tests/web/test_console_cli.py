"""``dmq console`` and ``dmq server --console``: bad input is one line, never a traceback."""

from __future__ import annotations

import socket
from pathlib import Path

from support.broker import BrokerProcess
from support.cli import run_dmq
from support.ports import free_port


def test_console_usage_errors(broker: BrokerProcess, tmp_path: Path) -> None:
    down = run_dmq(None, "console", "-b", f"127.0.0.1:{free_port()}", check=False)
    assert down.returncode == 1 and down.stderr.startswith("error: cannot reach 127.0.0.1:")
    bad = run_dmq(broker.bootstrap, "console", "--listen", "nowhere", check=False)
    assert bad.returncode == 2 and "--listen expects HOST:PORT, got 'nowhere'" in bad.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = run_dmq(broker.bootstrap, "console", "--listen", f"127.0.0.1:{port}", check=False, timeout=60)
        both = run_dmq(None, "server", "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / "b"),
                       "--console", f"127.0.0.1:{port}", check=False, timeout=60)
    assert taken.returncode == 1 and f"error: cannot listen on 127.0.0.1:{port}: address already in use" in taken.stderr
    assert both.returncode == 1, both.stderr
    assert f"error: cannot serve the console on 127.0.0.1:{port}: address already in use" in both.stderr
    server = run_dmq(None, "server", "--data-dir", str(tmp_path / "d"), "--console", "8080", check=False)
    assert server.returncode == 2 and "--console expects HOST:PORT, got '8080'" in server.stderr
    for result in (down, bad, taken, both, server):
        assert "Traceback" not in result.stderr
