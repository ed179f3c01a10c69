from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from dmq.spark.source import DmqSourceError, SourceConfig, split_ranges  # noqa: E402


def test_kafka_prefixed_options_reach_the_consumers() -> None:
    cfg = SourceConfig({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.client.id": "etl",
                        "kafka.group.id": "ignored", "kafka.fetch.max.bytes": "1000000"})
    conf = cfg.client_conf()
    assert conf["bootstrap.servers"] == "h:1" and conf["client.id"] == "etl"
    assert conf["fetch.max.bytes"] == "1000000"
    assert conf["group.id"].startswith("dmq-spark-") and conf["enable.auto.commit"] is False


@pytest.mark.parametrize("options,message", [
    ({"subscribe": "t"}, "bootstrap.servers"),
    ({"bootstrap.servers": "h:1"}, "exactly one"),
    ({"bootstrap.servers": "h:1", "assign": "[1]"}, "assign must be JSON"),
    ({"bootstrap.servers": "h:1", "subscribe": "t", "maxOffsetsPerTrigger": "lots"}, "integer"),
    ({"bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "maybe"}, "true or false"),
])
def test_bad_options_are_clear(options: dict[str, str], message: str) -> None:
    with pytest.raises(DmqSourceError, match=message):
        SourceConfig(options)


def test_min_partitions_splits_ranges_without_gaps() -> None:
    parts = split_ranges({"t": {"0": 10, "1": 0}}, {"t": {"0": 1010, "1": 10}}, 6)
    covered = sorted((p.partition, o) for p in parts for o in range(p.start, p.end))
    assert covered == [(0, o) for o in range(10, 1010)] + [(1, o) for o in range(10)]
    assert len(parts) >= 6
