"""bench/transactions.py runs from the repository alone, reads back what it committed, and
leaves nothing behind (its figures are recorded in docs/benchmarks.md, never asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_transactions_benchmark_runs_and_cleans_up(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "transactions.py"), "--records", "3000",
                          "--repeats", "2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(result["idempotent"]) == len(result["transactional"]) == 2
    assert result["ratio"] > 0
    assert "ratio transactional / idempotent" in run.stdout
    assert [p for p in tmp_path.iterdir() if p.name != "dmq-hypothesis"] == []
    ps = subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True).stdout
    assert str(tmp_path) not in ps
