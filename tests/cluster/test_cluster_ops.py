"""Cluster operations: reassignment, controlled shutdown, preferred election and the CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigSource
from support.cluster import Cluster
from support.ports import free_port, free_port_block
from support.zookeeper import available
from test_replication import BackgroundProducer, check_exactly_once_in_order, wait_acked_growth


def dmq(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dmq", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def test_reassignment_moves_a_partition_while_producing(cluster: Cluster) -> None:
    topic = "moving"
    cluster.create_topic(topic, partitions=1, rf=2)
    before = cluster.partition(topic)
    spare = next(b for b in cluster.brokers if b not in before.replicas)
    target = [spare, before.replicas[1]]
    removed = before.replicas[0]
    prod = BackgroundProducer(cluster.bootstrap, topic, 1, rate=300).start()
    wait_acked_growth(prod, 600)
    out = dmq("partitions", "reassign", "--topic", topic, "--partition", "0",
              "--replicas", ",".join(map(str, target)), "-b", cluster.bootstrap)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "done" in out.stdout
    wait_acked_growth(prod, 300)
    prod.finish()
    after = cluster.partition(topic)
    assert after.replicas == target and sorted(after.isrs) == sorted(target)
    assert after.leader in target
    check_exactly_once_in_order(cluster, topic, 1, prod)
    # The old replica's log is gone from the broker that no longer hosts it.
    cluster.wait_for(lambda: not (cluster.brokers[removed].data_dir / f"{topic}-0").exists(),
                     "the removed replica's log deleted")
    assert dmq("partitions", "reassign", "-t", topic, "-p", "0", "-r", "1,1",
               "-b", cluster.bootstrap).returncode == 1


def test_controlled_shutdown_moves_leadership_before_exit(cluster: Cluster) -> None:
    topic = "graceful"
    cluster.create_topic(topic, partitions=3, rf=3, config={"min.insync.replicas": "2"})
    prod = BackgroundProducer(cluster.bootstrap, topic, 3).start()
    wait_acked_growth(prod, 500)
    victim = cluster.partition(topic, 0).leader
    started = time.monotonic()
    assert cluster.brokers[victim].stop(timeout=60) == 0
    took = time.monotonic() - started
    log_text = cluster.brokers[victim].log_path.read_text()
    assert "controlled shutdown: leadership moved away" in log_text
    # Listed once the new leaders lead (Metadata names a leader only then).
    cluster.wait_for(lambda: all(p.leader not in (-1, victim)
                                 for p in cluster.metadata(topic).topics[topic].partitions.values()),
                     "the partitions listed with their new leaders", timeout=10)
    assert took < 30
    wait_acked_growth(prod, 300)
    # It returns, catches up, and leadership goes back on request (preferred leader election).
    cluster.brokers[victim].start(timeout=60)
    cluster.wait_for(lambda: all(len(p.isrs) == 3 for p in cluster.metadata(topic).topics[topic].partitions.values()),
                     "the broker back in every ISR", timeout=60)
    out = dmq("partitions", "elect-leaders", "--topic", topic, "-b", cluster.bootstrap)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "elected" in out.stdout
    cluster.wait_for(lambda: all(p.leader == p.replicas[0]
                                 for p in cluster.metadata(topic).topics[topic].partitions.values()),
                     "the preferred replicas listed as leaders", timeout=10)
    prod.finish()
    assert not prod.errors, prod.errors[:3]
    check_exactly_once_in_order(cluster, topic, 3, prod)


def test_cluster_status_shows_controller_and_under_replicated(cluster: Cluster) -> None:
    cluster.create_topic("watched", partitions=2, rf=3)
    out = dmq("cluster", "status", "-b", cluster.bootstrap)
    assert out.returncode == 0, out.stderr
    assert "controller" in out.stdout and "watched" in out.stdout
    assert "0 under-replicated, 0 offline" in out.stdout
    victim = next(b for b in cluster.brokers if b != cluster.controller_id())
    cluster.brokers[victim].kill()
    cluster.wait_for(lambda: all(len(p.isrs) == 2 for p in cluster.metadata("watched").topics["watched"].partitions.values()),
                     "the dead broker out of every ISR", timeout=30)
    out = dmq("cluster", "status", "-b", cluster.bootstrap)
    assert "under-replicated" in out.stdout and f"(down: {victim})" in out.stdout
    assert "2 under-replicated" in out.stdout


@pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")
def test_cluster_start_runs_a_local_cluster(tmp_path: Path) -> None:
    base = free_port_block(2)
    proc = subprocess.Popen([sys.executable, "-m", "dmq", "cluster", "start", "--brokers", "2",
                             "--data-dir", str(tmp_path / "c"), "--base-port", str(base),
                             "--zookeeper-port", str(free_port()),
                             "--override", "zookeeper.session.timeout.ms=4000"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        seen = ""
        while "bootstrap servers" not in seen and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
        assert "bootstrap servers" in seen, seen
        bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 1}"
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        p.produce("dev", b"hello")
        assert p.flush(30) == 0
        out = dmq("cluster", "status", "-b", bootstrap)
        assert "dev" in out.stdout and "2 brokers" in out.stdout, out.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, rest
    assert "cluster stopped" in rest


def test_delete_topic_and_add_partitions_on_every_broker(cluster: Cluster) -> None:
    from confluent_kafka.admin import NewPartitions

    cluster.create_topic("grow", partitions=1, rf=3)
    admin = cluster.admin()
    admin.create_partitions([NewPartitions("grow", 3)])["grow"].result(30)
    cluster.wait_for(lambda: len(cluster.metadata("grow").topics["grow"].partitions) == 3
                     and all(len(p.isrs) == 3 for p in cluster.metadata("grow").topics["grow"].partitions.values()),
                     "the new partitions replicated")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    p.produce("grow", b"x", partition=2)
    assert p.flush(20) == 0
    assert all((b.data_dir / "grow-2").exists() for b in cluster.brokers.values())
    admin.delete_topics(["grow"])["grow"].result(30)
    cluster.wait_for(lambda: not any((b.data_dir / f"grow-{i}").exists()
                                     for b in cluster.brokers.values() for i in range(3)),
                     "every replica's log deleted")
    # Metadata marks a dead broker's replicas offline.
    cluster.create_topic("marks", partitions=1, rf=3)
    victim = next(b for b in cluster.brokers if b != cluster.partition("marks").leader)
    cluster.brokers[victim].kill()
    cluster.wait_for(lambda: victim not in cluster.partition("marks").isrs, "the dead replica out of the ISR")
    from dmq.client.wire import WireClient
    from dmq.protocol.codec import make, request_class, request_module

    R = request_class(3, 12)
    mod = request_module(3, 12)
    survivor = next(b for i, b in cluster.brokers.items() if i != victim)

    def survivor_metadata() -> Any:
        with WireClient("127.0.0.1", survivor.port) as c:
            return c.request(make(R, topics=(make(mod.MetadataRequestTopic, name="marks", topic_id=None),),
                                  allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                                  include_topic_authorized_operations=False))

    # The leader may drop the dead follower from the ISR (replica.lag.time.max.ms) before its
    # ZooKeeper session expires; the broker counts as down only once /brokers/ids/<id> is gone.
    # Either change reaches the survivor's metadata on its own (the wait above read some
    # broker's, not necessarily the survivor's): wait until it has both.
    def without_victim() -> Any:
        m = survivor_metadata()
        return m if (victim not in {b.node_id for b in m.brokers}
                     and victim not in m.topics[0].partitions[0].isr_nodes) else None

    md = cluster.wait_for(without_victim, "the survivor to see the victim's registration gone "
                          "and the victim out of the ISR")
    part = md.topics[0].partitions[0]
    assert list(part.offline_replicas) == [victim]
    assert victim in part.replica_nodes and victim not in part.isr_nodes


def _broker_config(port: int, broker_id: int, name: str) -> tuple[str | None, int]:
    """(value, config source) of one broker config, as that broker describes it."""
    from dmq.client.wire import WireClient
    from dmq.protocol.codec import make, request_class, request_module

    mod = request_module(32, 4)
    with WireClient("127.0.0.1", port) as c:
        resp = c.request(make(request_class(32, 4), include_synonyms=False, include_documentation=False,
                              resources=(make(mod.DescribeConfigsResource, resource_type=4,
                                              resource_name=str(broker_id), configuration_keys=(name,)),)))
    entry = resp.results[0].configs[0]
    return entry.value, entry.config_source


def test_throttled_reassignment_copies_at_the_rate_and_clears_the_throttle(cluster: Cluster) -> None:
    topic, rate = "throttled", 500_000
    cluster.create_topic(topic, partitions=1, rf=1)
    source = cluster.partition(topic).leader
    receiver = next(b for b in cluster.brokers if b != source)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20})
    payload = os.urandom(1000)  # incompressible, and the producer does not compress
    for _ in range(4000):
        p.produce(topic, payload)
        p.poll(0)
    assert p.flush(30) == 0
    data_bytes = sum(f.stat().st_size for f in (cluster.brokers[source].data_dir / f"{topic}-0").glob("*.log"))
    assert data_bytes > 4_000_000

    proc = subprocess.Popen([sys.executable, "-m", "dmq", "partitions", "reassign", "-t", topic, "-p", "0",
                             "-r", f"{source},{receiver}", "--throttle", str(rate), "-b", cluster.bootstrap],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    started = time.monotonic()
    try:
        # While it copies, the receiving broker runs with the throttle as a dynamic config.
        port = cluster.brokers[receiver].port
        cluster.wait_for(lambda: _broker_config(port, receiver, "follower.replication.throttled.rate")
                         == (str(rate), ConfigSource.DYNAMIC_BROKER_CONFIG.value), "the throttle set", timeout=15)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    took = time.monotonic() - started
    assert proc.returncode == 0, out
    assert f"throttled replication to {rate:,} B/s on broker(s) {receiver}" in out
    assert "removed the replication throttle" in out and "done" in out
    # One second's burst, then the rate: (bytes - rate) / rate seconds at the least.
    assert took >= (data_bytes - rate) / rate * 0.8, f"{data_bytes} bytes copied in {took:.1f}s"
    assert data_bytes / took < rate * 1.5
    after = cluster.partition(topic)
    assert after.replicas == [source, receiver] and sorted(after.isrs) == sorted([source, receiver])
    moved = sum(f.stat().st_size for f in (cluster.brokers[receiver].data_dir / f"{topic}-0").glob("*.log"))
    assert moved == data_bytes
    # The throttle is gone again.
    assert _broker_config(port, receiver, "follower.replication.throttled.rate")[1] == ConfigSource.DEFAULT_CONFIG.value
    assert "dynamic broker config follower.replication.throttled.rate is now 500000" in \
        cluster.brokers[receiver].log_path.read_text()
    # The command to set and clear it by hand, for moves started with --no-wait.
    assert dmq("partitions", "throttle", "--brokers", str(receiver), "--rate", "1000",
               "-b", cluster.bootstrap).returncode == 0
    # Written to ZooKeeper by the broker asked; the receiver applies it when its watch fires
    # (Kafka's dynamic broker configs take the same way), so it is waited for, not assumed.
    cluster.wait_for(lambda: _broker_config(port, receiver, "follower.replication.throttled.rate")[0] == "1000",
                     "the throttle set by hand", timeout=15)
    assert dmq("partitions", "throttle", "--brokers", str(receiver), "--clear", "-b", cluster.bootstrap).returncode == 0
    assert dmq("partitions", "throttle", "--brokers", str(receiver), "-b", cluster.bootstrap).returncode == 2


def test_topic_config_altered_through_any_broker_applies_on_the_leader(cluster: Cluster) -> None:
    from confluent_kafka import KafkaError

    from dmq.client.wire import WireClient
    from dmq.protocol.codec import make, request_class, request_module

    topic = "limited"
    cluster.create_topic(topic, partitions=1, rf=1)
    leader = cluster.partition(topic).leader
    other = next(b for i, b in cluster.brokers.items() if i != leader)
    mod = request_module(44, 1)
    with WireClient("127.0.0.1", other.port) as c:
        resp = c.request(make(request_class(44, 1), validate_only=False, resources=(make(
            mod.AlterConfigsResource, resource_type=2, resource_name=topic, configs=(make(
                mod.AlterableConfig, name="max.message.bytes", config_operation=0, value="2000"),)),)))
    assert resp.responses[0].error_code == 0

    def too_large_refused() -> bool:
        errors: list[KafkaError] = []
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "retries": 0})
        p.produce(topic, b"x" * 5000, on_delivery=lambda err, msg: errors.append(err))
        p.flush(10)
        return bool(errors) and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE

    cluster.wait_for(too_large_refused, "the leader to enforce max.message.bytes set through another broker")


@pytest.mark.cluster_config(**{"leader.imbalance.check.interval.seconds": "2"})
def test_automatic_preferred_leader_election_after_a_broker_returns(cluster: Cluster) -> None:
    """auto.leader.rebalance.enable (the default): with no command, leadership goes back to the
    preferred replicas once their broker is back in the ISR."""
    topic = "rebalanced"
    cluster.create_topic(topic, partitions=3, rf=3)
    parts = cluster.metadata(topic).topics[topic].partitions
    assert all(p.leader == p.replicas[0] for p in parts.values())
    victim = parts[0].leader
    cluster.brokers[victim].kill()
    cluster.wait_for(lambda: all(p.leader not in (-1, victim)
                                 for p in cluster.metadata(topic).topics[topic].partitions.values()),
                     "leadership moved off the dead broker")
    cluster.brokers[victim].start(timeout=60)
    cluster.wait_for(lambda: all(len(p.isrs) == 3 for p in cluster.metadata(topic).topics[topic].partitions.values()),
                     "the broker back in every ISR", timeout=60)
    cluster.wait_for(lambda: all(p.leader == p.replicas[0]
                                 for p in cluster.metadata(topic).topics[topic].partitions.values()),
                     "leadership back on the preferred replicas", timeout=30)
    controller = cluster.brokers[cluster.controller_id()].log_path.read_text()
    assert f"leader imbalance on broker {victim}" in controller


def test_cancelled_reassignment_goes_back_to_the_old_replicas(cluster: Cluster) -> None:
    """KIP-455 cancellation (AlterPartitionReassignments with null replicas) of a slow move."""
    topic = "cancelled"
    cluster.create_topic(topic, partitions=1, rf=1)
    source = cluster.partition(topic).leader
    receiver = next(b for b in cluster.brokers if b != source)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(1000):
        p.produce(topic, os.urandom(1000), key=b"%d" % i)
        p.poll(0)
    assert p.flush(30) == 0
    # 2 KB/s: the move cannot finish during the test.
    out = dmq("partitions", "reassign", "-t", topic, "-p", "0", "-r", f"{source},{receiver}",
              "--throttle", "2000", "--no-wait", "-b", cluster.bootstrap)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"dmq partitions throttle --clear --brokers {receiver}" in out.stdout
    cluster.wait_for(lambda: (cluster.brokers[receiver].data_dir / f"{topic}-0").exists(),
                     "the new replica started copying")
    assert cluster.partition(topic).replicas == [source, receiver]

    out = dmq("partitions", "reassign", "--cancel", "-t", topic, "-p", "0", "-b", cluster.bootstrap)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "every move is cancelled" in out.stdout
    after = cluster.partition(topic)
    assert (after.replicas, after.isrs, after.leader) == ([source], [source], source)
    cluster.wait_for(lambda: not (cluster.brokers[receiver].data_dir / f"{topic}-0").exists(),
                     "the half-copied replica deleted")
    log_text = cluster.brokers[cluster.controller_id()].log_path.read_text()
    assert f"{topic}-0: reassignment cancelled; back on [{source}]" in log_text
    # Nothing to cancel any more: NO_REASSIGNMENT_IN_PROGRESS.
    again = dmq("partitions", "reassign", "--cancel", "-t", topic, "-p", "0", "-b", cluster.bootstrap)
    assert again.returncode == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in again.stderr  # errors go to stderr
    assert dmq("partitions", "throttle", "--clear", "--brokers", str(receiver),
               "-b", cluster.bootstrap).returncode == 0
    # Every record is still there, in order.
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "check-cancel",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    seen: list[int] = []
    deadline = time.monotonic() + 30
    while len(seen) < 1000 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen.append(int(m.key()))
    c.close()
    assert seen == list(range(1000))


def test_wrong_broker_and_stale_epoch_errors_make_clients_refresh(cluster: Cluster) -> None:
    """Produce and fetch sent to a follower or a non-replica get NOT_LEADER_OR_FOLLOWER;
    an unknown topic UNKNOWN_TOPIC_OR_PARTITION; a stale or future leader epoch
    FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH (KIP-320), as Kafka answers."""
    from datetime import timedelta

    from dmq.client.wire import WireClient
    from dmq.protocol.codec import make, request_class, request_module
    from dmq.record.records import encode_batch

    topic = "routed"
    cluster.create_topic(topic, partitions=1, rf=2)
    part = cluster.partition(topic)
    leader, follower = part.leader, next(r for r in part.replicas if r != part.leader)
    outsider = next(b for b in cluster.brokers if b not in part.replicas)
    pmod, fmod, mmod = request_module(0, 9), request_module(1, 12), request_module(3, 12)

    def leader_epoch(broker: int) -> tuple[int, int]:
        with WireClient("127.0.0.1", cluster.brokers[broker].port) as c:
            md = c.request(make(request_class(3, 12), topics=(make(mmod.MetadataRequestTopic, name=topic, topic_id=None),),
                                allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                                include_topic_authorized_operations=False))
        p = md.topics[0].partitions[0]
        return int(p.leader_id), int(p.leader_epoch)

    def produce(broker: int, name: str = topic) -> int:
        with WireClient("127.0.0.1", cluster.brokers[broker].port) as c:
            r = c.request(make(request_class(0, 9), transactional_id=None, acks=-1, timeout=timedelta(seconds=5),
                               topic_data=(make(pmod.TopicProduceData, name=name, partition_data=(
                                   make(pmod.PartitionProduceData, index=0,
                                        records=encode_batch([(b"k", b"v", [])])),)),)))
        return int(r.responses[0].partition_responses[0].error_code)

    def fetch(broker: int, leader_epoch: int = -1) -> int:
        with WireClient("127.0.0.1", cluster.brokers[broker].port) as c:
            r = c.request(make(request_class(1, 12), replica_id=-1, max_wait=timedelta(milliseconds=10),
                               min_bytes=1, max_bytes=10**6, isolation_level=0, session_id=0, session_epoch=-1,
                               rack_id="", forgotten_topics_data=(), cluster_id=None, topics=(make(
                                   fmod.FetchTopic, topic=topic, partitions=(make(
                                       fmod.FetchPartition, partition=0, fetch_offset=0, partition_max_bytes=10**6,
                                       current_leader_epoch=leader_epoch, log_start_offset=-1,
                                       last_fetched_epoch=-1),)),)))
        return int(r.responses[0].partitions[0].error_code)

    NOT_LEADER, UNKNOWN, FENCED, UNKNOWN_EPOCH = 6, 3, 74, 75
    assert produce(leader) == 0
    assert produce(follower) == NOT_LEADER
    assert produce(outsider) == NOT_LEADER
    assert produce(leader, "no-such-topic") == UNKNOWN
    assert fetch(follower) == NOT_LEADER
    assert fetch(outsider) == NOT_LEADER
    # Leadership moves to the other replica (new preferred order, then a preferred election).
    old_epoch = leader_epoch(leader)[1]
    assert dmq("partitions", "reassign", "-t", topic, "-p", "0", "-r", f"{follower},{leader}",
               "-b", cluster.bootstrap).returncode == 0
    assert dmq("partitions", "elect-leaders", "-t", topic, "-b", cluster.bootstrap).returncode == 0
    cluster.wait_for(lambda: all(leader_epoch(b)[0] == follower for b in cluster.brokers),
                     "every broker to know the new leader")
    new_epoch = leader_epoch(follower)[1]
    assert new_epoch > old_epoch
    assert produce(follower) == 0 and produce(leader) == NOT_LEADER
    assert fetch(follower) == 0 and fetch(follower, new_epoch) == 0
    assert fetch(follower, old_epoch) == FENCED
    assert fetch(follower, new_epoch + 1) == UNKNOWN_EPOCH


def test_add_partitions_with_an_assignment(cluster: Cluster) -> None:
    """CreatePartitions' replica assignment is where the new partitions go (it was checked
    for live brokers, then dropped), and one of another replication factor is refused with
    Kafka's INVALID_REPLICA_ASSIGNMENT message."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions

    cluster.create_topic("placed", partitions=1, rf=2)
    admin = cluster.admin()
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([NewPartitions("placed", 2, replica_assignment=[[1]])])["placed"].result(30)
    assert "Inconsistent replication factor between partitions, partition 0 has 2 while partitions [1] " \
           "have replication factors [1], respectively." in str(refused.value)
    admin.create_partitions([NewPartitions("placed", 3, replica_assignment=[[3, 1], [2, 3]])])["placed"].result(30)
    cluster.wait_for(lambda: {i: list(p.replicas) for i, p in cluster.metadata("placed").topics["placed"]
                              .partitions.items() if i > 0} == {1: [3, 1], 2: [2, 3]}, "the new partitions placed")
    cluster.wait_for(lambda: all(len(p.isrs) == 2 for p in cluster.metadata("placed").topics["placed"]
                                 .partitions.values()), "the new partitions in sync")
