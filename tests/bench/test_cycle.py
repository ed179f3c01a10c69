"""bench/cycle.py (the whole RF=3 acks=all path in one process) still runs: it broke
unnoticed when the handlers started asking the services for an authorizer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_cycle_benchmark_replicates_every_record() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "cycle.py"), "--records", "300",
                          "--in-flight", "4"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    # every produce answered without error (acks=all: both followers had it) and consumed
    assert result["records"] == 300
    assert result["cpu_us_per_record"] > 0


def test_the_gaps_between_records_are_not_counted_as_wall_time() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "cycle.py"), "--records", "30",
                          "--gap-ms", "20"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["records"] == 30 and result["gap_ms"] == 20
    # 20 ms idle after each record: counted, the wall time would be over 20,000 us a record
    assert 0 < result["wall_us_per_record"] < 20_000
