"""Brokers while ZooKeeper is down, paused or slow: they shut down, restart and serve
clients within bounds."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from support.cluster import Cluster
from support.zookeeper import available

from dmq.client.wire import WireClient

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


def test_concurrent_metadata_auto_creates_through_different_brokers(cluster: Cluster) -> None:
    """Auto-creates of the same topics racing through every broker: each answer is the topic
    or LEADER_NOT_AVAILABLE (created through another broker a moment ago), and no connection
    is closed (a broker's cache lagging ZooKeeper tripped an assertion)."""
    names = [f"auto-{i}" for i in range(30)]
    request = MetadataRequest(topics=tuple(MetadataRequestTopic(topic_id=None, name=n)  # type: ignore[arg-type]
                                           for n in names),
                              allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    barrier = threading.Barrier(len(cluster.brokers))
    answers: dict[int, Any] = {}
    errors: list[BaseException] = []

    def create_via(broker_id: int) -> None:
        try:
            with WireClient("127.0.0.1", cluster.brokers[broker_id].port, timeout=30) as c:
                c.request(ApiVersionsRequest(client_software_name="t",  # type: ignore[arg-type]
                                             client_software_version="1"))
                barrier.wait(10)
                answers[broker_id] = c.request(request)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=create_via, args=(i,)) for i in cluster.brokers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for resp in answers.values():
        assert {t.error_code for t in resp.topics} <= {ErrorCode.none, ErrorCode.leader_not_available}
    assert len(answers) == len(cluster.brokers)
    cluster.wait_for(lambda: set(names) <= set(cluster.metadata().topics), "every topic created")
    for b in cluster.brokers.values():
        assert "AssertionError" not in b.log_text()
