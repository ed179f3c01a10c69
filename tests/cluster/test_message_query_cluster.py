"""Message query in a ZooKeeper cluster: `dmq messages query` bootstrapped through one
broker asks every partition's leader; a follower answers NOT_LEADER_OR_FOLLOWER; after
the leader of a key's partition is SIGKILLed, the new leader answers the same records
from its own key index, built while it followed."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from support.cli import run_dmq
from support.cluster import Cluster
from support.query import consume_everything

from dmq.client.query import query_records
from dmq.client.wire import WireClient
from dmq.protocol.extensions import QueryPartition, QueryRecordsRequest, QueryTopic

pytestmark = pytest.mark.cluster_config(**{"log.segment.bytes": "20000"})

KEYS = [b"order-%d" % i for i in range(30)]


def expected(scan: list, key: bytes) -> list[tuple[int, int]]:  # type: ignore[type-arg]
    """The key's records newest first: a key is in one partition, in log order."""
    rows = sorted((r for r in scan if r[3] == key), key=lambda r: r[1], reverse=True)
    assert len({r[0] for r in rows}) <= 1
    return [(r[0], r[1]) for r in rows]


def test_queries_find_each_leader_and_survive_a_failover(cluster: Cluster) -> None:
    cluster.create_topic("orders", partitions=3, rf=3, config={"min.insync.replicas": "2"})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "compression.type": "zstd",
                  "linger.ms": 10, "log_level": 0})
    for i in range(3000):
        p.produce("orders", key=KEYS[i % len(KEYS)], value=json.dumps({"n": i}).encode())
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    scan = consume_everything(cluster.bootstrap, "orders", 3)
    leaders = {i: cluster.partition("orders", i).leader for i in range(3)}
    assert len(set(leaders.values())) > 1, leaders  # the query has more than one broker to ask

    one = cluster.brokers[1].bootstrap
    for key in KEYS[:5]:
        res = run_dmq(one, "messages", "query", "-t", "orders", "-k", key.decode(), "-n", "1000")
        shown = [(int(line.split("│")[1]), int(line.split("│")[2])) for line in res.stdout.splitlines()
                 if line.startswith("│") and line.split("│")[1].strip()]
        assert shown == expected(scan, key), key

    key = KEYS[7]
    home = expected(scan, key)[0][0]
    leader = leaders[home]
    follower = next(b for b in cluster.brokers if b != leader)
    with WireClient("127.0.0.1", cluster.brokers[follower].port) as c:
        resp = c.request(QueryRecordsRequest(key=key, max_records=10, max_bytes=1 << 20, topics=(
            QueryTopic(name="orders", partitions=(QueryPartition(partition_index=home),)),)))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower

    cluster.brokers[leader].kill()
    survivors = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != leader)
    cluster.wait_for(lambda: cluster.partition("orders", home).leader not in (-1, leader), "a new leader")
    found = query_records(survivors, "orders", key=key, max_records=1000)
    assert [(r.partition, r.offset) for r in found.records] == expected(scan, key)
    # The new leader indexed the partition while it followed: nothing left to scan.
    deadline = time.monotonic() + 60
    while query_records(survivors, "orders", key=key, partition=home).unindexed_bytes:
        assert time.monotonic() < deadline, "the new leader's key index did not cover its log"
        time.sleep(0.5)
    res = run_dmq(survivors, "messages", "query", "-t", "orders", "-k", key.decode(), "-p", str(home), "-n", "3")
    assert res.stderr.splitlines() == [
        f"3 records with key '{key.decode()}' in orders-{home}, newest first; more match "
        f"(raise --max-messages, now 3)."]
