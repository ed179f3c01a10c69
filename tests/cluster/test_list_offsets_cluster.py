"""ListOffsets by time answers the leader epoch that wrote the offset it found, not the
current one, after a leader change (Kafka's fetchOffsetForTimestamp; KIP-320 clients
check that epoch for truncation when they seek there)."""

from __future__ import annotations

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from support.cluster import Cluster

from dmq.client.wire import WireClient


def produce(cluster: Cluster, value: bytes, timestamp: int) -> None:
    p = Producer({"bootstrap.servers": cluster.reachable_bootstrap(), "log_level": 0, "acks": "all"})
    p.produce("epochs", value, partition=0, timestamp=timestamp)
    assert p.flush(60) == 0


def test_a_lookup_by_time_answers_the_epoch_that_wrote_the_offset(cluster: Cluster) -> None:
    cluster.create_topic("epochs", rf=3)
    first = cluster.partition("epochs").leader
    produce(cluster, b"old", 1_000_000)
    cluster.brokers[first].kill()
    cluster.wait_for(lambda: cluster.partition("epochs").leader not in (-1, first), "a new leader")
    produce(cluster, b"new", 2_000_000)
    leader = cluster.brokers[cluster.partition("epochs").leader]

    def listed(timestamp: int) -> tuple[ErrorCode, int, int]:
        with WireClient("127.0.0.1", leader.port) as c:
            answer = c.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(  # type: ignore[arg-type]
                ListOffsetsTopic(name="epochs", partitions=(  # type: ignore[arg-type]
                    ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,  # type: ignore[arg-type]
                                         timestamp=timestamp),)),)))  # type: ignore[arg-type]
        p = answer.topics[0].partitions[0]
        return p.error_code, int(p.offset), int(p.leader_epoch)

    old = listed(1_000_000)
    new = listed(2_000_000)
    latest = listed(-1)
    assert (old[0], old[1]) == (ErrorCode.none, 0)
    assert (new[0], new[1]) == (ErrorCode.none, 1)
    assert old[2] < new[2] == latest[2]  # the old record's epoch, then the new leader's
    assert latest[1] == 2
