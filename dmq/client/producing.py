"""Producing through confluent-kafka with backpressure instead of errors."""

from __future__ import annotations

from typing import Any


def produce_waiting(producer: Any, topic: str, **kwargs: Any) -> None:
    """``producer.produce``; when the local queue is full, serve callbacks and retry."""
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)
