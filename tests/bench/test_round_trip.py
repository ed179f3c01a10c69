"""bench/round_trip.py runs from the repository alone (its figures are recorded in
docs/benchmarks.md, never asserted) and measures both states of the cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.zookeeper import available

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not available(), reason="Debian's zookeeper package is not installed")
def test_the_round_trip_benchmark_measures_before_and_after_the_offsets_topic() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "round_trip.py"), "--round-trips", "20",
                          "--repeats", "1"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert {r["cluster"] for r in rows if "cluster" in r} == {"fresh", "with __consumer_offsets"}
    assert {"offsets_partitions": 50} in rows
    assert all(r["p50_ms"] > 0 for r in rows if "cluster" in r)
    assert "round trip, fresh: p50" in run.stdout
