"""The sink's rows as records, from Arrow batches (what Spark hands a DataSourceArrowWriter),
without Spark; and a write that fails part way fails its task."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from pyspark.sql.types import IntegerType, StringType, StructField, StructType  # noqa: E402
from support.broker import BrokerProcess  # noqa: E402

from dmq.spark.sink import POLL_EVERY, DmqSinkError, DmqWriter, arrow_records  # noqa: E402

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])


def test_arrow_batches_become_records_column_by_column() -> None:
    batch = pa.RecordBatch.from_pydict({
        "value": pa.array(["a", None, "ü"], pa.string()),
        "key": pa.array([b"k", None, b""], pa.binary()),
        "topic": pa.array(["t1", None, "t2"]),
        "partition": pa.array([0, None, 2], pa.int32()),
        "headers": pa.array([[{"key": "h", "value": b"x"}], None, []], pa.list_(HEADER)),
    })
    assert list(arrow_records([batch, batch.slice(0, 1)], None)) == [
        ("t1", b"a", b"k", 0, [("h", b"x")]),
        (None, None, None, None, None),  # a null topic and no option: the producing loop refuses the row
        ("t2", "ü".encode(), b"", 2, []),
        ("t1", b"a", b"k", 0, [("h", b"x")]),
    ]


def test_the_topic_option_overrides_the_topic_column() -> None:
    """As in Spark's Kafka sink (KafkaWriter: the option, when set, overrides the column):
    a source DataFrame written on with .option("topic", ...) went back to the topics its topic
    column named."""
    batch = pa.RecordBatch.from_pydict({"value": [b"1", b"2"], "topic": ["a", None]})
    assert [r[0] for r in arrow_records([batch], "b")] == ["b", "b"]
    assert [r[0] for r in arrow_records([batch], None)] == ["a", None]


def test_missing_columns_are_the_topic_option_and_nulls() -> None:
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"v"], pa.large_binary())})
    assert list(arrow_records([batch], "opt")) == [("opt", b"v", None, None, None)]
    nulls = pa.RecordBatch.from_pydict({"value": pa.array([None], pa.null()), "key": pa.array(["k"], pa.large_string())})
    assert list(arrow_records([nulls], "opt")) == [("opt", None, b"k", None, None)]


def test_int64_partitions_null_header_values_and_text_that_is_not_utf8() -> None:
    not_utf8 = pa.array([b"\xff\xfe"], pa.binary()).view(pa.string())  # as CAST(binary AS STRING) can make
    batch = pa.RecordBatch.from_pydict({
        "value": not_utf8, "partition": pa.array([3], pa.int64()),
        "headers": pa.array([[{"key": "h", "value": None}]], pa.list_(HEADER))})
    assert list(arrow_records([batch], "t")) == [("t", b"\xff\xfe", None, 3, [("h", None)])]
    assert list(arrow_records([], "t")) == []


def test_a_value_that_is_not_text_or_bytes_is_refused_before_any_task() -> None:
    schema = StructType([StructField("value", IntegerType())])
    with pytest.raises(DmqSinkError, match="column value must be string or binary, got int"):
        DmqWriter({"bootstrap.servers": "127.0.0.1:1", "topic": "t"}, schema)
    bad = pa.RecordBatch.from_pydict({"value": pa.array([1], pa.int64())})
    with pytest.raises(DmqSinkError, match="column value must be string or binary, got int64"):
        list(arrow_records([bad], "t"))
    DmqWriter({"bootstrap.servers": "127.0.0.1:1", "topic": "t"}, StructType([StructField("value", StringType())]))


def test_a_failure_after_the_first_poll_fails_the_task(broker: BrokerProcess) -> None:
    """A record for a partition the topic lacks, after the first look at the delivery reports:
    the write raises (the task fails) rather than report the rows written."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic("sink-fail", 1, 1)])["sink-fail"].result(30)
    good = POLL_EVERY + POLL_EVERY // 2
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"v"] * (good + 10), pa.binary()),
                                        "partition": pa.array([0] * good + [7] * 10, pa.int32())})
    writer = DmqWriter({"bootstrap.servers": broker.bootstrap, "topic": "sink-fail"},
                       StructType([StructField("value", StringType()), StructField("partition", IntegerType())]))
    with pytest.raises(DmqSinkError, match="sink-fail"):
        writer.write(iter([batch]))
    ok = writer.write(iter([batch.slice(0, good)]))
    assert ok.records == good  # type: ignore[attr-defined]
