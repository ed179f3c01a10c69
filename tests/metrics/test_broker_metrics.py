"""/metrics of a real broker under a real producer and consumer group.

The broker runs with ``metrics.listener``; confluent-kafka produces and a
consumer group consumes; every check compares a scrape with what the clients
did (records produced, offsets committed, requests librdkafka says it sent).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess, free_port
from support.metrics import (
    DASHBOARD,
    Scrape,
    dashboard_metric_names,
    dashboard_queries,
    get,
    parse,
    scrape,
)

RECORDS = 3000
VALUE = b"v" * 100
PARTITIONS = 3


@pytest.fixture(scope="module")
def metrics_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    base = tmp_path_factory.mktemp("metrics")
    port = free_port()
    proc = BrokerProcess(base / "data", overrides={"group.initial.rebalance.delay.ms": "0",
                                                   "metrics.listener": f"127.0.0.1:{port}"}).start()
    yield proc, f"http://127.0.0.1:{port}"
    proc.close()


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, count: int) -> dict[str, Any]:
    """Produce ``count`` records; returns librdkafka's last statistics for the broker (its
    requests by type)."""
    stats: list[dict[str, Any]] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "statistics.interval.ms": 100,
                  "stats_cb": lambda s: stats.append(json.loads(s))})
    for i in range(count):
        p.produce(topic, key=str(i).encode(), value=VALUE)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    seen = len(stats)
    deadline = time.monotonic() + 5
    while len(stats) < seen + 2 and time.monotonic() < deadline:  # a report made after the flush
        p.poll(0.1)
    brokers = [b for b in stats[-1]["brokers"].values() if b["nodeid"] >= 0]
    assert len(brokers) == 1
    return dict(brokers[0]["req"])


def consume(consumer: Consumer, count: int) -> int:
    got = 0
    deadline = time.monotonic() + 60
    while got < count and time.monotonic() < deadline:
        for m in consumer.consume(min(500, count - got), 1.0):
            assert m.error() is None, m.error()
            got += 1
    return got


def check_histograms(s: Scrape) -> None:
    """Every API's histogram is whole: buckets never decrease, +Inf is its count, the count
    is the API's request total."""
    requests = {lbl["request"] for lbl in s.labelled("dmq_requests_total")}
    assert requests
    for request in requests:
        buckets = sorted(((float(lbl["le"]), v) for lbl, v in s.samples["dmq_request_duration_seconds_bucket"]
                          if lbl["request"] == request), key=lambda b: b[0])
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), (request, buckets)
        assert buckets[-1][0] == float("inf")
        count = s.value("dmq_request_duration_seconds_count", request=request)
        assert buckets[-1][1] == count == s.value("dmq_requests_total", request=request)
        assert s.value("dmq_request_duration_seconds_sum", request=request) >= 0


def test_counters_follow_a_producer_and_a_consumer_group(metrics_broker: tuple[BrokerProcess, str]) -> None:
    broker, url = metrics_broker
    topic, group = "metrics-load", "metrics-group"
    create_topic(broker.bootstrap, topic)
    before = scrape(f"{url}/metrics")
    assert before.value("dmq_topic_messages_in_total", 0, topic=topic) == 0

    sent = produce(broker.bootstrap, topic, RECORDS)
    after = scrape(f"{url}/metrics")
    # Every record counted once, as its batches' bytes: on disk exactly as written.
    assert after.value("dmq_topic_messages_in_total", topic=topic) == RECORDS
    bytes_in = after.value("dmq_topic_bytes_in_total", topic=topic)
    assert bytes_in >= RECORDS * len(VALUE)
    assert after.total("dmq_log_size_bytes", topic=topic) == bytes_in
    assert after.total("dmq_log_end_offset", topic=topic) == RECORDS
    assert len(after.values("dmq_log_end_offset", topic=topic)) == PARTITIONS
    # The Produce requests librdkafka sent are the ones the broker counted.
    produced = (after.value("dmq_requests_total", request="Produce")
                - before.value("dmq_requests_total", 0, request="Produce"))
    assert produced == sent["Produce"] > 0
    for request in ("ApiVersions", "Metadata", "CreateTopics"):
        assert after.value("dmq_requests_total", request=request) >= 1
    check_histograms(after)

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        half = consume(c, RECORDS // 2)
        assert half == RECORDS // 2
        committed = c.commit(asynchronous=False)
        mid = scrape(f"{url}/metrics")
        ends = {int(lbl["partition"]): v for lbl, v in mid.samples["dmq_log_end_offset"]
                if lbl["topic"] == topic}
        offsets = {tp.partition: tp.offset for tp in committed if tp.offset >= 0}
        assert sum(offsets.values()) == half
        for partition, offset in offsets.items():
            labels = {"group": group, "topic": topic, "partition": str(partition)}
            assert mid.value("dmq_consumergroup_committed_offset", **labels) == offset
            assert mid.value("dmq_consumergroup_lag", **labels) == ends[partition] - offset
        assert mid.value("dmq_consumergroup_members", group=group) == 1
        assert mid.value("dmq_network_connections") >= 2  # the consumer's, this test's admin's

        assert consume(c, RECORDS - half) == RECORDS - half
        c.commit(asynchronous=False)
        done = scrape(f"{url}/metrics")
        lags = done.labelled("dmq_consumergroup_lag", group=group)
        assert len(lags) == PARTITIONS
        assert done.values("dmq_consumergroup_lag", group=group) == [0] * PARTITIONS
        assert done.total("dmq_consumergroup_committed_offset", group=group) == RECORDS
        # Consumers read every batch at least once.
        assert done.value("dmq_topic_bytes_out_total", topic=topic) >= bytes_in
        fetches = done.value("dmq_requests_total", request="Fetch")
        assert fetches > after.value("dmq_requests_total", 0, request="Fetch")
        for request in ("FindCoordinator", "JoinGroup", "SyncGroup", "OffsetCommit", "OffsetFetch"):
            assert done.value("dmq_requests_total", request=request) >= 1, request
        check_histograms(done)
    finally:
        c.close()
    gone = scrape(f"{url}/metrics")
    assert gone.value("dmq_consumergroup_members", group=group) == 0


def test_one_broker_is_its_own_controller_and_leads_everything(metrics_broker: tuple[BrokerProcess, str]) -> None:
    broker, url = metrics_broker
    create_topic(broker.bootstrap, "metrics-leaders", 4)
    s = scrape(f"{url}/metrics")
    assert s.value("dmq_controller_active") == 1
    assert s.value("dmq_controller_offline_partitions") == 0
    hosted = s.value("dmq_replica_partitions")
    assert hosted >= 4
    assert s.value("dmq_replica_leader_partitions") == hosted == s.value("dmq_controller_partitions")
    assert len(s.values("dmq_log_size_bytes")) == hosted
    assert s.value("dmq_replica_under_replicated_partitions") == 0
    assert s.value("dmq_replica_under_min_isr_partitions") == 0
    assert s.value("dmq_cluster_brokers") == 1
    assert s.value("dmq_broker_info", broker_id="0") == 1
    assert "dmq_zookeeper_session_state" not in s.families  # no ZooKeeper here
    for operation in ("Produce", "Fetch"):
        assert s.value("dmq_purgatory_delayed_operations", operation=operation) >= 0
    # The process, by prometheus-client's collectors: CPU, memory, open files.
    assert s.value("process_resident_memory_bytes") > 10_000_000
    assert s.value("process_open_fds") > 5
    # The event loop's CPU is its thread's own: part of the process', most of it in a
    # broker that has served a load (the loop thread is the one doing the work).
    process_cpu = s.value("process_cpu_seconds_total")
    assert 0.3 * process_cpu < s.value("dmq_event_loop_cpu_seconds_total") <= process_cpu + 0.05  # clock ticks


def test_a_waiting_fetch_is_in_the_fetch_purgatory(metrics_broker: tuple[BrokerProcess, str]) -> None:
    """A consumer long-polling an empty partition waits in the fetch purgatory."""
    broker, url = metrics_broker
    topic = "metrics-purgatory"
    create_topic(broker.bootstrap, topic, 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "metrics-waiter",
                  "auto.offset.reset": "latest", "fetch.wait.max.ms": 5000})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        waiting = 0.0
        while time.monotonic() < deadline and not waiting:
            c.poll(0.2)
            waiting = scrape(f"{url}/metrics").value("dmq_purgatory_delayed_operations", operation="Fetch")
        assert waiting >= 1
        s = scrape(f"{url}/metrics")
        assert s.value("dmq_purgatory_size", operation="Fetch") >= 1
        assert s.value("dmq_network_requests_in_flight") >= 1
    finally:
        c.close()


def test_the_exposition_parses_and_names_its_families(metrics_broker: tuple[BrokerProcess, str]) -> None:
    _, url = metrics_broker
    status, headers, body = get(f"{url}/metrics")
    assert status == 200
    s = parse(body.decode())
    assert s.families["dmq_request_duration_seconds"] == "histogram"
    assert s.families["dmq_topic_messages_in"] == "counter"
    assert s.families["dmq_replica_leader_partitions"] == "gauge"
    assert all(name.startswith(("dmq_", "process_", "python_")) for name in s.families)


def test_http_answers_only_what_it_serves(metrics_broker: tuple[BrokerProcess, str]) -> None:
    broker, url = metrics_broker
    status, _, body = get(f"{url}/")
    assert status == 200 and b"/metrics" in body
    assert get(f"{url}/nothing")[0] == 404
    port = int(url.rsplit(":", 1)[1])

    def raw(data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(data)
            chunks = []
            try:
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
            except ConnectionResetError:  # closed with our request unread
                pass
            return b"".join(chunks)

    assert raw(b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 405")
    assert raw(b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    head = raw(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")
    assert raw(b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"y" * 20000 + b"\r\n\r\n") == b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /met")  # and goes away half-way
    # Still serving, and the Kafka side too.
    assert get(f"{url}/metrics")[0] == 200
    create_topic(broker.bootstrap, "metrics-still-up", 1)
    assert "Traceback" not in broker.log_text()


def test_a_taken_metrics_port_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = subprocess.run([sys.executable, "-m", "dmq", "server", "--listen", f"127.0.0.1:{free_port()}",
                              "--data-dir", str(tmp_path / "d"), "--metrics", f"127.0.0.1:{port}"],
                             capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert f"error: cannot serve metrics on 127.0.0.1:{port}: address already in use" in res.stderr
    assert "Traceback" not in res.stderr
    bad = subprocess.run([sys.executable, "-m", "dmq", "server", "--data-dir", str(tmp_path / "e"),
                          "--metrics", "127.0.0.1:99999"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "--metrics expects one HOST:PORT" in bad.stderr


def test_every_metric_the_dashboard_queries_is_scraped(metrics_broker: tuple[BrokerProcess, str]) -> None:
    """docs/grafana/dmq.json cannot silently rot: each name its queries use is a sample of a
    real scrape (the ZooKeeper ones in tests/metrics/test_metrics_cluster.py, the share
    groups' in tests/metrics/test_sharegroup_metrics.py)."""
    broker, url = metrics_broker
    topic = "metrics-dashboard"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "metrics-dashboard",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        assert consume(c, 10) == 10
        c.commit(asynchronous=False)
        s = scrape(f"{url}/metrics")
    finally:
        c.close()
    names = dashboard_metric_names()
    assert len(dashboard_queries()) >= 30 and len(names) >= 25
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    assert all(p["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"] if p["type"] != "row")
    missing = sorted(n for n in names if not n.startswith(("dmq_zookeeper_", "dmq_sharegroup_"))
                     and n not in s.samples)
    assert not missing, f"the dashboard queries metrics no scrape has: {missing}"


def test_bytes_out_counts_each_answered_byte_once(metrics_broker: tuple[BrokerProcess, str]) -> None:
    """A fetch that finds less than fetch.min.bytes reads, waits, then reads again: only
    what it answers is BytesOut. One consumer reading a partition once gets its bytes once."""
    broker, url = metrics_broker
    topic = "metrics-bytes-out"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 200)
    bytes_in = scrape(f"{url}/metrics").value("dmq_topic_bytes_in_total", topic=topic)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "metrics-bytes-out",
                  "auto.offset.reset": "earliest", "fetch.min.bytes": 10_000_000,
                  "fetch.wait.max.ms": 300, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        assert consume(c, 200) == 200
        time.sleep(1)  # fetches past the end: waited, answered empty
    finally:
        c.close()
    assert scrape(f"{url}/metrics").value("dmq_topic_bytes_out_total", topic=topic) == bytes_in


def test_the_event_loop_lag_shows_a_blocked_loop(metrics_broker: tuple[BrokerProcess, str]) -> None:
    """The lag probe runs every half second; a broker stopped (SIGSTOP) for 0.8 s runs it
    late by more than 50 ms once it goes on, wherever in its period the stop fell. (This
    test used to block the loop by creating 600 partitions; their logs are made on a
    worker thread now.)"""
    broker, url = metrics_broker
    assert broker.proc is not None
    before = scrape(f"{url}/metrics")
    late_before = (before.value("dmq_event_loop_lag_seconds_count")
                   - before.value("dmq_event_loop_lag_seconds_bucket", le="0.05"))
    os.kill(broker.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(0.8)
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
    time.sleep(1.2)  # the probe runs twice more once the loop goes on
    after = scrape(f"{url}/metrics")
    late = (after.value("dmq_event_loop_lag_seconds_count")
            - after.value("dmq_event_loop_lag_seconds_bucket", le="0.05"))
    assert after.value("dmq_event_loop_lag_seconds_count") >= before.value("dmq_event_loop_lag_seconds_count") + 2
    assert late >= late_before + 1
    assert after.value("dmq_event_loop_lag_seconds_sum") > before.value("dmq_event_loop_lag_seconds_sum") + 0.05


def test_the_startup_heap_is_frozen_and_collector_pauses_are_exported(
        metrics_broker: tuple[BrokerProcess, str]) -> None:
    """A started broker moves its startup objects out of the cycle collector's reach
    (dmq.metrics.heap: tens of thousands, whose walks paused the loop 40-55 ms), and
    exports every collection's pause by generation."""
    _broker, url = metrics_broker
    s = scrape(f"{url}/metrics")
    assert s.value("dmq_gc_frozen_objects") > 10_000
    for generation in ("0", "1", "2"):
        count = s.value("dmq_gc_pause_seconds_count", generation=generation)
        total = s.value("dmq_gc_pause_seconds_sum", generation=generation)
        longest = s.value("dmq_gc_pause_max_seconds", generation=generation)
        assert count >= 1, generation  # startup alone runs each (the freeze's collect a gen-2 one)
        assert 0 < longest <= total
