"""The admin commands people know from kafka-topics.sh, kafka-consumer-groups.sh,
kafka-configs.sh and rpk (issue 10): topic ids and replication factors, internal-topic
and partition-health filters, group views with TOTAL-LAG, configs describe/alter."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.broker import BrokerProcess
from support.cli import run_dmq
from support.cluster import Cluster
from support.zookeeper import available as zookeeper_available


def _produce(bootstrap: str, topic: str, n: int, partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), partition=partition)
    assert p.flush(30) == 0


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    c.close()


def test_topics_list_and_describe_show_what_kafka_topics_shows(broker: BrokerProcess) -> None:
    run_dmq(broker.bootstrap, "topics", "create", "adm-t", "-p", "2")
    _commit(broker.bootstrap, "adm-g0", "adm-t", 0)  # creates __consumer_offsets
    listed = run_dmq(broker.bootstrap, "topics", "list").stdout.split()
    assert "adm-t" in listed and "__consumer_offsets" in listed
    trimmed = run_dmq(broker.bootstrap, "topics", "list", "--exclude-internal").stdout.split()
    assert "adm-t" in trimmed and not any(n.startswith("__") for n in trimmed)
    out = run_dmq(broker.bootstrap, "topics", "describe", "adm-t").stdout
    m = re.search(r"adm-t  id (\S+)  2 partitions  replication factor 1", out)
    assert m and len(m.group(1)) == 22, out  # a base64 topic id, as kafka-topics.sh prints it
    healthy = run_dmq(broker.bootstrap, "topics", "describe", "--under-replicated-partitions",
                      "--unavailable-partitions").stdout
    assert "No under-replicated or unavailable partitions." in healthy


def test_topics_describe_shows_each_partitions_size(broker: BrokerProcess) -> None:
    """The size column is the leader's log size from DescribeLogDirs: the segment files on disk."""
    run_dmq(broker.bootstrap, "topics", "create", "adm-size", "-p", "2")
    p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for _ in range(300):
        p.produce("adm-size", b"x" * 1000, partition=0)
    assert p.flush(30) == 0
    on_disk = sum(f.stat().st_size for f in (broker.data_dir / "adm-size-0").glob("*.log"))
    assert on_disk > 300_000
    out = run_dmq(broker.bootstrap, "topics", "describe", "adm-size").stdout
    rows = [[c.strip() for c in line.strip("│┃ ").split("│")] for line in out.splitlines() if "│" in line]
    assert [(r[0], r[5]) for r in rows] == [("0", f"{on_disk / 1024:.1f} KiB"), ("1", "0 B")], out
    assert f"replication factor 1  size {on_disk / 1024:.1f} KiB" in out, out


def test_groups_describe_views_and_total_lag(broker: BrokerProcess) -> None:
    run_dmq(broker.bootstrap, "topics", "create", "adm-lag", "-p", "1")
    _produce(broker.bootstrap, "adm-lag", 30)
    _commit(broker.bootstrap, "adm-g1", "adm-lag", 12)
    _commit(broker.bootstrap, "adm-g2", "adm-lag", 30)
    out = run_dmq(broker.bootstrap, "groups", "describe", "adm-g1").stdout
    assert re.search(r"adm-lag\s+│\s+0\s+│\s+12\s+│\s+30\s+│\s+18\s+│", out), out
    assert "TOTAL-LAG 18" in out
    every = run_dmq(broker.bootstrap, "groups", "describe", "--all-groups").stdout
    assert "Group adm-g1" in every and "Group adm-g2" in every and "TOTAL-LAG 0" in every
    state = run_dmq(broker.bootstrap, "groups", "describe", "adm-g1", "--state").stdout
    assert re.search(r"adm-g1\s+│\s+Empty\s+│", state), state
    members = run_dmq(broker.bootstrap, "groups", "describe", "adm-g1", "--members").stdout
    assert "consumer-id" in members and "members 0" in members
    bad = run_dmq(broker.bootstrap, "groups", "describe", check=False)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: name one group or pass --all-groups"


def test_configs_describe_and_alter(broker: BrokerProcess) -> None:
    run_dmq(broker.bootstrap, "topics", "create", "adm-cfg", "-p", "1", "-c", "retention.ms=60000")
    out = run_dmq(broker.bootstrap, "configs", "describe", "--topic", "adm-cfg").stdout
    assert re.search(r"retention\.ms\s+│\s+60000\s+│\s+DYNAMIC_TOPIC_CONFIG", out), out
    assert "cleanup.policy" not in out  # defaults only with --all
    altered = run_dmq(broker.bootstrap, "configs", "alter", "--topic", "adm-cfg",
                      "--set", "segment.bytes=1048576", "--delete", "retention.ms").stdout
    assert "Altered topic adm-cfg: segment.bytes=1048576, retention.ms (deleted)" in altered
    full = run_dmq(broker.bootstrap, "configs", "describe", "--topic", "adm-cfg", "--all").stdout
    assert re.search(r"segment\.bytes\s+│\s+1048576\s+│\s+DYNAMIC_TOPIC_CONFIG", full), full
    # its synonyms in rows under it: the broker config its default comes from
    assert re.search(r"│ retention\.ms\s+│\s+604800000\s+│\s+DEFAULT_CONFIG\s+│\n│\s+↳ log\.retention", full), full
    broker_cfg = run_dmq(broker.bootstrap, "configs", "describe", "--broker", "0").stdout
    assert "STATIC_BROKER_CONFIG" in broker_cfg
    missing = run_dmq(broker.bootstrap, "configs", "describe", "--topic", "adm-none", check=False)
    assert missing.returncode == 1 and len(missing.stderr.splitlines()) == 1
    assert "adm-none" in missing.stderr and "ConfigResource" not in missing.stderr
    unknown = run_dmq(broker.bootstrap, "configs", "alter", "--topic", "adm-cfg", "--set", "no.such=1",
                      check=False)
    assert unknown.returncode == 1 and "no.such" in unknown.stderr
    usage = run_dmq(broker.bootstrap, "configs", "describe", check=False)
    assert usage.returncode == 2


@pytest.mark.skipif(not zookeeper_available(), reason="Debian's zookeeper package is not installed")
def test_under_replicated_and_unavailable_partitions_show_once_brokers_stop(tmp_path: Path) -> None:
    c = Cluster(tmp_path, size=2, overrides={"replica.lag.time.max.ms": "2000"}).start()
    try:
        c.create_topic("adm-ur", partitions=2, rf=2)
        c.create_topic("adm-one", partitions=1, rf=1)
        boot = c.bootstrap
        flags = ("topics", "describe", "--under-replicated-partitions")
        assert "No under-replicated partitions." in run_dmq(boot, *flags).stdout
        lone = c.partition("adm-one").leader
        other = 1 if lone == 2 else 2
        c.brokers[lone].stop()
        live = c.brokers[other].bootstrap
        c.wait_for(lambda: "adm-ur" in run_dmq(live, *flags).stdout, "an under-replicated adm-ur")
        out = run_dmq(live, "topics", "describe", "--unavailable-partitions").stdout
        assert "adm-one" in out and "none" in out and "adm-ur" not in out, out
    finally:
        c.stop()


def _row(out: str, name: str) -> list[str]:
    """The cells of the table row of config ``name``."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0] == name:
            return cells
    raise AssertionError(f"no row {name} in:\n{out}")


def test_configs_of_a_broker_and_of_the_broker_defaults(fresh_broker: BrokerProcess) -> None:
    """kafka-configs.sh --entity-type brokers --entity-name 0 / --entity-default."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

    b = fresh_broker.start()
    rate = "follower.replication.throttled.rate"  # dmq's dynamic broker config
    res = run_dmq(b.bootstrap, "configs", "alter", "--broker", "0", "--set", f"{rate}=1000000")
    assert res.stdout == f"Altered broker 0: {rate}=1000000\n"
    assert _row(run_dmq(b.bootstrap, "configs", "describe", "--broker", "0").stdout, rate) == [
        rate, "1000000", "DYNAMIC_BROKER_CONFIG"]
    # as another client sees it
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    entry = admin.describe_configs([resource])[resource].result(30)[rate]
    assert (entry.value, entry.source) == ("1000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    # The cluster-wide default ("--entity-default"): it said "unexpected ValueError: Invalid
    # ConfigResource(4,)", confluent-kafka refusing the resource's empty name.
    res = run_dmq(b.bootstrap, "configs", "alter", "--broker-defaults", "--set", f"{rate}=5000000")
    assert res.stdout == f"Altered the cluster-wide broker defaults: {rate}=5000000\n", res.stderr
    defaults = run_dmq(b.bootstrap, "configs", "describe", "--broker-defaults").stdout
    assert _row(defaults, rate) == [rate, "5000000", "DYNAMIC_DEFAULT_BROKER_CONFIG"]
    assert "STATIC_BROKER_CONFIG" not in defaults  # only what is set as a default
    # the broker's own setting wins over the default; deleted, the default applies
    assert _row(run_dmq(b.bootstrap, "configs", "describe", "--broker", "0").stdout, rate)[1] == "1000000"
    run_dmq(b.bootstrap, "configs", "alter", "--broker", "0", "--delete", rate)
    assert _row(run_dmq(b.bootstrap, "configs", "describe", "--broker", "0", "--all").stdout, rate) == [
        rate, "5000000", "DYNAMIC_DEFAULT_BROKER_CONFIG"]
    res = run_dmq(b.bootstrap, "configs", "alter", "--broker-defaults", "--delete", rate)
    assert res.stdout == f"Altered the cluster-wide broker defaults: {rate} (deleted)\n"
    assert run_dmq(b.bootstrap, "configs", "describe", "--broker-defaults").stdout.splitlines()[-1] == "none"
    assert _row(run_dmq(b.bootstrap, "configs", "describe", "--broker", "0", "--all").stdout, rate)[2] == \
        "DEFAULT_CONFIG"

    # a static broker config cannot change at run time: one line, exit 1
    for target in (("--broker", "0"), ("--broker-defaults",)):
        res = run_dmq(b.bootstrap, "configs", "alter", *target, "--set", "log.retention.ms=5", check=False)
        assert res.returncode == 1 and len(res.stderr.splitlines()) == 1, res.stderr
        assert "log.retention.ms is a static broker config" in res.stderr, res.stderr
