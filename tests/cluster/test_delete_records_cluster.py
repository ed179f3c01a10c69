"""DeleteRecords is answered once the followers' log starts are there too (Kafka's
DelayedDeleteRecords): the leader lost right after the answer leaves a new leader that
no longer serves the deleted records."""

from __future__ import annotations

from confluent_kafka import Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from support.cluster import Cluster

from dmq.client.wire import WireClient


def test_records_deleted_stay_deleted_after_the_leader_is_lost(cluster: Cluster) -> None:
    cluster.create_topic("deleted", rf=3)
    p = Producer({"bootstrap.servers": cluster.reachable_bootstrap(), "log_level": 0, "acks": "all"})
    for i in range(10):
        p.produce("deleted", b"%d" % i, partition=0)
    assert p.flush(60) == 0
    first = cluster.partition("deleted").leader
    tp = TopicPartition("deleted", 0, 5)
    admin = cluster.admin()  # kept: its futures go with it
    assert admin.delete_records([tp])[tp].result(30).low_watermark == 5
    cluster.brokers[first].kill()  # at once: before, the followers still started at 0
    cluster.wait_for(lambda: cluster.partition("deleted").leader not in (-1, first), "a new leader")
    leader = cluster.brokers[cluster.partition("deleted").leader]
    with WireClient("127.0.0.1", leader.port) as c:
        answer = c.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(  # type: ignore[arg-type]
            ListOffsetsTopic(name="deleted", partitions=(  # type: ignore[arg-type]
                ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,  # type: ignore[arg-type]
                                     timestamp=-2),)),)))  # type: ignore[arg-type]
    earliest = answer.topics[0].partitions[0]
    assert (earliest.error_code, int(earliest.offset)) == (ErrorCode.none, 5)
