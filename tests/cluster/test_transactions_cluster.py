"""Transactions in a cluster: markers to other brokers, and a coordinator that dies between
EndTxn and its markers (the next coordinator finishes the commit)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from support.cluster import Cluster
from support.transactions import abort_then_send_late_batch, stable_and_end

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class
from dmq.transaction.records import partition_for

# Two replicas of each __transaction_state partition: a transaction whose coordinator's
# partition lives on the two brokers that do not lead the data partition is prepared while
# that leader is stopped, so its markers wait until the coordinator is gone.
pytestmark = pytest.mark.cluster_config(**{"transaction.state.log.num.partitions": "3",
                                           "transaction.state.log.replication.factor": "2",
                                           "transaction.state.log.min.isr": "1"})


def transaction_coordinator(cluster: Cluster, txn_id: str, via: int) -> int:
    b = cluster.brokers[via]
    with WireClient("127.0.0.1", b.port) as c:
        for _ in range(100):
            r = c.request(make(request_class(10, 4), key_type=1, coordinator_keys=(txn_id,)))
            if r.coordinators[0].error_code == ErrorCode.none:
                return int(r.coordinators[0].node_id)
            time.sleep(0.2)
    raise AssertionError(f"no transaction coordinator for {txn_id}")


def transaction_state_partitions(cluster: Cluster, via: int) -> Any:
    """``__transaction_state``'s partitions (created through broker ``via``) once each has a leader."""
    transaction_coordinator(cluster, "probe", via=via)  # creates __transaction_state
    cluster.wait_for(lambda: all(p.leader >= 0 for p in cluster.metadata("__transaction_state").topics[
        "__transaction_state"].partitions.values()), "__transaction_state led")
    return cluster.metadata("__transaction_state").topics["__transaction_state"].partitions


def read_committed(bootstrap: str, topic: str, expect: int, seconds: float = 40, partitions: int = 1) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{topic}", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "log_level": 0})
    consumer.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(partitions)])
    got: list[str] = []
    deadline = time.monotonic() + seconds
    while len(got) < expect and time.monotonic() < deadline:
        msg = consumer.poll(0.3)
        if msg is not None and not msg.error():
            got.append(msg.value().decode())
    consumer.close()
    return got


def test_a_commit_survives_its_coordinator_dying_before_the_markers(cluster: Cluster) -> None:
    topic = "txc"
    cluster.create_topic(topic, partitions=1, rf=3)
    leader = cluster.partition(topic).leader
    state = transaction_state_partitions(cluster, via=leader)
    # A transactional id whose coordinator's partition has no replica on the data leader.
    txn_id = next(t for t in (f"cluster-txn-{i}" for i in range(200))
                  if leader not in state[partition_for(t, 3)].replicas)
    coordinator = transaction_coordinator(cluster, txn_id, via=leader)
    assert coordinator != leader
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "log_level": 0,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, f"first-{i}".encode(), partition=0)
    producer.commit_transaction(60)  # markers to another broker's partition, over the wire
    assert read_committed(cluster.bootstrap, topic, 10) == [f"first-{i}" for i in range(10)]

    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"second-{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    cluster.pause(leader)  # the markers cannot be written while it is stopped
    try:
        producer.commit_transaction(60)  # answered once PrepareCommit is replicated
        cluster.brokers[coordinator].kill()
    finally:
        cluster.resume(leader)
    survivors = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != coordinator)
    got = read_committed(survivors, topic, 15, seconds=60)
    assert got == [f"first-{i}" for i in range(10)] + [f"second-{i}" for i in range(5)]
    # The next coordinator found the transaction prepared and finished it (without it the
    # transaction would stay PrepareCommit for ever, whatever the old one's markers did).
    successor = cluster.wait_for(
        lambda: (c := transaction_coordinator(cluster, txn_id, via=leader)) != coordinator and c,
        "a new transaction coordinator", timeout=30)
    with WireClient("127.0.0.1", cluster.brokers[successor].port) as c:
        deadline = time.monotonic() + 30
        while True:
            state = c.request(make(request_class(65, 0), transactional_ids=(txn_id,))).transaction_states[0]
            if state.transaction_state == "CompleteCommit" or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    assert (state.error_code, state.transaction_state) == (ErrorCode.none, "CompleteCommit")


def test_a_late_batch_is_refused_by_a_leader_that_asks_another_brokers_coordinator(cluster: Cluster) -> None:
    """KIP-890 across brokers: the data partition's leader verifies with the coordinator on
    another broker (AddPartitionsToTxn verify_only over the wire). A late batch of the
    aborted transaction is refused and does not hold the last stable offset back; a
    transaction over partitions led by every broker still commits."""
    topic = "txc-late"
    cluster.create_topic(topic, partitions=1, rf=3)
    leader = cluster.partition(topic).leader
    state = transaction_state_partitions(cluster, via=leader)
    txn_id = next(t for t in (f"late-txn-{i}" for i in range(200))
                  if state[partition_for(t, 3)].leader not in (leader, -1))
    coordinator = transaction_coordinator(cluster, txn_id, via=leader)
    assert coordinator != leader
    with WireClient("127.0.0.1", cluster.brokers[coordinator].port) as to_coordinator, \
            WireClient("127.0.0.1", cluster.brokers[leader].port) as to_leader:
        late, _ = abort_then_send_late_batch(to_coordinator, to_leader, txn_id, topic)
        assert late == ErrorCode.invalid_txn_state
        assert stable_and_end(to_leader, topic) == (2, 2)

    spread = "txc-spread"
    cluster.create_topic(spread, partitions=6, rf=1)
    leaders = {cluster.partition(spread, i).leader for i in range(6)}
    assert len(leaders) > 1
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "log_level": 0})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(60):
        producer.produce(spread, f"v{i}".encode(), partition=i % 6)
    producer.commit_transaction(60)
    got = read_committed(cluster.bootstrap, spread, 60, partitions=6)
    assert sorted(got) == sorted(f"v{i}" for i in range(60))
