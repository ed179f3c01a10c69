"""The sink's rows as records, from Arrow batches (what Spark hands a DataSourceArrowWriter)
and from Rows (streaming writers before Spark 4.3), without Spark."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql import Row  # noqa: E402
from pyspark.sql.types import IntegerType, StringType, StructField, StructType  # noqa: E402

from dmq.spark.sink import DmqSinkError, DmqWriter, arrow_records, row_records  # noqa: E402

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])


def test_arrow_batches_become_records_column_by_column() -> None:
    batch = pa.RecordBatch.from_pydict({
        "value": pa.array(["a", None, "ü"], pa.string()),
        "key": pa.array([b"k", None, b""], pa.binary()),
        "topic": pa.array(["t1", None, "t2"]),
        "partition": pa.array([0, None, 2], pa.int32()),
        "headers": pa.array([[{"key": "h", "value": b"x"}], None, []], pa.list_(HEADER)),
    })
    assert list(arrow_records([batch, batch.slice(0, 1)], "default")) == [
        ("t1", b"a", b"k", 0, [("h", b"x")]),
        (None, None, None, None, None),  # a null topic: the producing loop takes the option's
        ("t2", "ü".encode(), b"", 2, []),
        ("t1", b"a", b"k", 0, [("h", b"x")]),
    ]


def test_missing_columns_are_the_topic_option_and_nulls() -> None:
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"v"], pa.large_binary())})
    assert list(arrow_records([batch], "opt")) == [("opt", b"v", None, None, None)]
    nulls = pa.RecordBatch.from_pydict({"value": pa.array([None], pa.null()), "key": pa.array(["k"], pa.large_string())})
    assert list(arrow_records([nulls], "opt")) == [("opt", None, b"k", None, None)]


def test_rows_become_the_same_records() -> None:
    rows = [Row(value="a", key=b"k", topic="t1", partition=0, headers=[Row(key="h", value=b"x")]),
            Row(value=b"b", key=None, topic=None, partition=None, headers=None)]
    assert list(row_records(rows, "opt")) == [("t1", b"a", b"k", 0, [("h", b"x")]),
                                              (None, b"b", None, None, None)]


def test_a_value_that_is_not_text_or_bytes_is_refused_before_any_task() -> None:
    schema = StructType([StructField("value", IntegerType())])
    with pytest.raises(DmqSinkError, match="column value must be string or binary, got int"):
        DmqWriter({"bootstrap.servers": "127.0.0.1:1", "topic": "t"}, schema)
    bad = pa.RecordBatch.from_pydict({"value": pa.array([1], pa.int64())})
    with pytest.raises(DmqSinkError, match="column value must be string or binary, got int64"):
        list(arrow_records([bad], "t"))
    DmqWriter({"bootstrap.servers": "127.0.0.1:1", "topic": "t"}, StructType([StructField("value", StringType())]))
