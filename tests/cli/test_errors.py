"""Failures are one line with the right exit code: bad server options, data directory
problems, port clashes, unexpected exceptions (issue 10)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.broker import BrokerProcess

from dmq.cli import common
from dmq.cli.main import main


def server(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dmq", "server", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_bad_listen_address_is_a_usage_error(tmp_path: Path) -> None:
    res = server("--listen", "host:abc", "--data-dir", str(tmp_path / "d"))
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        "error: --listen expects HOST:PORT or NAME://HOST:PORT[,...] (PORT from 0 to 65535), got 'host:abc'"]
    res = server("--listen", "127.0.0.1:0", "--advertised-listener", "h:99999",
                 "--data-dir", str(tmp_path / "d"))
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        "error: --advertised-listener expects HOST:PORT or NAME://HOST:PORT[,...] (PORT from 0 to 65535), got 'h:99999'"]


def test_data_dir_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "not-a-dir"
    f.write_text("x")
    res = server("--listen", "127.0.0.1:0", "--data-dir", str(f))
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        f"error: cannot use {f} as the data directory: it is a file, not a directory; pass "
        f"another --data-dir (log.dirs)"]
    res = server("--listen", "127.0.0.1:0", "--data-dir", str(f / "below"))
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        f"error: cannot use {f / 'below'} as the data directory: {f} is a file, not a directory; "
        f"pass another --data-dir (log.dirs)"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to any directory")
def test_data_dir_not_writable(tmp_path: Path) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        res = server("--listen", "127.0.0.1:0", "--data-dir", str(d))
    finally:
        d.chmod(0o700)
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        f"error: cannot use {d} as the data directory: permission denied ({d / '.lock'}); pass "
        f"another --data-dir (log.dirs)"]


def test_port_in_use(broker: BrokerProcess, tmp_path: Path) -> None:
    res = server("--listen", broker.bootstrap, "--data-dir", str(tmp_path / "d"))
    assert res.returncode == 1
    err = res.stderr.splitlines()[-1]
    assert err.startswith(f"error: cannot listen on {broker.bootstrap}: address already in use. "
                          f"Is another broker using it?"), res.stderr
    assert "Errno" not in res.stderr and "Traceback" not in res.stderr
    assert broker.alive()


def test_log_level_is_a_choice(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    res = server("--log-level", "verbose", "--listen", "127.0.0.1:0", "--data-dir", str(f))
    assert res.returncode == 2
    assert "'verbose' is not one of 'debug', 'info', 'warning', 'error', 'critical'" in res.stderr
    # Case does not matter; this one gets as far as the data directory.
    res = server("--log-level", "WARNING", "--listen", "127.0.0.1:0", "--data-dir", str(f))
    assert res.returncode == 1 and "as the data directory" in res.stderr


def _boom(*args: object) -> None:
    raise RuntimeError("something broke\nover two lines")


def test_unexpected_exception_is_one_line_unless_debug(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A bug in a command (simulated: dmq consume's implementation raises)."""
    import dmq.console.consumer

    monkeypatch.setattr(dmq.console.consumer, "run", _boom)
    verbosity = getattr(common, "VERBOSITY", None)
    if verbosity is not None:  # main() leaves --debug set in this process: restore it after
        monkeypatch.setattr(verbosity, "verbose", False)
        monkeypatch.setattr(verbosity, "debug", False)
    monkeypatch.setattr(sys, "argv", ["dmq", "consume", "t"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["error: unexpected RuntimeError: something broke over two lines "
                                "(run with `dmq --debug ...` for the traceback)"]
    monkeypatch.setattr(sys, "argv", ["dmq", "--debug", "consume", "t"])
    with pytest.raises(RuntimeError, match="something broke"):
        main()


def test_admin_failures_name_the_topic_not_a_config_resource(broker: BrokerProcess) -> None:
    from support.cli import run_dmq

    run_dmq(broker.bootstrap, "topics", "create", "cfg-errors", "-p", "1")
    res = run_dmq(broker.bootstrap, "topics", "alter", "cfg-errors", "--config", "no.such.config=1",
                  check=False)
    assert res.returncode == 1
    assert "ConfigResource" not in res.stderr and "KafkaError{" not in res.stderr
    assert res.stderr.startswith("error: altering configs of cfg-errors failed: "), res.stderr
    assert len(res.stderr.splitlines()) == 1


def test_reset_offsets_with_a_bad_partition_list_is_a_usage_error(broker: BrokerProcess) -> None:
    from support.cli import run_dmq

    run_dmq(broker.bootstrap, "topics", "create", "reset-errors", "-p", "1")
    res = run_dmq(broker.bootstrap, "groups", "reset-offsets", "-g", "g1", "-t", "reset-errors:x",
                  "--to-earliest", check=False)
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        "error: --topic expects TOPIC or TOPIC:P1,P2 with partition numbers, got 'reset-errors:x'"]


def test_ctrl_c_is_exit_130_with_one_line_and_usage_errors_exit_2() -> None:
    import signal
    import socket
    import time

    # A broker that accepts connections and never answers: the command waits until Ctrl-C.
    accepted: list[socket.socket] = []
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(50)
        silent.settimeout(60)
        port = silent.getsockname()[1]
        for command in (["groups", "list"], ["topics", "list"]):
            proc = subprocess.Popen([sys.executable, "-m", "dmq", *command, "-b", f"127.0.0.1:{port}"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # Ctrl-C once the command is waiting on the broker: a fixed sleep sent it while a
            # loaded machine was still importing (Python's own exit by SIGINT, -2).
            accepted.append(silent.accept()[0])
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            sent = time.monotonic()
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 130, command  # click said "Aborted!" and exited 1
            assert err.splitlines() == ["interrupted"] and out == "", command
            # topics list sat in librdkafka's list_topics (C) for up to 30 s before it saw Ctrl-C
            assert time.monotonic() - sent < 5, command
    for conn in accepted:
        conn.close()
    usage = subprocess.run([sys.executable, "-m", "dmq", "topics", "create"], capture_output=True,
                           text=True, timeout=30)
    assert usage.returncode == 2 and "Missing argument" in usage.stderr
