"""FindCoordinator names a broker for a coordinator partition it leads only once
the partition's shard is loaded there; until then COORDINATOR_NOT_AVAILABLE, which
clients ask again.

The window this closes: the first FindCoordinator on a new broker creates ``__consumer_offsets``
and waits while its fifty logs are made; a second FindCoordinator meanwhile finds the
topic in metadata and names this broker. librdkafka gives up a commit answered
NOT_COORDINATOR ("Commit failed: Broker: Not coordinator", seen in CI), and retries
one answered COORDINATOR_LOAD_IN_PROGRESS only twice.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from support.broker import BrokerProcess

from dmq.client.wire import WireClient


def find(c: WireClient, group: str) -> ErrorCode:
    return c.request(FindCoordinatorRequest(key=group)).error_code  # type: ignore[arg-type]


def commit(c: WireClient, group: str, topic: str) -> ErrorCode:
    req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",  # type: ignore[arg-type]
                              group_instance_id=None, topics=(OffsetCommitRequestTopic(name=topic, partitions=(  # type: ignore[arg-type]
                                  OffsetCommitRequestPartition(partition_index=0, committed_offset=3,  # type: ignore[arg-type]
                                                               committed_metadata=""),)),))
    return c.request(req).topics[0].partitions[0].error_code


def test_find_coordinator_names_this_broker_only_once_the_group_can_commit(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides={"offsets.topic.num.partitions": "200"}).start()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        p.produce("loading-t", b"x")
        assert p.flush(30) == 0

        def create() -> None:
            with WireClient("127.0.0.1", broker.port) as first:
                find(first, "g")  # creates __consumer_offsets and waits for its logs

        creating = threading.Thread(target=create)
        with WireClient("127.0.0.1", broker.port) as c:
            creating.start()
            deadline = time.monotonic() + 30
            while (error := find(c, "g")) != ErrorCode.none and time.monotonic() < deadline:
                pass  # COORDINATOR_NOT_AVAILABLE until the shard is loaded
            assert error == ErrorCode.none
            # FindCoordinator named this broker: the group's shard is loaded, the commit lands.
            assert commit(c, "g", "loading-t") == ErrorCode.none
        creating.join(30)
    finally:
        broker.close()


def test_librdkafka_commits_at_once_on_a_new_broker(tmp_path: Path) -> None:
    """What CI's failing tests did: a consumer that never joins commits right after start."""
    broker = BrokerProcess(tmp_path / "data", overrides={"offsets.topic.num.partitions": "200"}).start()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        for i in range(10):
            p.produce("loading-c", f"v{i}".encode())
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "idle", "log_level": 0})
        try:
            c.commit(offsets=[TopicPartition("loading-c", 0, 4)], asynchronous=False)
            assert c.committed([TopicPartition("loading-c", 0)], timeout=30)[0].offset == 4
        finally:
            c.close()
    finally:
        broker.close()
