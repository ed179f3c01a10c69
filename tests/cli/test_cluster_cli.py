"""``dmq cluster``: a local cluster run by the CLI, with real ZooKeeper and broker processes."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from support.cluster_cli import CliCluster, lines_matching, processes_under
from support.zookeeper import available


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[type[CliCluster]]:
    if not available():
        pytest.skip("Debian's zookeeper package is not installed (scripts/test.sh installs it)")
    made: list[CliCluster] = []

    def make(brokers: int = 3, overrides: dict[str, str] | None = None) -> CliCluster:
        c = CliCluster(tmp_path / f"cluster{len(made)}", brokers, overrides)
        made.append(c)
        return c

    try:
        yield make  # type: ignore[misc]
    finally:
        for c in made:
            c.close()


def create_topic(c: CliCluster, name: str, partitions: int, rf: int,
                 config: dict[str, str] | None = None) -> None:
    admin = c.admin()
    admin.create_topics([NewTopic(name, partitions, rf, config=config or {})])[name].result(30)
    c.wait_for(lambda: all(len(p.isrs) == rf and p.leader >= 0 for p in
                           admin.list_topics(name, timeout=10).topics[name].partitions.values()),
               f"{name} fully in sync")


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    """acks=all, every record acknowledged."""
    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 30000, "topic.metadata.refresh.interval.ms": 1000})
    for v in values:
        p.produce(topic, v.encode(), on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(40) == 0, "records still in flight"
    assert not errors, errors


def test_ctrl_c_on_a_foreground_cluster_stops_brokers_cleanly_then_zookeeper(make_cluster) -> None:  # noqa: ANN001
    c = make_cluster(brokers=2)
    proc = c.start_foreground()
    c.wait_output("bootstrap servers")
    # Each broker leads a partition the other replicates: controlled shutdown has leadership to move.
    create_topic(c, "ctrl-c", partitions=2, rf=2)
    produce(c.bootstrap, "ctrl-c", [str(i) for i in range(20)])

    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    assert proc.wait(90) == 0, c.output()

    assert processes_under(c.base) == {}, c.output()
    for b in (1, 2):
        log = c.log(b)
        assert "controlled shutdown: leadership moved away" in log, log[-3000:]
        assert "cannot reach ZooKeeper" not in log and "incomplete" not in log, log[-3000:]
        assert "shut down cleanly" in log, log[-3000:]
    out = c.output()
    stopped = lines_matching(out, r"broker \d stopped")
    zk = lines_matching(out, r"ZooKeeper stopped")
    assert len(stopped) == 2 and len(zk) == 1 and max(stopped) < zk[0], out
