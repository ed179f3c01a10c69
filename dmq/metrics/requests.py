"""Per-API request counts and latency buckets, kept by the listener for metrics.

``RequestStats.observe`` runs once per answered request (``dmq.server.network``):
a dict lookup by API key, three additions and a ``bisect`` into fixed bounds. No
prometheus-client object is touched on that path; ``dmq.metrics.collector``
turns these plain numbers into a histogram family when scraped. This module
imports nothing but the standard library, so the listener may use it without
loading prometheus-client. ``LoopLag`` measures how late the event loop runs its
timers. Event-loop thread only.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Container
from time import monotonic

# Upper bounds (seconds) of the latency buckets: Kafka's request times go from well
# under a millisecond (an acks=1 produce) to max.wait.ms (a long-polling fetch, 500 ms
# by default) and request.timeout.ms (30 s).
BOUNDS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                             1.0, 2.5, 5.0, 10.0, 30.0)
# Where the requests of API keys outside ``known`` count (a frame too short for a key too).
UNKNOWN_API_KEY = -1


class ApiStats:
    """One API's requests: ``count`` answered, ``seconds`` their total time, ``buckets[i]``
    how many took at most ``BOUNDS[i]`` and more than the bound before it (the last: more
    than every bound). Invariant: ``sum(buckets) == count``."""

    __slots__ = ("count", "seconds", "buckets")

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self.buckets = [0] * (len(BOUNDS) + 1)


class RequestStats:
    """The requests a listener answered, by API key, and its connections.

    Writers: the listener's connections (``observe`` per request, ``connections_total``
    per accepted connection); readers: ``dmq.metrics`` at scrape time. Given ``known`` (the
    API keys the broker serves), any other key counts under ``UNKNOWN_API_KEY``: a client
    sending junk frames cannot make a label set per key (65,536 of them)."""

    __slots__ = ("apis", "connections_total", "known")

    def __init__(self, known: Container[int] | None = None) -> None:
        self.apis: dict[int, ApiStats] = {}
        self.connections_total = 0
        self.known = known

    def observe(self, api_key: int, seconds: float) -> None:
        """One request of ``api_key`` took ``seconds`` from its frame read to its answer."""
        stats = self.apis.get(api_key)
        if stats is None:
            if self.known is not None and api_key not in self.known:
                api_key = UNKNOWN_API_KEY
            stats = self.apis.get(api_key)
            if stats is None:
                stats = self.apis[api_key] = ApiStats()
        stats.count += 1
        stats.seconds += seconds
        stats.buckets[bisect_left(BOUNDS, seconds)] += 1


# Event-loop lag: how late a timer runs, in seconds.
LAG_BOUNDS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
LAG_INTERVAL_S = 0.5


class LoopLag:
    """How late the event loop runs a timer due every ``LAG_INTERVAL_S``: the time a
    ready callback (a request's next step) waits behind others. ``buckets`` as in
    ``ApiStats``, over ``LAG_BOUNDS``. Start it on the loop it measures; it runs until
    ``stop`` or the loop ends. Event-loop thread only."""

    __slots__ = ("count", "seconds", "buckets", "_task")

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self.buckets = [0] * (len(LAG_BOUNDS) + 1)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="dmq-loop-lag")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            due = monotonic() + LAG_INTERVAL_S
            await asyncio.sleep(LAG_INTERVAL_S)
            lag = max(monotonic() - due, 0.0)
            self.count += 1
            self.seconds += lag
            self.buckets[bisect_left(LAG_BOUNDS, lag)] += 1
