"""One collector registry per broker, and the text a scrape returns."""

from __future__ import annotations

import weakref

from prometheus_client import (
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.registry import CollectorRegistry

from dmq.metrics.collector import BrokerCollector, BrokerView

_registries: weakref.WeakKeyDictionary[BrokerView, tuple[CollectorRegistry, BrokerCollector]] = \
    weakref.WeakKeyDictionary()


def registry_for(broker: BrokerView) -> tuple[CollectorRegistry, BrokerCollector]:
    """The broker's registry (its collector, and the process' CPU, memory, open files,
    garbage collections and Python version), made on first use."""
    found = _registries.get(broker)
    if found is None:
        registry = CollectorRegistry(auto_describe=False)
        collector = BrokerCollector(broker)
        registry.register(collector)
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        found = _registries[broker] = (registry, collector)
    return found


async def render(broker: BrokerView) -> bytes:
    registry, collector = registry_for(broker)
    await collector.refresh_end_offsets()
    return generate_latest(registry)
