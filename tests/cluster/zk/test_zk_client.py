"""The kazoo client's connection policy: bounded reconnect pauses, a session that survives
a ZooKeeper restart."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooState
from support.zookeeper import ZooKeeperProcess, available

from dmq.cluster.metadata import BrokerInfo
from dmq.cluster.zk.client import connection_retry, new_kazoo_client
from dmq.cluster.zookeeper import ZooKeeperMetadataStore


@pytest.mark.parametrize("session_ms", [1000, 4000, 6000, 18000, 60000])
def test_reconnect_attempts_stay_a_fraction_of_the_session_timeout_apart(session_ms: int) -> None:
    for retry in (connection_retry(session_ms), new_kazoo_client("127.0.0.1:1", session_ms)._conn_retry):
        assert retry is not None
        assert retry.max_tries == -1  # for ever: a broker never gives up on ZooKeeper
        longest = retry.max_delay * (1 + retry.max_jitter)  # kazoo's longest sleep
        assert longest <= min(0.6, session_ms / 1000 / 3)


def test_one_tcp_connect_attempt_is_bounded() -> None:
    client = new_kazoo_client("127.0.0.1:1", 18000)
    assert client.handler.limit_s <= 18 / 3


@pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")
def test_session_survives_a_zookeeper_restart(tmp_path: Path) -> None:
    """ZooKeeper down for 10 s, back on the same port and data: the client reconnects
    within about a second and keeps its session (and so its ephemeral registration)."""
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    store = ZooKeeperMetadataStore(zk.connect + "/dmq", 1, session_timeout_ms=3000)
    try:
        store.register_broker(BrokerInfo(1, "127.0.0.1", 9091))
        session_id = store.zk.client_id[0]
        connected = threading.Event()
        states: list[str] = []

        def listener(state: str) -> None:
            states.append(state)
            if state == KazooState.CONNECTED:
                connected.set()

        store.zk.add_listener(listener)
        zk.stop()
        time.sleep(10)
        zk.start()
        back = time.monotonic()
        assert connected.wait(15), f"no reconnect; states {states}"
        took = time.monotonic() - back
        assert store.zk.client_id[0] == session_id
        assert KazooState.LOST not in states and not store.session_lost
        assert store.zk.exists("/brokers/ids/1") is not None
        assert took < 1.5, f"reconnected {took:.2f}s after ZooKeeper was back"
    finally:
        store.close()
        zk.stop()
