"""bench/fetch_wait.py (what a waiting consumer fetch costs each append) still runs, and its
fetch really waits through every append (it asserts so itself)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_fetch_wait_benchmark_measures_both_isolation_levels() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "fetch_wait.py"), "--partitions", "2,5",
                          "--appends", "50", "--repeats", "1"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [line.split() for line in run.stdout.splitlines()[2:]]
    assert [row[0] for row in rows] == ["2", "5"]
    assert all(float(row[1]) > 0 and float(row[2]) > 0 for row in rows)
