"""bench/compare.py ships whole in the repository and leaves no process behind, whether
it succeeds or fails (issue 10, bug 10)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run_in_own_session(args: list[str], timeout: float = 240) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run compare.py as the leader of a new session; afterwards list what of that session
    or of its brokers' own process groups is still alive (nothing should be)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "compare.py"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=ROOT)
    out, err = proc.communicate(timeout=timeout)
    left = subprocess.run(["ps", "-ww", "-eo", "pid=,sid=,args="], capture_output=True, text=True).stdout
    leftovers = [line for line in left.splitlines()
                 if line.split()[1] == str(proc.pid) or ("dmq-bench-" in line and "dmq server" in line)]
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), leftovers


def test_compare_runs_from_the_repository_alone_and_cleans_up(tmp_path: Path) -> None:
    res, leftovers = _run_in_own_session([
        "--no-reference", "--repeats", "1", "--cases", "0", "--records", "20000",
        "--latency-seconds", "2", "--out", str(tmp_path / "r.jsonl")])
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    produce = rows[0]["kbench"]["produce"]
    assert produce["ok"] and produce["delivered_ok"] == 20000 and produce["records_per_s"] > 0
    assert rows[0]["kbench"]["consume"]["records"] == 20000
    assert "| p1 100 B acks=1 |" in res.stdout
    assert leftovers == []


def test_compare_that_cannot_start_dmq_says_so_and_leaves_nothing(tmp_path: Path) -> None:
    with socket.socket() as busy:  # bound, not listening: dmq cannot bind the port and exits
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        res, leftovers = _run_in_own_session([
            "--no-reference", "--repeats", "1", "--cases", "0", "--records", "1000",
            "--dmq-port", str(port), "--out", str(tmp_path / "r.jsonl")], timeout=120)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1].startswith("error: dmq did not start"), res.stderr
    assert leftovers == []
