"""The broker process's Python heap: startup objects frozen out of the cyclic collector,
and how long its collections pause the event loop.

CPython's cycle collector walks every tracked container object of the generations it
collects. A started broker holds about 90,000 of them (modules, kio's protocol schemas,
classes, functions) in the oldest generation, and each collection of it took 40-55 ms
on the 2-vCPU machine of docs/benchmarks.md, with every produce and fetch on the event
loop waiting; two such pauses fell in one 12 s latency run. ``freeze_startup_heap()``,
called once the broker has started, collects and then moves everything alive into the
permanent generation (``gc.freeze``), so later collections walk only what was made
since. The objects frozen live as long as the process anyway; one that dies later is
still freed by reference counting, only a cycle among them would stay (a bounded leak of
startup objects, none by design). Kafka's equivalent is its JVM settings (G1 with a
20 ms pause target).

``GcPauses`` times each collection per generation through ``gc.callbacks``; the metrics
endpoint exports the counts, the total and the longest pause. Process-wide, like the
collector: ``PAUSES`` is the one instance, installed by ``install()``.
"""

from __future__ import annotations

import gc
import time
from typing import Any

GENERATIONS = (0, 1, 2)


class GcPauses:
    """Invariant: ``count[g]``, ``total_s[g]`` and ``max_s[g]`` cover every collection of
    generation ``g`` that ended since ``install()``. Written by the collector's callback
    (in whichever thread collects), read by the metrics scrape."""

    def __init__(self) -> None:
        self.count = dict.fromkeys(GENERATIONS, 0)
        self.total_s = dict.fromkeys(GENERATIONS, 0.0)
        self.max_s = dict.fromkeys(GENERATIONS, 0.0)
        self._started = 0.0
        self._installed = False

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self._callback)
            self._installed = True

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        generation = info.get("generation", 2)
        if generation in self.count:
            self.count[generation] += 1
            self.total_s[generation] += took
            if took > self.max_s[generation]:
                self.max_s[generation] = took


PAUSES = GcPauses()


def install() -> None:
    PAUSES.install()


def freeze_startup_heap() -> int:
    """Collect, then freeze every object alive now (see the module's docstring); the
    number of objects frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def frozen_objects() -> int:
    return gc.get_freeze_count()
