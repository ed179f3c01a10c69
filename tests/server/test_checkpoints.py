"""A running broker writes its checkpoints on time: the high watermarks every
``replica.high.watermark.checkpoint.interval.ms`` and the recovery points and log start
offsets every ``log.flush.offset.checkpoint.interval.ms`` (Kafka's files and format),
not only at shutdown. (That the writes run on a worker thread is not asserted here; the
ordering of writes from threads is tested in tests/storage/test_log_manager.py.) And a
topic deleted and created again does not take the deleted one's checkpointed offsets
across a crash."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess

from dmq.storage.log_manager import LOG_START_FILE, RECOVERY_POINT_FILE, read_checkpoint


def test_a_running_broker_writes_its_checkpoints_every_interval(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, overrides={"replica.high.watermark.checkpoint.interval.ms": "200",
                                            "log.flush.offset.checkpoint.interval.ms": "200",
                                            "log.segment.bytes": "4096"}).start()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "linger.ms": 0})
        for i in range(100):
            p.produce("cp", f"record {i:03d}".encode() * 10, partition=0)
            p.flush(30)  # one batch each, so segments roll and get flushed
        hw = {}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            hw = read_checkpoint(str(data / "replication-offset-checkpoint"))
            points = read_checkpoint(str(data / RECOVERY_POINT_FILE))
            if hw.get(("cp", 0)) == 100 and points.get(("cp", 0), 0) > 0:
                break
            time.sleep(0.1)
        assert hw.get(("cp", 0)) == 100, hw
        assert 0 < points[("cp", 0)] <= 100, points  # rolled segments flushed in the background
        assert read_checkpoint(str(data / LOG_START_FILE)).get(("cp", 0)) == 0
        assert broker.alive()
    finally:
        broker.close()


def test_a_topic_created_again_keeps_its_acknowledged_records_through_a_crash(tmp_path: Path) -> None:
    """A topic deleted and created under the same name starts at offset 0. Its records,
    acknowledged with acks=all, survive a SIGKILL that comes before the next periodic
    checkpoint: the deleted topic's log start offset (8, from DeleteRecords) is not in the
    checkpoint file by the time the new log exists, so it is not applied to the new log
    (which would hide offsets 0-7 and start the log at 8)."""
    data = tmp_path / "data"
    # No periodic checkpoint between the restart and the kill, however slow the machine.
    broker = BrokerProcess(data, overrides={"log.flush.offset.checkpoint.interval.ms": "3600000"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        admin.create_topics([NewTopic("again", 1, 1)])["again"].result(30)
        p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "acks": "all"})
        for i in range(10):
            p.produce("again", f"old {i}".encode())
        assert p.flush(30) == 0
        admin.delete_records([TopicPartition("again", 0, 8)])[TopicPartition("again", 0, 8)].result(30)
        assert broker.stop() == 0  # a clean stop writes the checkpoints: the topic starts at 8
        assert read_checkpoint(str(data / LOG_START_FILE)).get(("again", 0)) == 8
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        admin.delete_topics(["again"])["again"].result(30)
        deadline = time.monotonic() + 30
        while True:  # the deletion completes in the background, as in Kafka
            try:
                admin.create_topics([NewTopic("again", 1, 1)])["again"].result(30)
                break
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        delivered: list[int] = []
        p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "acks": "all"})
        for i in range(3):
            p.produce("again", f"new {i}".encode(),
                      on_delivery=lambda err, msg: delivered.append(msg.offset()) if err is None else None)
        assert p.flush(30) == 0
        assert delivered == [0, 1, 2]
        broker.kill()
        broker.start()
        c = Consumer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "group.id": "g",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.assign([TopicPartition("again", 0, OFFSET_BEGINNING)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.value()))
        c.close()
        assert got == [(0, b"new 0"), (1, b"new 1"), (2, b"new 2")]
        low, high = Consumer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "group.id": "w"}) \
            .get_watermark_offsets(TopicPartition("again", 0), timeout=10)
        assert (low, high) == (0, 3)
    finally:
        broker.close()
