"""Prometheus metrics of a broker: Kafka's metric families under Prometheus names.

``exposition(broker)`` returns a broker's ``/metrics`` in Prometheus' text format
(``CONTENT_TYPE``); ``dmq.metrics.http.MetricsServer`` serves it on its own port
(``metrics.listener``, ``dmq server --metrics HOST:PORT``), and any other web
server on the broker's event loop can mount it with that one call. The names,
and the Kafka metric each stands for, are in docs/metrics.md.

Cost: the produce and fetch paths only add to plain integers the broker's
objects keep (``dmq.metrics.requests``, ``dmq.replication.stats``); everything
else is read when scraped (``dmq.metrics.collector``). This package's
``__init__`` and ``requests`` load nothing but the standard library, so the
listener imports them without loading prometheus-client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dmq.metrics.collector import BrokerView

__all__ = ["CONTENT_TYPE", "exposition"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def exposition(broker: BrokerView) -> bytes:
    """The broker's metrics in Prometheus' text format (``CONTENT_TYPE``). Call it on the
    broker's event loop, once the broker has started. Reads the end offsets of other
    brokers' partitions for the consumer-group lag, waiting at most
    ``dmq.metrics.collector.END_OFFSETS_TIMEOUT_S``."""
    from dmq.metrics.exposition import render

    return await render(broker)
