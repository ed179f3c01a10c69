"""Helpers for tests that read dmq topics with Spark."""

from __future__ import annotations

from typing import Any

from support.broker import BrokerProcess


def reader(spark: Any, b: BrokerProcess, topic: str, **options: str) -> Any:
    """A batch DataFrame of a topic through the dmq source."""
    r = spark.read.format("dmq").option("bootstrap.servers", b.bootstrap).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def copy_query(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: str, *,
               delay_ms: int = 0, exactly_once: bool = False) -> Any:
    """Start an ``availableNow`` streaming query copying ``source`` (key, value) to ``sink``
    with the dmq source and sink. ``delay_ms`` slows every row down in the JVM
    (``java.lang.Thread.sleep`` through ``reflect``, its result cut to ''), so a test can
    kill the query while it writes; the output is the input whatever the delay."""
    slow = f"left(reflect('java.lang.Thread', 'sleep', CAST({int(delay_ms)} AS BIGINT)), 0)"
    df = (spark.readStream.format("dmq").option("bootstrap.servers", bootstrap).option("subscribe", source)
          .option("startingOffsets", "earliest").load()
          .selectExpr("key", f"concat(CAST(value AS STRING), {slow}) AS value"))
    w = (df.writeStream.format("dmq").option("bootstrap.servers", bootstrap).option("topic", sink)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True))
    if exactly_once:
        w = w.option("exactlyOnce", "true")
    return w.start()
