"""Brokers while ZooKeeper is down, paused or slow: they shut down, restart and serve
clients within bounds."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from support.cluster import Cluster
from support.zookeeper import available

pytestmark = pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")


def test_sigterm_during_a_zookeeper_outage_exits_within_the_controlled_shutdown_bound(
        tmp_path: Path) -> None:
    c = Cluster(tmp_path, size=2).start()  # FAST: 3 retries, 1 s apart
    try:
        c.create_topic("outage", partitions=2, rf=2)
        c.zookeeper.stop()
        b = c.brokers[1]
        assert b.proc is not None
        started = time.monotonic()
        b.proc.send_signal(signal.SIGTERM)
        code = b.proc.wait(30)
        took = time.monotonic() - started
        b.proc = None
        assert code == 0
        assert took < 3 + 6, f"took {took:.1f}s to exit"
        assert "ZooKeeper unreachable" in b.log_text()
    finally:
        c.stop()


@pytest.mark.parametrize("first_session_ms", ["4000", "10000"])
def test_broker_killed_and_restarted_at_once_waits_for_its_old_registration(
        tmp_path: Path, first_session_ms: str) -> None:
    """The restarted broker finds its id still registered by the crashed process's session
    and waits for ZooKeeper to expire it, even when that session's timeout was longer than
    the new process's (a config change across the restart)."""
    c = Cluster(tmp_path, size=2,
                per_broker={2: {"zookeeper.session.timeout.ms": first_session_ms}}).start()
    try:
        b = c.brokers[2]
        b.kill()
        b.overrides["zookeeper.session.timeout.ms"] = "4000"
        b.start(timeout=60)
        assert "is still registered by an earlier session" in b.log_text()
        c.wait_for(lambda: len(c.metadata(via=[1]).brokers) == 2, "broker 2 registered again")
        time.sleep(1)
        assert b.alive()
    finally:
        c.stop()
