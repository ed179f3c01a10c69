"""FindCoordinator names a broker for a coordinator partition it leads only once
the partition's shard is loaded there.

The window this closes: the first FindCoordinator on a new broker creates ``__consumer_offsets``
and waits while its fifty logs are made; a second FindCoordinator meanwhile found the
topic in metadata and named this broker, and a commit sent there got NOT_COORDINATOR
until the shards loaded. librdkafka retries a commit only a few times within a few
hundred milliseconds and then fails it ("Commit failed: Broker: Not coordinator", seen
in CI). Now a FindCoordinator that comes while this broker creates the topic waits for
the creation, and one for a partition led here but not loaded answers
COORDINATOR_NOT_AVAILABLE, which clients ask again until they have an answer.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from support.broker import BrokerProcess
from support.cli import dmq_env

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class


def find(c: WireClient, group: str) -> ErrorCode:
    return c.request(FindCoordinatorRequest(key=group)).error_code  # type: ignore[arg-type]


def commit(c: WireClient, group: str, topic: str) -> ErrorCode:
    req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",  # type: ignore[arg-type]
                              group_instance_id=None, topics=(OffsetCommitRequestTopic(name=topic, partitions=(  # type: ignore[arg-type]
                                  OffsetCommitRequestPartition(partition_index=0, committed_offset=3,  # type: ignore[arg-type]
                                                               committed_metadata=""),)),))
    return c.request(req).topics[0].partitions[0].error_code


def offsets_topic_listed(c: WireClient) -> bool:
    answer = c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="__consumer_offsets"),),  # type: ignore[arg-type]
                                       allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return answer.topics[0].error_code == ErrorCode.none


def broker_creating_offsets_logs(tmp_path: Path, partitions: int, topic: str) -> BrokerProcess:
    """A broker whose ``__consumer_offsets`` has ``partitions`` logs to make (commit timeout
    60 s, so a slow disk cannot turn a waited lookup into COORDINATOR_NOT_AVAILABLE), with
    one record produced to ``topic`` (the broker is up and serving)."""
    broker = BrokerProcess(tmp_path / "data", overrides={"offsets.topic.num.partitions": str(partitions),
                                                              "offsets.commit.timeout.ms": "60000"}).start()
    p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    p.produce(topic, b"x")
    assert p.flush(30) == 0
    return broker


def test_find_coordinator_names_this_broker_only_once_the_group_can_commit(tmp_path: Path) -> None:
    broker = broker_creating_offsets_logs(tmp_path, 200, "loading-t")
    try:
        first: list[ErrorCode] = []

        def create() -> None:
            with WireClient("127.0.0.1", broker.port, timeout=120) as other:
                first.append(find(other, "g"))  # creates __consumer_offsets, waits for its logs

        creating = threading.Thread(target=create)
        with WireClient("127.0.0.1", broker.port) as c:
            creating.start()
            deadline = time.monotonic() + 30
            while not offsets_topic_listed(c) and time.monotonic() < deadline:
                time.sleep(0.002)
            # The topic is in metadata; its 200 logs are most likely still being made (if
            # not, the shards are loaded and the lookup below is answered at once).
            seen = []
            while (error := find(c, "g")) != ErrorCode.none and time.monotonic() < deadline:
                seen.append(error)
                time.sleep(0.01)
            # It waited for the creation this broker had begun: no answer to ask again.
            assert error == ErrorCode.none and seen == []
            # FindCoordinator named this broker: the group's shard is loaded, the commit lands.
            assert commit(c, "g", "loading-t") == ErrorCode.none
        creating.join(30)
        assert not creating.is_alive() and first == [ErrorCode.none]
    finally:
        broker.close()


def test_librdkafka_commits_at_once_on_a_new_broker(tmp_path: Path) -> None:
    """What CI's failing tests did: a consumer that never joins commits right after start."""
    broker = BrokerProcess(tmp_path / "data", overrides={"offsets.topic.num.partitions": "200",
                                                              "offsets.commit.timeout.ms": "60000"}).start()
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


def list_groups(c: WireClient) -> Any:
    return c.request(make(request_class(16, 5), states_filter=(), types_filter=()))


def test_listing_groups_while_the_offsets_topic_loads(tmp_path: Path) -> None:
    """ListGroups while this broker's coordinator partitions are loading answers
    COORDINATOR_LOAD_IN_PROGRESS (as Kafka's does), not a list missing their groups, and
    ``dmq groups list`` started meanwhile asks again and succeeds (librdkafka's admin
    client passes the error on: without the CLI asking again it exited 1 with "Coordinator
    load in progress"). 1,500 logs keep the window open for seconds, longer than the CLI
    takes to start."""
    broker = broker_creating_offsets_logs(tmp_path, 1500, "loading-l")
    try:
        def create() -> None:
            with WireClient("127.0.0.1", broker.port, timeout=120) as other:
                find(other, "g")  # creates __consumer_offsets, waits for its logs

        creating = threading.Thread(target=create)
        with WireClient("127.0.0.1", broker.port) as c:
            creating.start()
            deadline = time.monotonic() + 60
            while not offsets_topic_listed(c) and time.monotonic() < deadline:
                time.sleep(0.002)
            first = list_groups(c)
            cli = subprocess.Popen([sys.executable, "-m", "dmq", "groups", "list"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=dmq_env(broker.bootstrap), text=True)
            while (answer := list_groups(c)).error_code != ErrorCode.none and time.monotonic() < deadline:
                assert answer.error_code == ErrorCode.coordinator_load_in_progress and answer.groups == ()
                time.sleep(0.01)
            out, err = cli.communicate(timeout=60)
            assert first.error_code == ErrorCode.coordinator_load_in_progress and first.groups == ()
            assert answer.error_code == ErrorCode.none
            assert cli.returncode == 0, err
            assert "No consumer groups." in out
        creating.join(60)
        assert not creating.is_alive()
    finally:
        broker.close()
