"""/metrics of a share group (KIP-932): a real ShareConsumer, its start offset and lag."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess, free_port
from support.metrics import dashboard_metric_names, scrape

GROUP, TOPIC = "metrics-share", "metrics-share-jobs"


@pytest.fixture
def share_metrics_broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, str]]:
    port = free_port()
    b = BrokerProcess(tmp_path / "data", overrides={"metrics.listener": f"127.0.0.1:{port}"}).start()
    try:
        yield b, f"http://127.0.0.1:{port}/metrics"
    finally:
        b.close()


def test_a_share_groups_lag_goes_to_zero_as_its_records_are_accepted(
        share_metrics_broker: tuple[BrokerProcess, str]) -> None:
    broker, url = share_metrics_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(10)
    c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                       "share.acknowledgement.mode": "explicit", "log_level": 0})
    labels = {"group": GROUP, "topic": TOPIC, "partition": "0"}
    try:
        c.subscribe([TOPIC])
        # The share-partition is initialized (at the log end: share.auto.offset.reset is
        # latest) by the member's first fetch with its assignment.
        deadline = time.monotonic() + 30
        while not scrape(url).values("dmq_sharegroup_lag", **labels):  # known once initialized
            assert not c.poll(0.3)
            assert time.monotonic() < deadline, "the share-partition was never initialized"
        assert scrape(url).value("dmq_sharegroup_lag", **labels) == 0
        p = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(20):
            p.produce(TOPIC, value=f"r{i}".encode())
        assert p.flush(20) == 0
        s = scrape(url)
        assert s.value("dmq_sharegroup_start_offset", **labels) == 0
        assert s.value("dmq_sharegroup_lag", **labels) == 20
        # The Grafana dashboard's share-group names are in this scrape.
        share_names = sorted(n for n in dashboard_metric_names() if n.startswith("dmq_sharegroup_"))
        assert share_names and all(n in s.samples for n in share_names), share_names

        got = 0
        deadline = time.monotonic() + 30
        while got < 20 and time.monotonic() < deadline:
            for m in c.poll(0.3):
                assert m.error() is None, m.error()
                c.acknowledge(m, AcknowledgeType.ACCEPT)
                got += 1
        assert got == 20
        assert c.commit_sync(10) is not None
        # Share fetches count as the topic's BytesOut: each record delivered once here.
        now = scrape(url)
        assert now.value("dmq_topic_bytes_out_total", topic=TOPIC) == now.value("dmq_topic_bytes_in_total", topic=TOPIC)

        def done() -> bool:
            now = scrape(url)
            return (now.value("dmq_sharegroup_lag", **labels) == 0
                    and now.value("dmq_sharegroup_start_offset", **labels) == 20)

        deadline = time.monotonic() + 20
        while not done():
            assert time.monotonic() < deadline, scrape(url).values("dmq_sharegroup_lag", **labels)
            time.sleep(0.2)
    finally:
        c.close()
