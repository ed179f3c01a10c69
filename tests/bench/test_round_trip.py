"""bench/round_trip.py runs from the repository alone (its figures are recorded in
docs/benchmarks.md, never asserted) and measures both states of both clusters
(with and without fetch sessions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.zookeeper import available

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")
def test_the_round_trip_benchmark_measures_before_and_after_the_offsets_topic_with_and_without_sessions() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "round_trip.py"), "--round-trips", "20",
                          "--repeats", "1"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    measured = [r for r in rows if "state" in r]
    assert {(r["cluster"], r["state"]) for r in measured} == {
        (c, s) for c in ("fetch sessions", "no fetch sessions") for s in ("fresh", "with __consumer_offsets")}
    assert {r["offsets_partitions"] for r in rows if "offsets_partitions" in r} == {50}
    assert all(r["p50_ms"] > 0 for r in measured)
    assert "round trip, fetch sessions, fresh: p50" in run.stdout
    assert "with __consumer_offsets: fetch sessions make the round trip" in run.stdout
