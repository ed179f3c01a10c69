"""Retention, segment rolling, fetch size limits and config files on a running broker."""

from __future__ import annotations

import glob
import subprocess
import sys
import time
from datetime import timedelta

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from support.broker import BrokerProcess

from dmq.client.wire import WireClient
from dmq.record.batch import iter_headers


def watermarks(b: BrokerProcess, topic: str, p: int = 0) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "w", "enable.auto.commit": False})
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), 10)
    c.close()
    return lo, hi


def fill(b: BrokerProcess, topic: str, n: int, size: int = 200) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "batch.num.messages": 20})
    for i in range(n):
        p.produce(topic, b"%06d" % i + b"x" * size)
        if i % 50 == 0:
            p.flush(10)
    assert p.flush(30) == 0


def test_size_and_time_retention(fresh_broker: BrokerProcess) -> None:
    fresh_broker.overrides.update({"log.retention.check.interval.ms": "300"})
    fresh_broker.start()
    a = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    # by-size: 2000 records of about 210 bytes, 420 kB, in 20 kB segments. Retention keeps at
    # least retention.bytes, 7 or more segments, whenever it runs during the fill (with
    # 60 kB it kept 4 when the fill was slower than the checks every 300 ms).
    segment, retention = 20000, 140000
    a.create_topics([NewTopic("by-size", 1, 1, config={"segment.bytes": str(segment), "retention.bytes": str(retention)}),
                     NewTopic("by-time", 1, 1, config={"segment.bytes": "20000", "retention.ms": "1500"})])["by-size"].result(10)
    fill(fresh_broker, "by-size", 2000)
    fill(fresh_broker, "by-time", 500)
    segs = glob.glob(str(fresh_broker.data_dir / "by-size-0" / "*.log"))
    assert len(segs) > 5  # rolled by segment.bytes
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        lo_size, hi_size = watermarks(fresh_broker, "by-size")
        lo_time, hi_time = watermarks(fresh_broker, "by-time")
        if lo_size > 0 and lo_time == hi_time:
            break
        time.sleep(0.3)
    assert hi_size == 2000 and 0 < lo_size < 2000
    kept_bytes = sum(p.stat().st_size for p in (fresh_broker.data_dir / "by-size-0").glob("*.log"))
    assert kept_bytes <= retention + segment
    assert (lo_time, hi_time) == (500, 500)  # every record expired; offsets continue
    fill(fresh_broker, "by-time", 1)
    assert watermarks(fresh_broker, "by-time") == (500, 501)


def test_fetch_limits(broker: BrokerProcess) -> None:
    fill(broker, "limits", 300, size=500)
    with WireClient("127.0.0.1", broker.port) as c:
        def fetch(partition_max: int, max_bytes: int, offset: int = 0) -> bytes:
            req = FetchRequest(max_wait=timedelta(milliseconds=10), min_bytes=1, max_bytes=max_bytes,  # type: ignore[arg-type]
                               topics=(FetchTopic(topic="limits", partitions=(  # type: ignore[arg-type]
                                   FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=partition_max),)),),  # type: ignore[arg-type]
                               forgotten_topics_data=())
            return bytes(c.request(req).responses[0].partitions[0].records)
        small = fetch(100, 10**6)
        # A limit below one batch still returns the whole first batch (KIP-74).
        (first,) = iter_headers(small)
        assert first[1].size == len(small) and first[1].base_offset == 0
        mid = fetch(10_000, 4_000)
        assert len(mid) <= 10_000 and len(mid) >= first[1].size
        big = fetch(10**7, 10**7)
        assert iter_headers(big)[-1][1].last_offset == 299
        later = fetch(10**7, 10**7, offset=250)
        assert iter_headers(later)[0][1].base_offset <= 250 <= iter_headers(later)[0][1].last_offset


def test_config_file_and_overrides(tmp_path) -> None:  # noqa: ANN001
    conf = tmp_path / "server.properties"
    conf.write_text("# Kafka-style\nnum.partitions=4\nlog.retention.hours=2\nsome.kafka.only.setting=1\n")
    b = BrokerProcess(tmp_path / "data")
    proc = subprocess.Popen([sys.executable, "-m", "dmq", "server", "--listen", b.bootstrap, "--data-dir",
                             str(b.data_dir), "--config", str(conf), "--override", "log.segment.bytes=123456"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert b"listening on" in proc.stdout.readline()
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        a.create_topics([NewTopic("from-defaults", -1, -1)])["from-defaults"].result(10)
        md = a.list_topics(timeout=10)
        assert len(md.topics["from-defaults"].partitions) == 4
        from confluent_kafka.admin import ConfigResource
        res = ConfigResource(ConfigResource.Type.TOPIC, "from-defaults")
        cfg = a.describe_configs([res])[res].result(10)
        assert cfg["retention.ms"].value == str(2 * 3600 * 1000)
        assert cfg["segment.bytes"].value == "123456"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert b"ignoring unknown broker config some.kafka.only.setting" in err
