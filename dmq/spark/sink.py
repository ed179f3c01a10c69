"""The ``dmq`` sink: ``df.write.format("dmq")`` and ``df.writeStream.format("dmq")``.

Columns as Spark's Kafka sink: ``value`` (required, string or binary), ``key``,
``topic`` (or the ``topic`` option), ``partition``, ``headers`` (array of
struct key string, value binary). Each task writes with an idempotent producer
(acks=all) and fails with the first delivery error.

Delivery guarantee: **at least once**. Idempotence removes duplicates from a
producer's own retries, but a Spark task that is retried, or a micro-batch
that is replayed after a failure, writes its rows again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from dmq.client.producing import produce_waiting


class DmqSinkError(ValueError):
    pass


@dataclass
class WriteCount(WriterCommitMessage):
    records: int


def _bytes(value: Any, column: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise DmqSinkError(f"column {column} must be string or binary, got {type(value).__name__}")


class _Writer:
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.bootstrap = options.get("bootstrap.servers") or options.get("kafka.bootstrap.servers")
        if not self.bootstrap:
            raise DmqSinkError("option bootstrap.servers (or kafka.bootstrap.servers) is required")
        names = set(schema.fieldNames())
        if "value" not in names:
            raise DmqSinkError("the DataFrame needs a value column (string or binary)")
        self.topic = options.get("topic")
        if self.topic is None and "topic" not in names:
            raise DmqSinkError("give a topic column or the topic option")
        self.columns = names
        self.extra = {k[len("kafka."):]: v for k, v in options.items()
                      if k.startswith("kafka.") and k != "kafka.bootstrap.servers"}

    def write_rows(self, rows: Iterator[Row]) -> WriteCount:
        from confluent_kafka import KafkaException, Producer

        errors: list[str] = []
        # Quiet unless the user asks for librdkafka's log (kafka.log_level): failures reach
        # Spark as this task's exception, not as raw client lines on the terminal.
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 5, "log_level": 0, **self.extra})

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None and len(errors) < 5:
                errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

        count = 0
        for row in rows:
            d = row.asDict()
            topic = d.get("topic") if d.get("topic") is not None else self.topic
            if topic is None:
                raise DmqSinkError("a row has a null topic and no topic option is set")
            kwargs: dict[str, Any] = {"value": _bytes(d.get("value"), "value"),
                                      "key": _bytes(d.get("key"), "key"), "on_delivery": on_delivery}
            if d.get("partition") is not None:
                kwargs["partition"] = int(d["partition"])
            if d.get("headers"):
                kwargs["headers"] = [(h["key"], _bytes(h["value"], "headers.value")) for h in d["headers"]]
            try:
                produce_waiting(producer, topic, **kwargs)
            except KafkaException as e:
                raise DmqSinkError(f"cannot write to {topic}: {e.args[0].str()}") from None
            producer.poll(0)
            count += 1
            if errors:
                break
        remaining = producer.flush(120)
        if errors:
            raise DmqSinkError(f"writing to dmq at {self.bootstrap} failed: {'; '.join(errors)}")
        if remaining:
            raise DmqSinkError(f"{remaining} records were not acknowledged by {self.bootstrap} within 120 s")
        return WriteCount(count)


class DmqWriter(_Writer, DataSourceWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        _Writer.__init__(self, options, schema)

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return self.write_rows(iterator)


class DmqStreamWriter(_Writer, DataSourceStreamWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        _Writer.__init__(self, options, schema)

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return self.write_rows(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Rows were acknowledged by the broker when write() returned; nothing left to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Acknowledged rows cannot be taken back (at-least-once); the batch is retried."""
