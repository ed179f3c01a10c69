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
