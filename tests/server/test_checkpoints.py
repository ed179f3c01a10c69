"""A running broker writes its checkpoints on time: the high watermarks every
``replica.high.watermark.checkpoint.interval.ms`` and the recovery points and log start
offsets every ``log.flush.offset.checkpoint.interval.ms`` (Kafka's files and format),
not only at shutdown. (That the writes run on a worker thread is not asserted here; the
ordering of writes from threads is tested in tests/storage/test_log_manager.py.)"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer
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
