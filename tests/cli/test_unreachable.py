"""A broker that is not there is one clear line, at once; not half a minute of client
logs (issue 10)."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from support.broker import BrokerProcess
from support.cli import closed_port, dmq_env, run_dmq


@pytest.mark.parametrize("args, stdin", [
    (("topics", "list"), None),
    (("produce", "unreachable-t"), b"one\ntwo\n"),
    (("consume", "unreachable-t"), None),
    (("messages", "query", "-t", "unreachable-t", "-k", "1"), None),
], ids=["topics-list", "produce", "consume", "messages-query"])
def test_unreachable_broker_is_one_line(args: tuple[str, ...], stdin: bytes | None) -> None:
    bootstrap = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    res = run_dmq(bootstrap, *args, stdin=stdin, check=False, timeout=60)
    took = time.monotonic() - started
    assert res.returncode == 1, res.stderr
    lines = res.stderr.splitlines()
    assert lines == [f"error: cannot reach {bootstrap}: connection refused; is `dmq server` running? "
                     f"(pass --bootstrap-server HOST:PORT)"], res.stderr[:2000]
    assert "%3|" not in res.stderr and "rdkafka" not in res.stderr
    assert took < 10, f"took {took:.1f} s"


def test_bad_bootstrap_server_is_a_usage_error() -> None:
    res = run_dmq("127.0.0.1:notaport", "topics", "list", check=False, timeout=60)
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        "error: --bootstrap-server expects HOST:PORT[,HOST:PORT...], got '127.0.0.1:notaport'"]


def test_client_logs_only_when_asked(broker: BrokerProcess) -> None:
    quiet = run_dmq(broker.bootstrap, "topics", "list")
    assert quiet.stderr == ""
    loud = run_dmq(broker.bootstrap, "--debug", "topics", "list")
    assert "|rdkafka#" in loud.stderr  # librdkafka's debug lines, e.g. %7|...|BROKER|rdkafka#...
    assert quiet.stdout == loud.stdout


def test_verbose_shows_the_clients_own_log_lines(fresh_broker: BrokerProcess) -> None:
    """--verbose shows what librdkafka logs (at its default level, info: here a broker going
    away mid-consume), which dmq hides otherwise; its debug traces only come with --debug."""
    b = fresh_broker.start()
    run_dmq(b.bootstrap, "topics", "create", "verbose-t", "-p", "1")
    run_dmq(b.bootstrap, "produce", "verbose-t", stdin=b"first\n")
    procs = {flags: subprocess.Popen(
        [sys.executable, "-m", "dmq", *flags, "consume", "verbose-t", "--from-beginning",
         "--timeout-ms", "6000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dmq_env(b.bootstrap))
        for flags in ((), ("--verbose",))}
    try:
        for proc in procs.values():
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"first\n"  # consuming, connected to the broker
        b.kill()
        err = {flags: proc.communicate(timeout=60)[1].decode() for flags, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert err[()].splitlines() == ["Processed a total of 1 messages"]
    lines = err[("--verbose",)].splitlines()
    assert lines[-1] == "Processed a total of 1 messages"
    logged = [line for line in lines if re.match(r"%[0-6]\|[\d.]+\|\w+\|rdkafka#consumer-\d+\| ", line)]
    assert any(b.bootstrap in line and "Connection refused" in line for line in logged), lines[:20]
    assert len(logged) == len(lines) - 1, "only librdkafka's lines and dmq's own"
    assert not any(line.startswith("%7|") for line in lines)  # debug traces: --debug only
