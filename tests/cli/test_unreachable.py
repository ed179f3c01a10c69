"""A broker that is not there is one clear line, at once; not half a minute of client
logs (issue 10)."""

from __future__ import annotations

import time

import pytest
from support.broker import BrokerProcess
from support.cli import closed_port, run_dmq


@pytest.mark.parametrize("args, stdin", [
    (("topics", "list"), None),
    (("produce", "unreachable-t"), b"one\ntwo\n"),
    (("consume", "unreachable-t"), None),
], ids=["topics-list", "produce", "consume"])
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
