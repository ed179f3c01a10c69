"""The dmq PySpark source and sink with a real local[2] Spark session and a real broker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from support.broker import BrokerProcess  # noqa: E402
from support.spark import reader  # noqa: E402


def create(b: BrokerProcess, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(10)


def produce(b: BrokerProcess, topic: str, records: list[dict]) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for r in records:
        p.produce(topic, **r)
    assert p.flush(30) == 0


def test_batch_read_returns_exactly_the_records(spark, broker: BrokerProcess) -> None:  # noqa: ANN001
    create(broker, "sp-batch", 3)
    records = [{"key": b"k%d" % i, "value": b"v%d" % i, "partition": i % 3, "timestamp": 1_700_000_000_000 + i,
                "headers": [("n", b"%d" % i)]} for i in range(300)]
    records.append({"key": None, "value": None, "partition": 0, "timestamp": 1_700_000_001_000})
    produce(broker, "sp-batch", records)
    rows = reader(spark, broker, "sp-batch", includeHeaders="true").collect()
    assert len(rows) == 301
    by_value = {r.value: r for r in rows if r.value is not None}
    for i in range(300):
        r = by_value[b"v%d" % i]
        assert (r.key, r.topic, r.partition, r.timestampType) == (b"k%d" % i, "sp-batch", i % 3, 0)
        assert int(r.timestamp.timestamp() * 1000) == 1_700_000_000_000 + i
        assert [(h.key, h.value) for h in r.headers] == [("n", b"%d" % i)]
    for p in range(3):
        offsets = sorted(r.offset for r in rows if r.partition == p)
        assert offsets == list(range(len(offsets)))
    (null_row,) = [r for r in rows if r.value is None]
    assert null_row.key is None
    assert "headers" not in reader(spark, broker, "sp-batch").columns
    create(broker, "sp-lat", 1, {"message.timestamp.type": "LogAppendTime"})
    produce(broker, "sp-lat", [{"value": b"x"}])
    assert reader(spark, broker, "sp-lat").collect()[0].timestampType == 1


def test_starting_offsets_json_timestamps_and_min_partitions(spark, broker: BrokerProcess) -> None:  # noqa: ANN001
    create(broker, "sp-start", 2)
    produce(broker, "sp-start", [{"value": b"%d" % i, "partition": i % 2, "timestamp": 1000 * (i + 1)}
                                 for i in range(100)])
    df = reader(spark, broker, "sp-start", startingOffsets='{"sp-start": {"0": 40, "1": -2}}',
                endingOffsets='{"sp-start": {"0": 45, "1": -1}}')
    got = sorted((r.partition, r.offset) for r in df.collect())
    assert got == [(0, o) for o in range(40, 45)] + [(1, o) for o in range(50)]
    # partition p holds timestamps 1000*(2k+p+1); 60500 -> first record at or after it
    df = reader(spark, broker, "sp-start", startingTimestamp="60500")
    got = sorted((r.partition, r.offset) for r in df.collect())
    assert got == [(0, o) for o in range(30, 50)] + [(1, o) for o in range(30, 50)]
    df = reader(spark, broker, "sp-start", startingOffsetsByTimestamp='{"sp-start": {"0": 99000}}')
    assert sorted((r.partition, r.offset) for r in df.collect()) == [(0, 49)] + [(1, o) for o in range(50)]
    split = reader(spark, broker, "sp-start", minPartitions="8")
    assert split.rdd.getNumPartitions() >= 8 and split.count() == 100


def test_write_then_read_round_trip(spark, broker: BrokerProcess) -> None:  # noqa: ANN001
    from pyspark.sql import Row

    create(broker, "sp-rt", 2)
    rows = [Row(key=f"k{i}", value=f"value {i}".encode(), partition=i % 2,
                headers=[Row(key="h", value=b"%d" % i)]) for i in range(200)]
    spark.createDataFrame(rows, "key string, value binary, partition int, "
                                "headers array<struct<key: string, value: binary>>") \
        .write.format("dmq").mode("append").option("bootstrap.servers", broker.bootstrap).option("topic", "sp-rt").save()
    back = reader(spark, broker, "sp-rt", includeHeaders="true").collect()
    assert sorted((r.key, r.value, r.partition, tuple((h.key, h.value) for h in r.headers)) for r in back) == \
        sorted((f"k{i}".encode(), f"value {i}".encode(), i % 2, (("h", b"%d" % i),)) for i in range(200))
    # Without the topic option the topic column says where a row goes; the option, when given,
    # overrides the column (as in Spark's Kafka sink); a missing value column is a clear error.
    spark.createDataFrame([("sp-rt-2", "x")], "topic string, value string").write.format("dmq").mode("append") \
        .option("bootstrap.servers", broker.bootstrap).save()
    assert [r.value for r in reader(spark, broker, "sp-rt-2").collect()] == [b"x"]
    create(broker, "sp-rt-3", 1)
    spark.createDataFrame([("sp-rt-2", "y")], "topic string, value string").write.format("dmq").mode("append") \
        .option("bootstrap.servers", broker.bootstrap).option("topic", "sp-rt-3").save()
    assert [r.value for r in reader(spark, broker, "sp-rt-3").collect()] == [b"y"]
    assert [r.value for r in reader(spark, broker, "sp-rt-2").collect()] == [b"x"]
    with pytest.raises(Exception, match="value column"):
        spark.createDataFrame([("a",)], "key string").write.format("dmq").mode("append") \
            .option("bootstrap.servers", broker.bootstrap).option("topic", "sp-rt").save()


def _run_stream(spark, b: BrokerProcess, topic: str, out: Path, checkpoint: Path, **options: str):  # noqa: ANN001, ANN201
    r = spark.readStream.format("dmq").option("bootstrap.servers", b.bootstrap).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    q = (r.load().selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
         .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    return q


def test_streaming_bounded_batches_and_restart_exactly_once(spark, broker: BrokerProcess, tmp_path: Path) -> None:  # noqa: ANN001
    create(broker, "sp-stream", 3)
    produce(broker, "sp-stream", [{"value": b"a%d" % i, "partition": i % 3} for i in range(1000)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    q = _run_stream(spark, broker, "sp-stream", out, checkpoint, startingOffsets="earliest",
                    maxOffsetsPerTrigger="300", commitOffsetsToGroup="sp-pipeline")
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 1000 and max(sizes) <= 300 and len(sizes) >= 4
    produce(broker, "sp-stream", [{"value": b"b%d" % i, "partition": i % 3} for i in range(500)])
    _run_stream(spark, broker, "sp-stream", out, checkpoint, startingOffsets="earliest",
                maxOffsetsPerTrigger="300", commitOffsetsToGroup="sp-pipeline")
    rows = spark.read.parquet(str(out)).collect()
    keys = [(r.partition, r.offset) for r in rows]
    assert len(keys) == len(set(keys)) == 1500, "a record was repeated or skipped across the restart"
    assert sorted(r.value for r in rows) == sorted([f"a{i}" for i in range(1000)] + [f"b{i}" for i in range(500)])
    # Progress is visible to consumer-group tooling.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "sp-pipeline"})
    committed = c.committed([TopicPartition("sp-stream", p) for p in range(3)], 10)
    c.close()
    # Every batch's end is committed, the last one's included.
    assert sum(tp.offset for tp in committed) == 1500


def test_commit_offsets_to_group_after_a_one_batch_job(spark, broker: BrokerProcess, tmp_path: Path) -> None:  # noqa: ANN001
    """A short job leaves its group committed at the end it read to (Spark tells a source a
    batch is done only when it plans the next one, which never came: nothing was committed)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    create(broker, "sp-commit", 2)
    produce(broker, "sp-commit", [{"value": b"c%d" % i, "partition": i % 2} for i in range(50)])
    q = _run_stream(spark, broker, "sp-commit", tmp_path / "out", tmp_path / "checkpoint",
                    startingOffsets="earliest", commitOffsetsToGroup="sp-commit-etl")
    assert q.exception() is None and not q.isActive
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [50]
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    request = ConsumerGroupTopicPartitions("sp-commit-etl", [TopicPartition("sp-commit", p) for p in (0, 1)])
    offsets = a.list_consumer_group_offsets([request])["sp-commit-etl"].result(10)
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 25), (1, 25)]


def test_new_partitions_are_picked_up(spark, broker: BrokerProcess, tmp_path: Path) -> None:  # noqa: ANN001
    from confluent_kafka.admin import NewPartitions

    create(broker, "sp-grow", 1)
    produce(broker, "sp-grow", [{"value": b"x%d" % i} for i in range(10)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    _run_stream(spark, broker, "sp-grow", out, checkpoint, startingOffsets="earliest")
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_partitions([NewPartitions("sp-grow", 2)])["sp-grow"].result(10)
    produce(broker, "sp-grow", [{"value": b"y", "partition": 1}])
    time.sleep(0.5)
    _run_stream(spark, broker, "sp-grow", out, checkpoint, startingOffsets="earliest")
    values = sorted(r.value for r in spark.read.parquet(str(out)).collect())
    assert values == sorted([f"x{i}" for i in range(10)] + ["y"])




def test_compacted_gaps_and_data_loss(spark, broker: BrokerProcess, tmp_path: Path) -> None:  # noqa: ANN001
    """A range whose last offsets were compacted away ends; deleted offsets fail unless told not to."""
    create(broker, "sp-loss", 1)
    produce(broker, "sp-loss", [{"value": b"%d" % i} for i in range(50)])
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition("sp-loss", 0, 20)
    a.delete_records([tp])[tp].result(10)
    ok = reader(spark, broker, "sp-loss", startingOffsets='{"sp-loss": {"0": 5}}', failOnDataLoss="false")
    assert sorted(r.offset for r in ok.collect()) == list(range(20, 50))
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, broker, "sp-loss", startingOffsets='{"sp-loss": {"0": 5}}').collect()


def test_subscribe_pattern_assign_and_option_errors(spark, broker: BrokerProcess) -> None:  # noqa: ANN001
    for name in ("pat-a", "pat-b", "other-c"):
        create(broker, name, 2)
        produce(broker, name, [{"value": name.encode(), "partition": p} for p in (0, 1)])
    df = (spark.read.format("dmq").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribePattern", "pat-.*").load())
    assert sorted((r.topic, r.partition) for r in df.collect()) == [
        ("pat-a", 0), ("pat-a", 1), ("pat-b", 0), ("pat-b", 1)]
    df = (spark.read.format("dmq").option("bootstrap.servers", broker.bootstrap)
          .option("assign", '{"other-c": [1], "pat-a": [0]}').load())
    assert sorted((r.topic, r.partition) for r in df.collect()) == [("other-c", 1), ("pat-a", 0)]
    with pytest.raises(Exception, match="exactly one of the options subscribe"):
        (spark.read.format("dmq").option("bootstrap.servers", broker.bootstrap)
         .option("subscribe", "pat-a").option("assign", '{"pat-a": [0]}').load().collect())
    with pytest.raises(Exception, match="bootstrap.servers"):
        spark.read.format("dmq").option("subscribe", "pat-a").load().collect()
