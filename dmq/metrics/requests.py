"""Per-API request counts and latency buckets, kept by the listener for metrics.

``RequestStats.observe`` runs once per answered request (``dmq.server.network``):
a dict lookup by API key, three additions and a ``bisect`` into fixed bounds. No
prometheus-client object is touched on that path; ``dmq.metrics.collector``
turns these plain numbers into a histogram family when scraped. This module
imports nothing but the standard library, so the listener may use it without
loading prometheus-client. Event-loop thread only.
"""

from __future__ import annotations

from bisect import bisect_left

# Upper bounds (seconds) of the latency buckets: Kafka's request times go from well
# under a millisecond (an acks=1 produce) to max.wait.ms (a long-polling fetch, 500 ms
# by default) and request.timeout.ms (30 s).
BOUNDS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                             1.0, 2.5, 5.0, 10.0, 30.0)


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
    per accepted connection); readers: ``dmq.metrics`` at scrape time."""

    __slots__ = ("apis", "connections_total")

    def __init__(self) -> None:
        self.apis: dict[int, ApiStats] = {}
        self.connections_total = 0

    def observe(self, api_key: int, seconds: float) -> None:
        """One request of ``api_key`` took ``seconds`` from its frame read to its answer."""
        stats = self.apis.get(api_key)
        if stats is None:
            stats = self.apis[api_key] = ApiStats()
        stats.count += 1
        stats.seconds += seconds
        stats.buckets[bisect_left(BOUNDS, seconds)] += 1
