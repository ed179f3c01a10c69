"""The kazoo client's connection policy: bounded reconnect pauses, a session that survives
a ZooKeeper restart."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooState
from support.proxy import TcpProxy
from support.zookeeper import ZooKeeperProcess, available

from dmq.cluster.metadata import BrokerInfo
from dmq.cluster.zk.client import (
    ZooKeeperClient,
    ZooKeeperUnavailable,
    connection_retry,
    new_kazoo_client,
)
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

    async def body() -> None:
        store = await ZooKeeperMetadataStore.connect(zk.connect + "/dmq", 1, session_timeout_ms=3000)
        try:
            await store.register_broker(BrokerInfo(1, "127.0.0.1", 9091))
            session_id = store.client.session_id
            connected = threading.Event()
            states: list[str] = []

            def listener(state: str) -> None:
                states.append(state)
                if state == KazooState.CONNECTED:
                    connected.set()

            store.client.kazoo.add_listener(listener)
            await asyncio.to_thread(zk.stop)
            await asyncio.sleep(10)
            await asyncio.to_thread(zk.start)
            back = time.monotonic()
            assert await asyncio.to_thread(connected.wait, 15), f"no reconnect; states {states}"
            took = time.monotonic() - back
            assert store.client.session_id == session_id
            assert KazooState.LOST not in states and not store.session_lost
            assert await store.client.exists("/brokers/ids/1") is not None
            assert took < 1.5, f"reconnected {took:.2f}s after ZooKeeper was back"
        finally:
            await store.stop()

    try:
        asyncio.run(body())
    finally:
        zk.stop()


@pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")
def test_calls_fail_within_the_timeout_while_zookeeper_is_paused(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A SIGSTOPped ZooKeeper accepts nothing: a call raises ZooKeeperUnavailable
    (REQUEST_TIMED_OUT) within its bound, and the event loop keeps running meanwhile.
    The broker's log says so, once per interval (a CreateTopics answered REQUEST_TIMED_OUT
    after 30 s left no line at all in a failed run)."""
    caplog.set_level(logging.WARNING, logger="dmq.zookeeper")
    zk = ZooKeeperProcess(tmp_path / "zk").start()

    async def body() -> None:
        client = ZooKeeperClient(zk.connect, 6000, timeout_s=1.0)
        await client.start(10)
        try:
            await client.create("/x", b"1")
            assert zk.proc is not None
            zk.pause()
            try:
                ticks = 0

                async def tick() -> None:
                    nonlocal ticks
                    while True:
                        await asyncio.sleep(0.05)
                        ticks += 1

                ticker = asyncio.ensure_future(tick())
                started = time.monotonic()
                with pytest.raises(ZooKeeperUnavailable) as e:
                    await client.get("/x")
                took = time.monotonic() - started
                ticker.cancel()
                assert e.value.error == "request_timed_out"
                assert took < 2.5, took
                assert ticks >= took / 0.05 * 0.5  # the loop was not blocked
                with pytest.raises(ZooKeeperUnavailable):
                    await client.exists("/x")
                warned = [r.getMessage() for r in caplog.records if "did not answer" in r.getMessage()]
                assert len(warned) == 1, warned  # the second timeout waits for the next interval
                assert warned[0].startswith("ZooKeeper did not answer get /x within 1.0s"), warned
            finally:
                zk.resume()
        finally:
            await asyncio.to_thread(client.close, 5)

    try:
        asyncio.run(body())
    finally:
        zk.stop()


@pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")
def test_a_connection_accepted_but_not_served_is_given_up_within_a_third_of_the_session(
        tmp_path: Path) -> None:
    """A ZooKeeper that accepts TCP connections but does not serve yet (restarting): kazoo
    waited for the answer to its Connect request for the whole session timeout, so a broker
    that reconnected in that window came back after its session had expired. Now the
    handshake is bounded like the TCP connect (a third of the session timeout)."""
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    proxy = TcpProxy("127.0.0.1", zk.port).start()

    async def body() -> None:
        client = ZooKeeperClient(proxy.address, 6000)
        await client.start(10)
        try:
            connections = client.connections
            proxy.hold_new = True  # the next connection is accepted and never answered
            proxy.reset()
            await asyncio.sleep(1.0)
            proxy.hold_new = False
            started = time.monotonic()
            while client.connections == connections:
                assert time.monotonic() - started < 10, "never reconnected"
                await asyncio.sleep(0.05)
            took = time.monotonic() - started + 1.0
            assert took < 3.5, f"reconnected {took:.1f}s after the drop (the held attempt waited too long)"
        finally:
            await asyncio.to_thread(client.close, 5)

    try:
        asyncio.run(body())
    finally:
        proxy.close()
        zk.stop()
