"""RequestStats: per-API counts and latency buckets as the listener keeps them."""

from __future__ import annotations

import subprocess
import sys

from dmq.metrics.collector import api_name
from dmq.metrics.requests import BOUNDS, RequestStats


def test_each_request_lands_in_the_first_bucket_its_time_fits() -> None:
    stats = RequestStats()
    times = [0.0, 0.0005, 0.00051, 0.2, 0.5, 29.9, 30.0, 31.0, 1000.0]
    for t in times:
        stats.observe(0, t)
    stats.observe(1, 0.002)
    produce = stats.apis[0]
    assert produce.count == len(times) == sum(produce.buckets)
    assert produce.seconds == sum(times)
    # le semantics: a time equal to a bound is in that bound's bucket.
    expected = [0] * (len(BOUNDS) + 1)
    for t in times:
        expected[next((i for i, b in enumerate(BOUNDS) if t <= b), len(BOUNDS))] += 1
    assert produce.buckets == expected
    assert produce.buckets[0] == 2 and produce.buckets[-1] == 2
    assert stats.apis[1].count == 1 and stats.apis[1].buckets[BOUNDS.index(0.0025)] == 1


def test_apis_are_named_as_kafka_names_them() -> None:
    assert api_name(0) == "Produce"
    assert api_name(1) == "Fetch"
    assert api_name(18) == "ApiVersions"
    assert api_name(23) == "OffsetForLeaderEpoch"
    assert api_name(22) == "InitProducerId"
    assert api_name(32000) == "32000"


def test_the_listener_counts_without_loading_prometheus_client() -> None:
    """The hot path's counters are plain Python: importing the listener (and the
    replication layer that counts bytes) loads no prometheus-client module."""
    code = ("import sys, dmq.server.network, dmq.replication.replica_manager; "
            "print(sorted(m for m in sys.modules if m.startswith('prometheus_client')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_api_keys_the_broker_does_not_know_share_one_unknown_label() -> None:
    """Junk frames name any of 65,536 API keys: each made a label set of its own (request
    metrics grew without bound). Keys outside the known ones count under UNKNOWN_API_KEY,
    named "unknown"."""
    from dmq.handlers import HANDLERS
    from dmq.metrics.requests import UNKNOWN_API_KEY

    stats = RequestStats(known=HANDLERS)
    for key in range(1000, 3000):
        stats.observe(key, 0.001)
    stats.observe(0, 0.001)
    stats.observe(-1, 0.001)
    assert set(stats.apis) == {0, UNKNOWN_API_KEY}
    assert stats.apis[UNKNOWN_API_KEY].count == 2001
    assert api_name(UNKNOWN_API_KEY) == "unknown"
