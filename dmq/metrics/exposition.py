"""One collector per broker, and the text a scrape returns.

A scrape reads the broker's objects on the event loop (``BrokerCollector.collect``
builds plain metric families from them) and formats the text on a worker thread:
the formatting, most of a scrape's time (about two thirds with a thousand
partitions), touches only those families and the process' own collectors, never
an object of the loop.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable

from prometheus_client import (
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import Metric
from prometheus_client.registry import CollectorRegistry

from dmq.metrics.collector import BrokerCollector, BrokerView

_collectors: weakref.WeakKeyDictionary[BrokerView, tuple[BrokerCollector, CollectorRegistry]] = \
    weakref.WeakKeyDictionary()


def collector_for(broker: BrokerView) -> tuple[BrokerCollector, CollectorRegistry]:
    """The broker's collector and a registry of the process' collectors (CPU, memory, open
    files, garbage collections, the Python version), made on first use."""
    found = _collectors.get(broker)
    if found is None:
        process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=process)
        PlatformCollector(registry=process)
        GCCollector(registry=process)
        found = _collectors[broker] = (BrokerCollector(broker), process)
    return found


class _Snapshot:
    """What ``generate_latest`` formats: families already collected, then the process'."""

    def __init__(self, families: list[Metric], process: CollectorRegistry) -> None:
        self.families = families
        self.process = process

    def collect(self) -> Iterable[Metric]:
        yield from self.families
        yield from self.process.collect()


async def render(broker: BrokerView) -> bytes:
    collector, process = collector_for(broker)
    await collector.refresh()
    families = list(collector.collect())  # on the loop: reads the broker's objects
    return await asyncio.to_thread(generate_latest, _Snapshot(families, process))  # type: ignore[arg-type]
