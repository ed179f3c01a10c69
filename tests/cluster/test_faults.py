"""Regression tests for known reliability findings, end to end on real processes.

Each test reproduces one finding with real brokers and Debian's ZooKeeper
(SIGSTOP/SIGKILL of processes, a loopback TCP proxy to cut one broker from
ZooKeeper). Each failed on the code before its fix (issue 9, findings 1-7;
the numbers each one saw then are in its docstring or the issue).
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kazoo.client import KazooClient
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from support.cluster import Cluster
from support.proxy import TcpProxy
from support.zookeeper import available
from test_replication import BackgroundProducer, consume_all, wait_acked_growth

from dmq.client.wire import WireClient
from dmq.record.records import encode_batch

pytestmark = pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Any]:
    """Build (and always tear down) a Cluster with config overrides and optional per-broker ones."""
    made: list[Cluster] = []

    def make(overrides: dict[str, str] | None = None, size: int = 3,
             per_broker: dict[int, dict[str, str]] | None = None) -> Cluster:
        c = Cluster(tmp_path / f"c{len(made)}", size=size, overrides=overrides, per_broker=per_broker)
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.stop()


def metadata_request(*names: str, create: bool = True) -> MetadataRequest:
    return MetadataRequest(topics=tuple(MetadataRequestTopic(topic_id=None, name=n) for n in names),  # type: ignore[arg-type]
                           allow_auto_topic_creation=create, include_topic_authorized_operations=False)


def produce_request(topic: str, partition: int, values: list[bytes], acks: int) -> ProduceRequest:
    records = encode_batch([(None, v, []) for v in values])
    return ProduceRequest(transactional_id=None, acks=acks, timeout=timedelta(seconds=5),  # type: ignore[arg-type]
                          topic_data=(TopicProduceData(name=topic, partition_data=(  # type: ignore[arg-type]
                              PartitionProduceData(index=partition, records=records),),),))  # type: ignore[arg-type]


def timed_request(port: int, request: Any, timeout: float) -> tuple[float, Any]:
    """(seconds, response or the exception) for one request on a fresh connection."""
    start = time.monotonic()
    try:
        with WireClient("127.0.0.1", port, timeout=timeout) as c:
            resp = c.request(request)
    except Exception as e:  # noqa: BLE001 - the caller asserts on it
        resp = e
    return time.monotonic() - start, resp


def broker_session_ids(cluster: Cluster) -> dict[int, int]:
    """{broker id: ephemeralOwner session id of its /brokers/ids znode}, read with a separate client."""
    zk = KazooClient(hosts=cluster.zookeeper.connect, timeout=5)
    zk.start(10)
    try:
        out = {}
        for child in zk.get_children("/dmq/brokers/ids"):
            _, stat = zk.get(f"/dmq/brokers/ids/{child}")
            out[int(child)] = int(stat.ephemeralOwner)
        return out
    finally:
        zk.stop()
        zk.close()


def connected_sessions(cluster: Cluster) -> set[int]:
    """Session ids with a live connection to ZooKeeper, from the ``cons`` four-letter command."""
    try:
        text = cluster.zookeeper.four_letter("cons", 0.5)
    except OSError:
        return set()
    return {int(m, 16) for m in re.findall(r"sid=0x([0-9a-f]+)", text)}


# --- 1 -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_isr_expansion_does_not_admit_follower_behind_high_watermark(make_cluster: Any) -> None:
    """Finding: "ISR expansion lands after the high watermark moved past the joining follower
    (lost acknowledged records)". The leader decided to add a caught-up follower while ZooKeeper
    was slow; meanwhile the follower fell behind again and acks=all records were committed
    without it; the expansion then landed, the follower became the only live ISR member and
    was elected. Originally: 1,875 acknowledged, high watermark afterwards 1,506, 369
    acknowledged records gone."""
    cluster = make_cluster({"zookeeper.session.timeout.ms": "10000",
                            "replica.lag.time.max.ms": "3000"}).start()
    topic = "expand"
    cluster.create_topic(topic, partitions=1, rf=3, config={"min.insync.replicas": "2"})
    leader = cluster.partition(topic).leader
    f, g = [b for b in cluster.brokers if b != leader]
    prod = BackgroundProducer(cluster.reachable_bootstrap([leader, g]), topic, 1, rate=400).start()
    try:
        wait_acked_growth(prod, 300)
        cluster.pause(f)
        cluster.wait_for(lambda: sorted(cluster.partition(topic, via=[leader, g]).isrs) == sorted([leader, g]),
                         "the paused follower leaves the ISR", timeout=30)
        cluster.zookeeper.pause()
        cluster.resume(f)
        time.sleep(1.5)  # F catches up; the leader's ISR expansion write now waits on ZooKeeper
        cluster.pause(f)
        time.sleep(1.0)  # acks=all keeps succeeding with ISR {leader, G}; F falls behind again
        cluster.zookeeper.resume()
        # The expansion lands in ZooKeeper. F has lagged about 2 s when the others die, within
        # replica.lag.time.max.ms, so the leader has not dropped it again (it would, a second
        # later, and then F could not be elected at all).
        time.sleep(1.0)
        acked = list(prod.acked[0])
        cluster.brokers[leader].kill()
        cluster.brokers[g].kill()
    finally:
        prod.stop.set()
        if cluster.zookeeper.paused:
            cluster.zookeeper.resume()
        if cluster.brokers[f].paused:
            cluster.resume(f)
    try:
        state_isr = cluster.wait_for(lambda: (p := cluster.partition(topic, via=[f])).leader == f and p.isrs,
                                     "F elected after the others' sessions expire", timeout=40)
        got = consume_all(cluster.brokers[f].bootstrap, topic, 1, len(acked), timeout=30)
    finally:
        prod.close()
    seqs = {int(v.decode().split(":")[1]) for _, v in got[0]}
    missing = sorted(set(acked) - seqs)
    assert not missing, (f"{len(missing)} of {len(acked)} acknowledged records lost after F (ISR {state_isr}) "
                         f"was elected; e.g. {missing[:5]}")


# --- 2 -----------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.run_alone  # reconnects within 1 s, produce within 5 s: missed once beside 3 other workers
def test_brokers_reconnect_promptly_after_zookeeper_outage(make_cluster: Any) -> None:
    """Finding: "ZooKeeper reconnect backoff is unbounded (kazoo's default doubles up to an
    hour). After a ZooKeeper outage of 10–30 s, healthy brokers reconnect long after it is
    back, their sessions expire, the controller declares them dead." Acceptance: "every broker
    reconnects within 1 s of its return, no healthy broker loses its session, and acks=all
    produce resumes within 5 s." As in the acceptance: a 30 s outage, with the default 6 s
    session timeout; a restarted ZooKeeper restores sessions and gives each its timeout
    again, so every session survives if its broker reconnects promptly."""
    cluster = make_cluster({"zookeeper.session.timeout.ms": "6000"}).start()
    topic = "outage"
    cluster.create_topic(topic, partitions=1, rf=3, config={"min.insync.replicas": "2"})
    before = broker_session_ids(cluster)
    assert len(before) == 3
    cluster.zookeeper.stop()
    time.sleep(30)
    # start() returns once ZooKeeper serves ("its return"), not when its port opens (earlier;
    # timed from there, one whole-suite run of three saw a broker at 2.45 s, cause unproven).
    cluster.zookeeper.start()
    back = time.monotonic()
    reconnected: dict[int, float] = {}
    while time.monotonic() - back < 30 and len(reconnected) < 3:
        live = connected_sessions(cluster)
        for b, sid in before.items():
            if sid in live and b not in reconnected:
                reconnected[b] = time.monotonic() - back
        time.sleep(0.05)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 20000})
    producer.produce(topic, b"after-outage", partition=0)
    assert producer.flush(20) == 0
    produce_s = time.monotonic() - back  # from ZooKeeper's return to the acknowledgement
    after = broker_session_ids(cluster)
    late = {b: round(reconnected.get(b, float("inf")), 2) for b in before if reconnected.get(b, 99) > 1.0}
    assert not late, f"brokers reconnected to ZooKeeper more than 1 s after it returned: {late} (s)"
    assert after == before, f"sessions changed across the outage: before {before}, after {after}"
    assert produce_s <= 5, f"acks=all produce took {produce_s:.1f}s after ZooKeeper returned"


# --- 3 -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_leader_does_not_add_unregistered_follower_to_isr(make_cluster: Any) -> None:
    """Finding: "The controller and the leader fight over the ISR while a fetching follower is
    not registered (its ZK session expired but it keeps fetching from the leader): the
    controller drops it, the leader re-adds it, ~40 ISR writes per second; producers see
    NOT_ENOUGH_REPLICAS and success alternate, duplicates appear." As KIP-841: a leader never
    adds a replica that is not registered (or is fenced) to the ISR."""
    cluster = make_cluster()
    # Every broker reaches ZooKeeper through its own proxy; one follower's link is cut below.
    proxies = {i: TcpProxy("127.0.0.1", cluster.zookeeper.port).start() for i in cluster.brokers}
    try:
        for i, proxy in proxies.items():
            cluster.brokers[i].overrides["zookeeper.connect"] = f"{proxy.address}/dmq"
        cluster.start()
        topic = "fight"
        cluster.create_topic(topic, partitions=1, rf=3, config={"min.insync.replicas": "2"})
        leader = cluster.partition(topic).leader
        victim = max(b for b in cluster.brokers if b != leader and b != cluster.controller_id())
        proxies[victim].cut()
        live = [b for b in cluster.brokers if b != victim]
        cluster.wait_for(lambda: victim not in {b.id for b in cluster.metadata(via=live).brokers.values()},
                         "the victim's session expires", timeout=30)
        zk = KazooClient(hosts=cluster.zookeeper.connect, timeout=5)
        zk.start(10)
        try:
            path = f"/dmq/brokers/topics/{topic}/partitions/0/state"
            time.sleep(3)  # let the controller act on the expiry
            _, first = zk.get(path)
            isr_with_victim = 0
            samples = 0
            window = time.monotonic() + 6
            while time.monotonic() < window:
                data, _ = zk.get(path)
                samples += 1
                isr_with_victim += victim in json.loads(data)["isr"]
                time.sleep(0.1)
            _, last = zk.get(path)
        finally:
            zk.stop()
            zk.close()
        writes = last.version - first.version
        assert writes <= 2, f"{writes} ISR writes in 6 s while broker {victim} was unregistered (ISR fight)"
        assert isr_with_victim == 0, (f"the unregistered broker {victim} was in the ISR in "
                                      f"{isr_with_victim}/{samples} samples")
    finally:
        for proxy in proxies.values():
            proxy.close()


# --- 4 -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_broker_serves_requests_while_zookeeper_is_unresponsive(make_cluster: Any) -> None:
    """Finding: "Handlers make blocking ZooKeeper calls on the event loop": with ZooKeeper
    paused, a broker that leads a partition must still answer ApiVersions, Metadata and
    Produce acks=1 for a partition it leads promptly (within 1 s) while a request that needs
    ZooKeeper (an auto-creating Metadata request) is in flight on another connection."""
    cluster = make_cluster().start()
    topic = "serve"
    cluster.create_topic(topic, partitions=1, rf=1)
    leader = cluster.partition(topic).leader
    port = cluster.brokers[leader].port
    cluster.zookeeper.pause()
    blocker = WireClient("127.0.0.1", port, timeout=30)
    try:
        _, frame = blocker.encode(metadata_request("brand-new-topic"))
        blocker.send_raw(frame)  # needs ZooKeeper: may wait, but only on its own connection
        time.sleep(0.5)
        requests: dict[str, Any] = {
            "ApiVersions": ApiVersionsRequest(client_software_name="t",  # type: ignore[arg-type]
                                              client_software_version="1"),
            "Metadata": metadata_request(topic, create=False),
            "Produce acks=1": produce_request(topic, 0, [b"x"], acks=1),
        }
        results: dict[str, tuple[float, Any]] = {}

        def run(name: str) -> None:
            results[name] = timed_request(port, requests[name], 5)

        threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in requests]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    finally:
        blocker.close()
        cluster.zookeeper.resume()
    slow = {k: (round(s, 2), type(r).__name__) for k, (s, r) in results.items() if s > 1.0 or isinstance(r, Exception)}
    assert not slow, f"with ZooKeeper paused the leader did not answer within 1 s: {slow}"
    assert results["ApiVersions"][1].error_code == ErrorCode.none


# --- 5 -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_sigterm_during_zookeeper_outage_exits_within_bound(make_cluster: Any) -> None:
    """Finding: "SIGTERM during a ZooKeeper outage hangs (controlled shutdown waits forever;
    57 s until SIGKILL)." The broker must exit within controlled.shutdown.max.retries ×
    controlled.shutdown.retry.backoff.ms plus a few seconds."""
    cluster = make_cluster({"controlled.shutdown.max.retries": "2",
                            "controlled.shutdown.retry.backoff.ms": "1000",
                            "zookeeper.session.timeout.ms": "10000"}).start()
    cluster.create_topic("term", partitions=3, rf=3)
    cluster.zookeeper.stop()
    time.sleep(1)
    b = cluster.brokers[2]
    assert b.proc is not None
    bound = 2 * 1.0 + 5
    start = time.monotonic()
    b.proc.send_signal(signal.SIGTERM)
    try:
        b.proc.wait(bound)
    except Exception:  # noqa: BLE001 - asserted below
        pass
    took = time.monotonic() - start
    exited = b.proc.poll() is not None
    assert exited, f"broker still running {took:.1f}s after SIGTERM during a ZooKeeper outage (bound {bound}s)"


# --- 6 -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_broker_restarted_while_old_session_lingers_waits_and_rejoins(make_cluster: Any) -> None:
    """Finding: "A broker restarted while its old session lingers exits claiming another live
    broker owns its id." SIGKILL and immediate restart: the old ephemeral /brokers/ids znode
    lives until the session times out; the broker must wait, say in its log what it waits
    for, and rejoin, not exit."""
    cluster = make_cluster({"zookeeper.session.timeout.ms": "8000"}).start()
    cluster.create_topic("rejoin", partitions=1, rf=3)
    b = cluster.brokers[2]
    old_log = len(b.log_text())
    b.kill()
    result: dict[str, Any] = {}

    def restart() -> None:
        try:
            b.start(timeout=40)
            result["ok"] = True
        except Exception as e:  # noqa: BLE001 - asserted below
            result["error"] = e

    t = threading.Thread(target=restart, daemon=True)
    t.start()
    t.join(45)
    new_log = b.log_text()[old_log:]
    assert "error" not in result, f"restarted broker failed: {result['error']!s:.600}"
    cluster.wait_for(lambda: 2 in {x.id for x in cluster.metadata().brokers.values()}, "broker 2 registered",
                     timeout=30)
    time.sleep(10)  # longer than the session timeout: the broker must stay up
    assert b.alive(), f"restarted broker exited; log tail:\n{new_log[-1500:]}"
    assert re.search(r"(registered|registration|session).*wait\w*|wait\w*.*(registration|session)",
                     new_log, re.I), (
        "the restarted broker did not log what it was waiting for; log:\n" + new_log[-1500:])


@pytest.mark.slow
def test_broker_waiting_for_its_old_session_outlasts_a_zookeeper_restart(make_cluster: Any) -> None:
    """Found by a chaos run (seed 108): a broker restarted while its old registration
    lingered, ZooKeeper restarted while it waited, and the broker exited with "ZooKeeper did
    not answer create /brokers/ids/1". It must wait for ZooKeeper as a first connection
    would (zookeeper.connection.timeout.ms), then register and stay up."""
    cluster = make_cluster({"zookeeper.session.timeout.ms": "8000"}).start()
    b = cluster.brokers[2]
    old_log = len(b.log_text())
    b.kill()
    result: dict[str, Any] = {}

    def restart() -> None:
        try:
            b.start(timeout=60)
            result["ok"] = True
        except Exception as e:  # noqa: BLE001 - asserted below
            result["error"] = e

    t = threading.Thread(target=restart, daemon=True)
    t.start()
    cluster.wait_for(lambda: "still registered by an earlier session" in b.log_text()[old_log:],
                     "the restarted broker waits for its old registration", timeout=30)
    cluster.zookeeper.stop()
    # Longer than one ZooKeeper call waits (the 8 s session timeout) plus the connection
    # timeout (8 s more): registration waits for ZooKeeper as long as it takes, as Kafka's
    # does once connected (a CI run whose ZooKeeper took a few seconds to start again saw the
    # broker exit after 16 s). ZooKeeper gives the earlier session a full timeout again when it
    # starts, so the wait for the stale registration starts over too.
    time.sleep(18)
    cluster.zookeeper.start()
    t.join(65)
    new_log = b.log_text()[old_log:]
    assert "error" not in result, f"restarted broker failed: {str(result['error'])[:300]}"
    assert "ZooKeeper stopped answering while broker 2 registers" in new_log, new_log[-1500:]
    assert "ZooKeeper answers again; broker 2 registered" in new_log, new_log[-1500:]
    cluster.wait_for(lambda: 2 in {x.id for x in cluster.metadata().brokers.values()}, "broker 2 registered",
                     timeout=30)
    assert b.alive(), f"restarted broker exited; log tail:\n{new_log[-1500:]}"


# --- 7 -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_concurrent_auto_create_metadata_answers_without_closing_connections(make_cluster: Any) -> None:
    """Finding: "A Metadata request that auto-creates a topic the broker's cache has not seen
    yet trips an AssertionError (dmq/handlers/metadata.py: ZooKeeper answers the topic exists,
    the watch-fed cache does not have it yet) and the client's connection is closed." Every
    answer must be a topic with a leader or LEADER_NOT_AVAILABLE, over an open connection."""
    cluster = make_cluster({"auto.create.topics.enable": "true"}).start()
    names = [f"auto-{i}" for i in range(20)]
    ports = [b.port for b in cluster.brokers.values()]
    failures: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(12)

    def worker(i: int) -> None:
        port = ports[i % len(ports)]
        try:
            with WireClient("127.0.0.1", port, timeout=20) as c:
                barrier.wait(10)
                for name in names:
                    resp = c.request(metadata_request(name))
                    for t in resp.topics:
                        ok = t.error_code in (ErrorCode.none, ErrorCode.leader_not_available)
                        ok = ok and all(p.error_code in (ErrorCode.none, ErrorCode.leader_not_available)
                                        for p in t.partitions)
                        if not ok:
                            with lock:
                                failures.append(f"{name} via {port}: {t.error_code!r}")
        except Exception as e:  # noqa: BLE001 - collected and asserted
            with lock:
                failures.append(f"worker {i} via {port}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    logs = "\n".join(b.log_text() for b in cluster.brokers.values())
    asserts = [line for line in logs.splitlines() if "AssertionError" in line or "closing the connection" in line]
    assert not failures and not asserts, (f"{len(failures)} failed answers, e.g. {failures[:3]}; "
                                          f"broker log lines: {asserts[:3]}")
