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
