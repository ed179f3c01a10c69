"""The ``dmq`` sink: ``df.write.format("dmq")`` and ``df.writeStream.format("dmq")``.

Columns as Spark's Kafka sink: ``value`` (required, string or binary), ``key``,
``topic`` (the ``topic`` option, when given, overrides it, as in Spark),
``partition``, ``headers`` (array of
struct key string, value binary). Options prefixed ``kafka.`` go to the
producer (``kafka.linger.ms``, ``kafka.transaction.timeout.ms``, ...).

A task's rows come as Arrow batches (``DataSourceArrowWriter``,
``DataSourceStreamArrowWriter``: Spark 4.1 and later), turned into records a
column at a time, and the producer reports failed deliveries only, looked at
every ``POLL_EVERY`` records (a task that fails writes at most that many
records after the first failure): no Python object per row besides what the
producer's call takes.

Delivery guarantee, by default: **at least once**. Each task writes with an
idempotent producer (acks=all) and fails with the first delivery error.
Idempotence removes duplicates from a producer's own retries, but a Spark task
that is retried, or a micro-batch that is replayed after a failure, writes its
rows again.

**Exactly once** (``.option("exactlyOnce", "true")``, streaming writes only):
``read_committed`` readers of the output see every row of every micro-batch
once, whatever fails and however often Spark retries a task or replays a
batch. The design:

- Each task writes its rows in one Kafka transaction. Its ``transactional.id``
  is ``dmq-spark-<query id>-<Spark partition id>``: the streaming query id is
  kept in the checkpoint, so a restarted query uses the same ids; the batch id
  is not part of it, so the ids are few and every attempt at partition *p* of
  the query shares one. A task learns the query id and the batch id from the
  local properties Spark gives every task of a micro-batch
  (``sql.streaming.queryId``, ``streaming.sql.batchId``).
- ``init_transactions`` comes first: it fences every earlier attempt of the
  same partition (a retried task's predecessor, a task of a query that was
  killed) and completes or aborts its open transaction, so nothing an
  unfinished attempt wrote becomes visible and a fenced attempt can no longer
  commit.
- Progress is a *marker*: in the same transaction the task commits, with
  ``send_offsets_to_transaction``, offset ``batch id + 1`` for partition 0 of
  the marker topic to the consumer group named like the transactional id. The
  marker and the rows commit or abort together. After ``init_transactions`` a
  task reads its marker (``read_committed``: the broker answers with stable
  offsets only); if it is already at ``batch id + 1`` or beyond, this batch's
  partition is in the output and the task writes nothing.
- The marker is one group per Spark partition rather than one group with a
  partition per Spark partition: Kafka (and dmq) accept committed offsets only
  for partitions that exist, and the number of Spark partitions is known
  neither in advance nor constant, while one single-partition topic serves
  every query. The driver creates the marker topic (``markerTopic``, default
  ``dmq-spark-markers``; nothing is ever written to it) before the first batch.
  ``dmq groups describe dmq-spark-<query id>-<p>`` shows the next batch of
  partition *p*; delete those groups when a query is retired.
- Spark's driver-side commit has nothing left to do: the tasks' transactions
  are the commit. When a batch fails after some tasks committed, Spark replays
  it and those tasks find their markers. A replayed batch must therefore be
  split into the same Spark partitions with the same rows, as for Spark's own
  exactly-once sinks: the query must be deterministic (the ``dmq`` source
  splits a replayed batch's offsets as it did the first time; a
  non-deterministic step, such as a repartition by a random key, breaks this).
- The transaction of a task lasts as long as its write;
  ``transaction.timeout.ms`` is 300000 (5 min) unless ``kafka.`` options say
  otherwise. A task that dies with its transaction open holds back
  ``read_committed`` readers of the partitions it wrote to until the next
  attempt of that Spark partition starts, or until the timeout aborts it.

A batch write (``df.write``) has no checkpoint to replay from, so a re-run of
a failed job would write again: ``exactlyOnce`` fails there with an error.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, NullType, StringType, StructType

from dmq.client.producing import produce_waiting

MARKER_TOPIC = "dmq-spark-markers"
ID_PREFIX = "dmq-spark-"
TRANSACTION_TIMEOUT_MS = 300_000
TIMEOUT_S = 120.0
POLL_EVERY = 1000  # records produced between two looks at the delivery reports


class DmqSinkError(ValueError):
    pass


@dataclass
class WriteCount(WriterCommitMessage):
    records: int
    already_written: bool = False


def _bytes(value: Any, column: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise DmqSinkError(f"column {column} must be string or binary, got {type(value).__name__}")


def _kafka_error(e: Exception) -> str:
    arg = e.args[0] if e.args else e
    return str(arg.str()) if hasattr(arg, "str") else str(arg)


def executor_ancestry() -> tuple[int, int]:
    """This process's parent and grandparent (Spark's Python daemon and executor JVM, or the
    JVM and its parent without the daemon); -1 where /proc cannot say. When the JVM dies its
    children are re-parented, so the pair changes."""
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/stat") as f:
            grandparent = int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        grandparent = -1
    return parent, grandparent


Record = tuple[str | None, bytes | None, bytes | None, int | None, list[tuple[str, bytes | None]] | None]
"""What the sink produces of one row: (topic, value, key, partition, headers)."""

_AS_BINARY = {pa.string(): pa.binary(), pa.large_string(): pa.large_binary(),
              pa.binary(): pa.binary(), pa.large_binary(): pa.large_binary()}


def _bytes_column(batch: pa.RecordBatch, name: str) -> list[Any]:
    """A string or binary column's values as bytes (None for nulls); a missing column: all None."""
    if name not in batch.schema.names:
        return [None] * batch.num_rows
    column = batch.column(name)
    if column.type == pa.null():
        return [None] * batch.num_rows
    target = _AS_BINARY.get(column.type)
    if target is None:
        raise DmqSinkError(f"column {name} must be string or binary, got {column.type}")
    return column.cast(target).to_pylist()  # the cast reinterprets strings as bytes: no decoding


def arrow_records(batches: Iterable[pa.RecordBatch], topic: str | None) -> Iterator[Record]:
    """The records of Arrow batches with the sink's columns, a column at a time (no Row objects)."""
    for batch in batches:
        n = batch.num_rows
        names = batch.schema.names
        # The topic option, when given, overrides the topic column (Spark's KafkaWriter).
        topics = batch.column("topic").to_pylist() if topic is None and "topic" in names else [topic] * n
        partitions = batch.column("partition").to_pylist() if "partition" in names else [None] * n
        headers: list[Any] = [None] * n
        if "headers" in names:
            headers = [None if hs is None else [(h["key"], _bytes(h["value"], "headers.value")) for h in hs]
                       for hs in batch.column("headers").to_pylist()]
        yield from zip(topics, _bytes_column(batch, "value"), _bytes_column(batch, "key"), partitions, headers,
                       strict=True)


def transactional_id(query_id: str, partition: int) -> str:
    """The transactional id of, and the marker group of, one Spark partition of a query."""
    return f"{ID_PREFIX}{query_id}-{partition}"


def stream_task_context() -> tuple[str, int, int]:
    """(query id, Spark partition id, batch id) of the micro-batch task running this code."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    query_id = tc.getLocalProperty("sql.streaming.queryId") if tc is not None else None
    batch_id = tc.getLocalProperty("streaming.sql.batchId") if tc is not None else None
    if tc is None or not query_id or batch_id is None:
        raise DmqSinkError("exactlyOnce: this task has no streaming query id and batch id "
                           "(Spark's local properties sql.streaming.queryId, streaming.sql.batchId)")
    return query_id, tc.partitionId(), int(batch_id)


class _Writer:
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        options = {k.lower(): v for k, v in options.items()}  # Spark's options ignore case
        self.bootstrap = options.get("bootstrap.servers") or options.get("kafka.bootstrap.servers")
        if not self.bootstrap:
            raise DmqSinkError("option bootstrap.servers (or kafka.bootstrap.servers) is required")
        names = set(schema.fieldNames())
        if "value" not in names:
            raise DmqSinkError("the DataFrame needs a value column (string or binary)")
        for name in ("value", "key"):  # checked here, on the driver, before any task starts
            kind = schema[name].dataType if name in names else None
            if kind is not None and not isinstance(kind, StringType | BinaryType | NullType):
                raise DmqSinkError(f"column {name} must be string or binary, got {kind.simpleString()}")
        self.topic = options.get("topic")
        if self.topic is None and "topic" not in names:
            raise DmqSinkError("give a topic column or the topic option")
        self.columns = names
        self.extra = {k[len("kafka."):]: v for k, v in options.items()
                      if k.startswith("kafka.") and k != "kafka.bootstrap.servers"}
        raw = options.get("exactlyonce", "false")
        if raw.lower() not in ("true", "false"):
            raise DmqSinkError(f"option exactlyOnce must be true or false, got {raw!r}")
        self.exactly_once = raw.lower() == "true"
        self.marker_topic = options.get("markertopic") or MARKER_TOPIC

    def _conf(self) -> dict[str, Any]:
        # Quiet unless the user asks for librdkafka's log (kafka.log_level): failures reach
        # Spark as this task's exception, not as raw client lines on the terminal.
        return {"bootstrap.servers": self.bootstrap, "log_level": 0}

    def _delivery(self, errors: list[str]) -> dict[str, Any]:
        """Producer settings that report failed deliveries, and only those, into ``errors``."""
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None and len(errors) < 5:
                errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

        return {"on_delivery": on_delivery, "delivery.report.only.error": True}

    def _produce(self, producer: Any, records: Iterable[Record], errors: list[str]) -> int:
        from confluent_kafka import KafkaException

        count = 0
        for topic, value, key, partition, headers in records:
            if topic is None:
                topic = self.topic
                if topic is None:
                    raise DmqSinkError("a row has a null topic and no topic option is set")
            kwargs: dict[str, Any] = {"value": value, "key": key}
            if partition is not None:
                kwargs["partition"] = int(partition)
            if headers:
                kwargs["headers"] = headers
            try:
                produce_waiting(producer, topic, **kwargs)
            except KafkaException as e:
                raise DmqSinkError(f"cannot write to {topic}: {_kafka_error(e)}") from None
            count += 1
            if not count % POLL_EVERY:  # serve delivery reports (failures only)
                producer.poll(0)
                if errors:
                    break
        producer.poll(0)
        return count

    def write_records(self, records: Iterable[Record]) -> WriteCount:
        """At least once: an idempotent producer, flushed before the task ends."""
        from confluent_kafka import Producer

        errors: list[str] = []
        producer = Producer({**self._conf(), **self._delivery(errors), "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, **self.extra})
        count = self._produce(producer, records, errors)
        remaining = producer.flush(TIMEOUT_S)
        if errors:
            raise DmqSinkError(f"writing to dmq at {self.bootstrap} failed: {'; '.join(errors)}")
        if remaining:
            raise DmqSinkError(f"{remaining} records were not acknowledged by {self.bootstrap} within 120 s")
        return WriteCount(count)

    def write_exactly_once(self, batches: Iterable[pa.RecordBatch], query_id: str, partition: int,
                           batch_id: int) -> WriteCount:
        """Partition ``partition`` of micro-batch ``batch_id`` of query ``query_id`` in one
        transaction, together with its marker; nothing if the marker says it is written."""
        from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

        # pyspark's daemon keeps its Python workers in a process group of their own, so a worker
        # can outlive its executor JVM; its rows then end where the JVM stopped sending, as if the
        # partition were complete. Committing those with the marker would lose the rest: the
        # replayed batch finds the marker and skips the partition. So the executor must still be
        # there when the transaction commits (checked after the marker's round trip, by when a
        # JVM whose death ended the rows has been reaped and its children re-parented).
        ancestry = executor_ancestry()
        batches = iter(batches)
        rows = arrow_records(batches, self.topic)
        first = next(rows, None)
        if first is None:
            return WriteCount(0)  # nothing to write, so nothing to write twice
        name = transactional_id(query_id, partition)
        errors: list[str] = []
        producer = Producer({**self._conf(), **self._delivery(errors), "acks": "all", "linger.ms": 5,
                             "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, **self.extra,
                             "transactional.id": name, "enable.idempotence": True})
        marker = Consumer({**self._conf(), **self.extra, "group.id": name, "enable.auto.commit": False,
                           "isolation.level": "read_committed"})
        in_transaction = False
        try:
            producer.init_transactions(TIMEOUT_S)  # fences earlier attempts, ends their transaction
            (done,) = marker.committed([TopicPartition(self.marker_topic, 0)], timeout=TIMEOUT_S)
            if done.error is not None:
                raise DmqSinkError(f"cannot read the marker of {name}: {done.error.str()}")
            if done.offset >= batch_id + 1:
                for _ in batches:  # the batch's rows of this partition are in the output already
                    pass
                return WriteCount(0, already_written=True)
            producer.begin_transaction()
            in_transaction = True
            count = self._produce(producer, chain([first], rows), errors)
            if errors:
                raise DmqSinkError(f"writing to dmq at {self.bootstrap} failed: {'; '.join(errors)}")
            producer.send_offsets_to_transaction(
                [TopicPartition(self.marker_topic, 0, batch_id + 1, f"batch {batch_id}: {count} records")],
                marker.consumer_group_metadata(), TIMEOUT_S)
            if executor_ancestry() != ancestry:
                raise DmqSinkError(f"exactly-once write of {name}, batch {batch_id}: Spark's executor went away "
                                   f"while this task wrote; its transaction is aborted, not committed")
            for attempt in range(3):
                try:
                    producer.commit_transaction(TIMEOUT_S)
                    break
                except KafkaException as e:  # retriable: the outcome is not known yet, ask again
                    if not e.args[0].retriable() or attempt == 2:
                        raise
            in_transaction = False
            return WriteCount(count)
        except KafkaException as e:
            why = "; ".join([_kafka_error(e), *errors])
            raise DmqSinkError(f"exactly-once write of {name}, batch {batch_id}: {why}") from None
        finally:
            if in_transaction:
                try:  # best effort; the next attempt's init_transactions aborts it anyway
                    producer.abort_transaction(10)
                except KafkaException:
                    pass
            marker.close()


def ensure_marker_topic(bootstrap: str, topic: str, extra: dict[str, str]) -> None:
    """Create the (empty, one-partition) marker topic if it does not exist."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **extra})
    try:
        found = admin.list_topics(topic=topic, timeout=30).topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return
        admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise DmqSinkError(f"cannot create the marker topic {topic}: {_kafka_error(e)}") from None


class DmqWriter(_Writer, DataSourceArrowWriter):
    """``df.write``: the task's rows arrive as Arrow batches."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        _Writer.__init__(self, options, schema)
        if self.exactly_once:
            raise DmqSinkError(
                "option exactlyOnce applies to streaming writes (df.writeStream) only: a batch write "
                "has no checkpoint to resume from, so a re-run of a failed job writes its rows again")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self.write_records(arrow_records(iterator, self.topic))


class DmqStreamWriter(_Writer, DataSourceStreamArrowWriter):
    """``df.writeStream``: a micro-batch's rows arrive as Arrow batches."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        _Writer.__init__(self, options, schema)
        if self.exactly_once:
            # Spark builds the writer on the driver for each micro-batch: cheap once the topic exists.
            assert self.bootstrap is not None
            ensure_marker_topic(self.bootstrap, self.marker_topic, self.extra)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.exactly_once:
            return self.write_exactly_once(iterator, *stream_task_context())
        return self.write_records(arrow_records(iterator, self.topic))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Rows were acknowledged (exactly once: committed) when write() returned; nothing left to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing to take back: at least once, the batch is retried; exactly once, the tasks that
        committed find their markers when it is replayed."""
