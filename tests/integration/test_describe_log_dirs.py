"""DescribeLogDirs (35) through kafka-python's admin client (``describe_log_dirs``, as
kafka-log-dirs.sh, Kafbat UI and AKHQ use it), checked against the files on disk."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from support.broker import BrokerProcess


def segment_bytes(data_dir: Path, topic: str, partition: int) -> int:
    d = data_dir / f"{topic}-{partition}"
    return sum(f.stat().st_size for f in d.iterdir() if f.name.endswith(".log"))


def sizes(result: list[dict[str, Any]], topic: str) -> dict[int, tuple[int, int, bool]]:
    """{partition: (size, offset lag, future)} of ``topic`` in the one broker's one log dir."""
    [broker] = result
    [log_dir] = broker["log_dirs"]
    return {p["partition_index"]: (p["partition_size"], p["offset_lag"], p["is_future_key"])
            for t in log_dir["topics"] if t["name"] == topic for p in t["partitions"]}


def test_sizes_per_partition_match_the_segments_on_disk(broker: BrokerProcess, topic_name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic_name, 3, 1)])
        p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
        for i in range(200):
            p.send(topic_name, value=b"x" * 500, key=b"%d" % i, partition=0)
        for _ in range(20):
            p.send(topic_name, value=b"y" * 100, partition=1)
        p.flush(30)
        p.close()

        everything = admin.describe_log_dirs()
        [log_dir] = everything[0]["log_dirs"]
        assert log_dir["error_code"] == 0
        assert log_dir["log_dir"] == os.path.abspath(broker.data_dir)
        assert log_dir["total_bytes"] > 0 and 0 <= log_dir["usable_bytes"] <= log_dir["total_bytes"]
        got = sizes(everything, topic_name)
        on_disk = {i: segment_bytes(broker.data_dir, topic_name, i) for i in range(3)}
        assert on_disk[0] > 200 * 500 and 20 * 100 < on_disk[1] < on_disk[0] and on_disk[2] == 0
        assert got == {i: (on_disk[i], 0, False) for i in range(3)}

        # Named partitions only; one the broker does not host is left out, as in Kafka.
        some = admin.describe_log_dirs({topic_name: [1, 7]})
        assert sizes(some, topic_name) == {1: (on_disk[1], 0, False)}
        assert [t["name"] for t in some[0]["log_dirs"][0]["topics"]] == [topic_name]
        assert sizes(admin.describe_log_dirs({"no-such-topic": [0]}), topic_name) == {}
    finally:
        admin.close()
