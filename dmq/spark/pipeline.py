"""The access-log pipeline: generator -> dmq topic -> Spark streaming -> Parquet and a dmq topic.

1. ``generate()`` writes web-server access-log lines (Common Log Format) to a
   topic at a chosen rate; their event times span ``minutes`` simulated
   minutes. The queue absorbs bursts: the generator never waits for Spark.
2. ``start_queries()`` runs two Structured Streaming queries that parse the
   lines and count requests per one-minute event-time window, by status and
   by path, with a one-minute watermark (append mode: a window is written once,
   when the watermark passes it).
3. Each finished window goes to Parquet (``<output>/by_status``,
   ``<output>/by_path``; a replayed micro-batch overwrites its own directory,
   so the files stay exact) and, as JSON, to the topic ``<topic>-counts``.

The generator ends with one marker line (path ``/__end__``) dated ten minutes
after the last event: it moves the watermark past every real window, so all of
them close, while the marker's own window never does and is never written.
Plain Spark batch jobs read the Parquet output.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

PATHS = ["/", "/index.html", "/products", "/products/42", "/cart", "/checkout", "/api/orders",
         "/api/users", "/static/app.js", "/static/style.css", "/login", "/search"]
STATUSES = [200] * 14 + [201, 204, 301, 302, 304, 400, 401, 403, 404, 404, 500, 502, 503]
METHODS = ["GET"] * 8 + ["POST", "PUT", "DELETE"]
END_PATH = "/__end__"
LOG_PATTERN = r'^(\S+) \S+ \S+ \[([^\]]+)\] "(\S+) (\S+) [^"]*" (\d{3}) (\d+|-)'
TIME_FORMAT = "dd/MMM/yyyy:HH:mm:ss Z"
COUNTS_SCHEMA = "window_start timestamp, window_end timestamp, key string, count long, batch_id long"


@dataclass(frozen=True)
class LogLine:
    ip: str
    time: datetime
    method: str
    path: str
    status: int
    size: int

    def render(self) -> str:
        stamp = self.time.strftime("%d/%b/%Y:%H:%M:%S +0000")
        return f'{self.ip} - - [{stamp}] "{self.method} {self.path} HTTP/1.1" {self.status} {self.size}'


def make_lines(count: int, minutes: int, seed: int = 7,
               start: datetime | None = None) -> list[LogLine]:
    rng = random.Random(seed)
    base = (start or datetime(2026, 1, 1, 12, 0, tzinfo=UTC)).replace(second=0, microsecond=0)
    span = minutes * 60
    return [
        LogLine(f"10.0.{rng.randrange(256)}.{rng.randrange(256)}",
                base + timedelta(seconds=int(i * span / count)), rng.choice(METHODS),
                rng.choice(PATHS), rng.choice(STATUSES), rng.randrange(200, 50_000))
        for i in range(count)
    ]


def group_for(topic: str) -> str:
    """The consumer group the pipeline commits its progress to (for `dmq groups describe`)."""
    return f"{topic}-pipeline"


def expected_counts(lines: list[LogLine]) -> tuple[Counter[tuple[datetime, int]], Counter[tuple[datetime, str]]]:
    """The windowed counts, computed directly in Python."""
    by_status: Counter[tuple[datetime, int]] = Counter()
    by_path: Counter[tuple[datetime, str]] = Counter()
    for line in lines:
        window = line.time.replace(second=0, microsecond=0)
        by_status[(window, line.status)] += 1
        by_path[(window, line.path)] += 1
    return by_status, by_path


def generate(bootstrap: str, topic: str, lines: list[LogLine], rate: float,
             on_progress: Callable[[int], None] | None = None,
             client_conf: dict[str, Any] | None = None) -> int:
    """Produce the lines (``rate`` lines/s, 0 for as fast as possible), then the end marker.

    ``on_progress`` and the return value count lines the broker acknowledged (delivery
    reports), not lines handed to the client; a line that fails delivery raises (within
    ``message.timeout.ms``, 30 s unless ``client_conf`` says otherwise). ``client_conf``
    adds librdkafka settings; the client is quiet (``log_level`` 0) unless it sets one."""
    from confluent_kafka import Producer

    from dmq.client.producing import produce_waiting

    producer = Producer({"log_level": 0, "message.timeout.ms": 30_000, **(client_conf or {}),
                         "bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    delivered = [0]
    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(err.str())
        elif msg.value() is not None and b" /__end__ " not in msg.value():
            delivered[0] += 1

    started = time.monotonic()
    end = LogLine("0.0.0.0", lines[-1].time + timedelta(minutes=10), "GET", END_PATH, 200, 0)
    for i, line in enumerate([*lines, end]):
        if rate > 0:
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        produce_waiting(producer, topic, value=line.render().encode(), key=line.ip.encode(),
                        on_delivery=on_delivery)
        producer.poll(0)
        if failures:
            break
        if on_progress is not None and i % 200 == 0:
            on_progress(delivered[0])
    remaining = producer.flush(60)
    if on_progress is not None:
        on_progress(delivered[0])
    if failures or remaining:
        why = failures[0] if failures else f"{remaining} still unacknowledged after 60 s"
        raise RuntimeError(f"{len(lines) - delivered[0]} of {len(lines)} log lines were not "
                           f"delivered to {bootstrap}: {why}")
    return delivered[0]


def end_offsets(bootstrap: str, topic: str, client_conf: dict[str, Any] | None = None) -> str:
    """``startingOffsets`` for a run that reads only what it writes: the topic's current end
    offsets as JSON, or ``earliest`` when the topic does not exist yet."""
    import json

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"log_level": 0, **(client_conf or {}), "bootstrap.servers": bootstrap,
                  "group.id": "dmq-pipeline-probe"})
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None or not md.partitions:
            return "earliest"
        ends = {str(p): c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in sorted(md.partitions)}
    finally:
        c.close()
    return json.dumps({topic: ends})


def read_counts_topic(bootstrap: str, topic: str, starting: str, client_conf: dict[str, Any] | None = None,
                      timeout: float = 60) -> dict[tuple[str, tuple[datetime, str]], int]:
    """The windowed counts the sink wrote to ``topic`` from ``starting`` (as ``end_offsets``
    gives it) to the topic's end: ``{(series, (window_start, key)): count}``. A replayed
    micro-batch writes its records again (at least once); a window and key with two
    different counts raises ``ValueError``."""
    import json

    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"log_level": 0, **(client_conf or {}), "bootstrap.servers": bootstrap,
                  "group.id": "dmq-pipeline-probe", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    out: dict[tuple[str, tuple[datetime, str]], int] = {}
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            return out
        begin = json.loads(starting).get(topic, {}) if starting != "earliest" else {}
        todo: dict[int, int] = {}
        assign = []
        for p in sorted(md.partitions):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            start = max(low, int(begin.get(str(p), low)))
            if start < high:
                todo[p] = high
                assign.append(TopicPartition(topic, p, start))
        c.assign(assign)
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} was not read to its end within {timeout:g} s")
            for msg in c.consume(1000, 1.0):
                m: Any = msg
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(m.error().str())
                    continue
                if m.offset() + 1 >= todo.get(m.partition(), 0):
                    todo.pop(m.partition(), None)
                r = json.loads(m.value())
                window = datetime.fromisoformat(r["window_start"]).astimezone(UTC)
                key = (r["series"], (window, r["key"]))
                if out.setdefault(key, r["count"]) != r["count"]:
                    raise ValueError(f"{topic} holds counts {out[key]} and {r['count']} for "
                                     f"{r['series']} {r['key']} at {window:%H:%M}")
    finally:
        c.close()
    return out


def start_queries(spark: Any, bootstrap: str, topic: str, output: str, checkpoint: str,
                  max_per_trigger: int = 20_000, starting_offsets: str = "earliest",
                  client_conf: dict[str, Any] | None = None) -> list[Any]:
    """Start the two windowed-count queries; returns the StreamingQuery objects.

    Each commits its progress to the group ``group_for(topic)``. ``client_conf`` holds
    librdkafka settings for the source's consumers and the sink's producers."""
    from pyspark.sql import functions as F

    from dmq.spark import register

    register(spark)
    kafka = {f"kafka.{k}": str(v) for k, v in (client_conf or {}).items()}
    raw = (spark.readStream.format("dmq").options(**kafka).option("bootstrap.servers", bootstrap)
           .option("subscribe", topic).option("startingOffsets", starting_offsets)
           .option("maxOffsetsPerTrigger", str(max_per_trigger))
           .option("commitOffsetsToGroup", group_for(topic)).load())
    value = F.col("value").cast("string")
    parsed = raw.select(
        F.to_timestamp(F.regexp_extract(value, LOG_PATTERN, 2), TIME_FORMAT).alias("event_time"),
        F.regexp_extract(value, LOG_PATTERN, 4).alias("path"),
        F.regexp_extract(value, LOG_PATTERN, 5).cast("int").alias("status"),
    ).where(F.col("event_time").isNotNull())
    # The end marker is not filtered out: a filter would be pushed below the watermark and
    # hide the marker from it. Its own window lies beyond the watermark it sets, so that
    # window is never emitted.
    events = parsed.withWatermark("event_time", "1 minute")
    queries = []
    for name, column in (("by_status", "status"), ("by_path", "path")):
        counts = (events.groupBy(F.window("event_time", "1 minute").alias("w"), column).count()
                  .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                          F.col(column).cast("string").alias("key"), "count"))
        queries.append(counts.writeStream.outputMode("append")
                       .foreachBatch(_sink(name, bootstrap, f"{topic}-counts", output, kafka))
                       .option("checkpointLocation", f"{checkpoint}/{name}")
                       .trigger(processingTime="1 second").queryName(f"access-logs-{name}").start())
    return queries


def _sink(name: str, bootstrap: str, topic: str, output: str,
          kafka: dict[str, str]) -> Callable[[Any, int], None]:
    def write(batch: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        if batch.isEmpty():
            return
        batch = batch.persist()
        try:
            # Overwriting the batch's own directory makes a replayed batch exact.
            batch.write.mode("overwrite").parquet(f"{output}/{name}/batch_id={batch_id}")
            (batch.select(F.concat_ws("|", F.lit(name), F.col("window_start").cast("string"), "key").alias("key"),
                          F.to_json(F.struct(F.lit(name).alias("series"), "window_start", "window_end",
                                             "key", "count")).alias("value"))
             .write.format("dmq").mode("append").options(**kafka).option("bootstrap.servers", bootstrap)
             .option("topic", topic).save())
        finally:
            batch.unpersist()

    return write


def stop_queries(queries: list[Any], wait_s: float = 300) -> bool:
    """Let the queries process what is available (stopping mid-write aborts the write), for
    up to ``wait_s`` seconds in all, then stop them. True if every query caught up.

    A query that failed is stopped at once, one that cannot catch up (its broker went
    away) once the time is up; ``spark.sql.streaming.stopTimeout`` bounds the stop."""
    import threading
    import time

    deadline = time.monotonic() + wait_s
    caught_up = True
    for q in queries:
        try:
            if not q.isActive or q.exception() is not None or wait_s <= 0:
                caught_up = caught_up and q.exception() is None and wait_s > 0
                continue
            finished, ok = threading.Event(), [False]

            def drain(q: Any = q, finished: threading.Event = finished, ok: list[bool] = ok) -> None:
                try:
                    q.processAllAvailable()
                    ok[0] = True
                except Exception:  # noqa: BLE001, S110 - the query failed: q.exception() says why
                    pass
                finally:
                    finished.set()

            threading.Thread(target=drain, daemon=True).start()
            finished.wait(max(0.0, deadline - time.monotonic()))
            caught_up = caught_up and ok[0]
        finally:
            try:
                q.stop()
            except Exception:  # noqa: BLE001 - a stop that timed out: nothing more to do
                caught_up = False
    return caught_up


def read_counts(spark: Any, output: str, name: str) -> dict[tuple[datetime, str], int]:
    """What a plain batch job sees in the Parquet output."""
    import os

    path = f"{output}/{name}"
    if not os.path.isdir(path):
        return {}
    # An explicit schema: a directory without finished files yet reads as empty.
    rows = spark.read.schema(COUNTS_SCHEMA).parquet(path).collect()
    return {(r.window_start.replace(tzinfo=UTC) if r.window_start.tzinfo is None else r.window_start, r.key): r["count"]
            for r in rows}
