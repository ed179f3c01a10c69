"""The exactly-once dmq sink (issue 11, part 4) with real Spark and a real broker: a retried
task or a replayed micro-batch writes nothing twice for read_committed readers, also when the
query is SIGKILLed mid-batch and restarted on its checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from support.broker import BrokerProcess  # noqa: E402
from support.spark import copy_query  # noqa: E402

from dmq.spark.sink import DmqSinkError, DmqStreamWriter, transactional_id  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
SCHEMA = "key string, value string"


def create(b: BrokerProcess, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


class Reader:
    """Every value of a topic as a consumer of one isolation level sees it, read as it grows."""

    def __init__(self, b: BrokerProcess, topic: str, partitions: int, isolation: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"check-{uuid.uuid4()}",
                                  "isolation.level": isolation, "enable.auto.commit": False,
                                  "log_level": 0})
        self.partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        self.consumer.assign(self.partitions)
        self.values: list[str] = []

    def poll(self, seconds: float = 0.1) -> list[str]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for msg in self.consumer.consume(1000, 0.05):
                if not msg.error():
                    self.values.append(msg.value().decode())
        return self.values

    def settle(self, quiet: float = 1.0, limit: float = 60) -> list[str]:
        """Read to the end of every partition as it is now (its high watermark; for
        read_committed, once the last stable offset reached it), then until nothing new
        arrived for ``quiet`` seconds. A quiet second alone ended a read early on a busy
        machine, between two fetches of one committed transaction."""
        deadline = time.monotonic() + limit
        ends = {tp.partition: self.consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                for tp in self.partitions}

        def at_end() -> bool:
            done = {tp.partition: tp.offset for tp in self.consumer.position(self.partitions)}
            return all(done.get(p, -1) >= end for p, end in ends.items() if end > 0)

        while not at_end() and time.monotonic() < deadline:
            self.poll(0.2)
        n = -1
        while len(self.values) != n and time.monotonic() < deadline:
            n = len(self.values)
            self.poll(quiet)
        return self.values

    def close(self) -> None:
        self.consumer.close()


def committed(b: BrokerProcess, group: str, topic: str = "dmq-spark-markers") -> int:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "log_level": 0})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], 10)
        return int(tp.offset)
    finally:
        c.close()


def write_in_spark(spark: Any, writer: DmqStreamWriter, rows: list[tuple[str, str]], query_id: str,
                   batch_id: int) -> list[Any]:
    """writer.write() in the tasks of a Spark job that carries a micro-batch's local properties,
    one task per Spark partition (two here), each given its rows as one Arrow batch, as Spark
    runs a streaming sink's tasks."""
    import pyarrow as pa

    arrow_schema = pa.schema([("key", pa.string()), ("value", pa.string())])

    def task(rows: Any) -> list[Any]:
        return [writer.write(iter([pa.RecordBatch.from_pylist([r.asDict() for r in rows], schema=arrow_schema)]))]

    sc = spark.sparkContext
    sc.setLocalProperty("sql.streaming.queryId", query_id)
    sc.setLocalProperty("streaming.sql.batchId", str(batch_id))
    try:
        df = spark.createDataFrame(rows, SCHEMA).coalesce(2)
        return sorted(df.rdd.mapPartitions(task).collect(), key=lambda m: m.records)
    finally:
        sc.setLocalProperty("sql.streaming.queryId", None)
        sc.setLocalProperty("streaming.sql.batchId", None)


def test_a_retried_task_or_replayed_batch_writes_nothing_twice(spark, broker: BrokerProcess) -> None:  # noqa: ANN001
    from pyspark.sql.types import StructType

    create(broker, "eo-retry", 2)
    schema = StructType.fromDDL(SCHEMA)
    writer = DmqStreamWriter({"bootstrap.servers": broker.bootstrap, "topic": "eo-retry",
                              "exactlyOnce": "true"}, schema)
    query_id = str(uuid.uuid4())
    batch0 = [(f"k{i}", f"b0-{i}") for i in range(100)]
    first = write_in_spark(spark, writer, batch0, query_id, 0)
    assert sum(m.records for m in first) == 100 and not any(m.already_written for m in first)
    again = write_in_spark(spark, writer, batch0, query_id, 0)  # the batch's tasks retried
    assert [(m.records, m.already_written) for m in again] == [(0, True), (0, True)]
    batch1 = [(f"k{i}", f"b1-{i}") for i in range(30)]
    write_in_spark(spark, writer, batch1, query_id, 1)
    write_in_spark(spark, writer, batch1, query_id, 1)
    write_in_spark(spark, writer, batch0, query_id, 0)  # an old batch replayed: still nothing
    reader = Reader(broker, "eo-retry", 2, "read_committed")
    try:
        values = reader.settle()
    finally:
        reader.close()
    assert sorted(values) == sorted(v for _, v in batch0 + batch1)
    # The marker of each Spark partition: the next batch it expects.
    assert [committed(broker, transactional_id(query_id, p)) for p in (0, 1)] == [2, 2]
    # Another query (another id) is not mistaken for this one.
    other = write_in_spark(spark, writer, batch1, str(uuid.uuid4()), 1)
    assert sum(m.records for m in other) == 30


def arrow_batches(rows: list[Any]) -> Any:
    """Rows of (value string, partition int) as Spark hands them to the sink: Arrow batches
    (of up to 8 rows here, so a task's rows span several)."""
    import pyarrow as pa

    schema = pa.schema([("value", pa.string()), ("partition", pa.int32())])
    return iter([pa.RecordBatch.from_pylist([r.asDict() for r in rows[i:i + 8]], schema=schema)
                 for i in range(0, len(rows), 8)])


def test_an_unfinished_attempt_is_fenced_and_aborted(broker: BrokerProcess) -> None:
    """A task killed mid-write left its transaction open; a failed attempt aborted its own.
    Neither's rows are visible, and the next attempt writes the partition once."""
    from pyspark.sql import Row
    from pyspark.sql.types import StructType

    create(broker, "eo-zombie", 1)
    writer = DmqStreamWriter({"bootstrap.servers": broker.bootstrap, "topic": "eo-zombie",
                              "exactlyOnce": "true"}, StructType.fromDDL("value string, partition int"))
    query_id = str(uuid.uuid4())
    zombie = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id(query_id, 0),
                       "log_level": 0})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("eo-zombie", b"zombie", partition=0)
    assert zombie.flush(10) == 0
    rows = [Row(value=f"r{i}", partition=0) for i in range(20)]
    # An attempt that fails half way (a row for a partition the topic lacks) leaves nothing.
    with pytest.raises(DmqSinkError):
        writer.write_exactly_once(arrow_batches([*rows[:10], Row(value="bad", partition=7), *rows[10:]]),
                                  query_id, 0, 5)
    assert committed(broker, transactional_id(query_id, 0)) < 0
    done = writer.write_exactly_once(arrow_batches(rows), query_id, 0, 5)
    assert (done.records, done.already_written) == (20, False)
    assert writer.write_exactly_once(arrow_batches(rows), query_id, 0, 5).already_written
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)
    committed_reader = Reader(broker, "eo-zombie", 1, "read_committed")
    everything = Reader(broker, "eo-zombie", 1, "read_uncommitted")
    try:
        assert sorted(committed_reader.settle()) == sorted(r.value for r in rows)
        assert "zombie" in everything.settle()  # on the log, aborted
    finally:
        committed_reader.close()
        everything.close()


def test_batch_writes_refuse_exactly_once(spark, broker: BrokerProcess) -> None:  # noqa: ANN001
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="exactlyOnce applies to streaming writes"):
        (df.write.format("dmq").mode("append").option("bootstrap.servers", broker.bootstrap)
         .option("topic", "eo-batch").option("exactlyOnce", "true").save())
    with pytest.raises(Exception, match="exactlyOnce must be true or false"):
        (df.write.format("dmq").mode("append").option("bootstrap.servers", broker.bootstrap)
         .option("topic", "eo-batch").option("exactlyOnce", "yes").save())


CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from dmq.spark import register
from pyspark.sql import SparkSession
from support.spark import copy_query

# Small Arrow batches and a small buffer to the Python writer: rows reach it (and the broker)
# a few hundred at a time while the query runs, rather than all at the end of the task.
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50").config("spark.buffer.size", "4096")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
register(spark)
q = copy_query(spark, *sys.argv[2:6], delay_ms=int(sys.argv[6]), exactly_once=sys.argv[7] == "true",
               same_partitions=True)
print("started", q.id, flush=True)
q.awaitTermination()
print("finished", flush=True)
"""

# Rows in input partitions 0 and 1, DELAY_MS per row: task 0 ends at once, task 1 takes 10 s,
# long enough to catch it writing even when task 0 starts seconds late (a busy machine).
# Each task writes the sink partition numbered as its input: had task 1's open transaction
# begun in the partition task 0 writes, read_committed readers would see none of task 0's
# committed rows until task 1 ended (the last stable offset stops at the first open
# transaction), and a late task 0 was never seen done mid-batch (whole suite, 2026-11-28).
SMALL, BIG, DELAY_MS = 100, 2000, 5


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_a_query_killed_mid_batch_and_restarted(spark, broker: BrokerProcess, tmp_path: Path,  # noqa: ANN001
                                                exactly_once: bool) -> None:
    """SIGKILL the query (driver, JVM, Python workers) when task 0 has written (exactly once:
    committed) all its rows and task 1 some of its rows, then restart it on its checkpoint.
    Exactly once: read_committed readers see each input row once. At least once (the default):
    the replayed batch writes task 0's rows again."""
    mode = "eo" if exactly_once else "alo"
    source, sink, checkpoint = f"{mode}-kill-in", f"{mode}-kill-out", str(tmp_path / "checkpoint")
    create(broker, source, 2)
    create(broker, sink, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(SMALL):
        p.produce(source, key=b"a%d" % i, value=b"a%d" % i, partition=0)
    for i in range(BIG):
        p.produce(source, key=b"b%d" % i, value=b"b%d" % i, partition=1)
    assert p.flush(30) == 0
    expected = [f"a{i}" for i in range(SMALL)] + [f"b{i}" for i in range(BIG)]

    log = tmp_path / "query.log"
    with open(log, "wb") as out:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(TESTS), broker.bootstrap, source, sink, checkpoint, str(DELAY_MS),
             str(exactly_once).lower()],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    # Task 0's rows count once they are visible to read_committed readers (exactly once: its
    # transaction committed); task 1's as soon as any reader sees them.
    visible = Reader(broker, sink, 2, "read_committed")
    written = Reader(broker, sink, 2, "read_uncommitted")
    try:
        deadline = time.monotonic() + 120
        seen: list[tuple[float, int, int]] = []  # (seconds, task 0's rows visible, task 1's rows written)
        while time.monotonic() < deadline and child.poll() is None:
            a_done = sum(v.startswith("a") for v in visible.poll())
            b_written = sum(v.startswith("b") for v in written.poll())
            if not seen or seen[-1][1:] != (a_done, b_written):
                seen.append((round(time.monotonic() - deadline + 120, 2), a_done, b_written))
            if a_done == SMALL and 0 < b_written < BIG:
                break
        else:
            pytest.fail(f"never caught the query mid-batch (exit code {child.poll()}), seen {seen}:\n"
                        + log.read_text()[-3000:])
        os.killpg(child.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        child.wait(10)
        b_at_kill = sum(v.startswith("b") for v in written.settle())  # task 1's rows on the log
        assert 0 < b_at_kill < BIG
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(10)
        visible.close()
        written.close()
    assert "finished" not in log.read_text()

    q = copy_query(spark, broker.bootstrap, source, sink, checkpoint, exactly_once=exactly_once)
    q.awaitTermination(180)
    assert q.exception() is None and not q.isActive
    assert [p["batchId"] for p in q.recentProgress if p["numInputRows"]] == [0], "batch 0 was replayed"
    committed_reader = Reader(broker, sink, 2, "read_committed")
    try:
        counts = Counter(committed_reader.settle())
    finally:
        committed_reader.close()
    if not exactly_once:
        # The replay wrote task 0's rows a second time, and the rows task 1 had written.
        assert set(counts) == set(expected)
        assert all(counts[f"a{i}"] == 2 for i in range(SMALL))
        assert sum(counts.values()) == len(expected) + SMALL + b_at_kill
        return
    assert sorted(counts.elements()) == sorted(expected), "a row is missing or repeated"
    # Task 1's first rows were written, then aborted when the restarted task fenced the dead one.
    everything = Reader(broker, sink, 2, "read_uncommitted")
    try:
        assert len(everything.settle()) == len(expected) + b_at_kill
    finally:
        everything.close()
    assert [committed(broker, transactional_id(str(q.id), p)) for p in (0, 1)] == [1, 1]


# A Python worker that outlives its executor: pyspark's daemon keeps its workers in a process
# group of their own, so killing a query's process group can leave one writing. Its rows then
# end where the JVM stopped sending (between two Arrow messages, as if the partition ended).
WORKER = """
import os, sys, time
import pyarrow as pa
from pyspark.sql.types import IntegerType, StringType, StructField, StructType
from dmq.spark.sink import DmqSinkError, DmqStreamWriter
bootstrap, topic, query_id, status = sys.argv[1:5]
writer = DmqStreamWriter({"bootstrap.servers": bootstrap, "topic": topic, "exactlyOnce": "true"},
                         StructType([StructField("value", StringType()), StructField("partition", IntegerType())]))
executor = os.getppid()

def batches():
    yield pa.RecordBatch.from_pylist([{"value": f"r{i}", "partition": 0} for i in range(10)],
                                     schema=pa.schema([("value", pa.string()), ("partition", pa.int32())]))
    open(status, "w").write("produced")
    deadline = time.monotonic() + 60
    while os.getppid() == executor and time.monotonic() < deadline:
        time.sleep(0.01)

try:
    done = writer.write_exactly_once(batches(), query_id, 0, 3)
    open(status, "w").write(f"committed {done.records}")
except DmqSinkError as e:
    open(status, "w").write(f"refused: {e}")
"""
EXECUTOR = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', *sys.argv[1:]]); time.sleep(120)"


def test_a_worker_whose_executor_died_does_not_commit_its_partial_rows(broker: BrokerProcess,
                                                                       tmp_path: Path) -> None:
    """The worker's rows end because its executor died, not because the partition did: it
    must not commit them with the partition's marker (the restarted query would then skip the
    partition, and the rows it never got would be lost). Seen in the whole suite: the killed
    query's worker committed 150 of 2,000 rows, and the restart wrote none of the rest."""
    create(broker, "eo-orphan", 1)
    query_id = str(uuid.uuid4())
    status = tmp_path / "status"
    executor = subprocess.Popen([sys.executable, "-c", EXECUTOR, WORKER, broker.bootstrap, "eo-orphan", query_id,
                                 str(status)], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (status.exists() and status.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status.exists() and status.read_text() == "produced"
        executor.kill()  # the executor stand-in only: its worker lives on, as pyspark's do
        executor.wait(10)
        while status.read_text() == "produced" and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if executor.poll() is None:
            os.killpg(executor.pid, signal.SIGKILL)
    assert status.read_text().startswith("refused: "), status.read_text()
    assert "executor went away" in status.read_text()
    assert committed(broker, transactional_id(query_id, 0)) < 0
    reader = Reader(broker, "eo-orphan", 1, "read_committed")
    try:
        assert reader.settle(quiet=0.5, limit=10) == []
    finally:
        reader.close()
