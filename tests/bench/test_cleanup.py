"""The ZooKeeper benchmarks leave no process or directory behind, whether they fail to
start a broker or are stopped with SIGTERM (issue 10, bug 10: every benchmark cleans up
after itself)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.zookeeper import available as zookeeper_available

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not zookeeper_available(), reason="Debian's zookeeper package is not installed")


def _left_in(tmp: Path) -> list[Path]:
    """What the run left in its temporary directory; dmq commands keep Hypothesis's cache
    there (``dmq-hypothesis``, see dmq/cli/__init__.py), which is not the benchmark's."""
    return [p for p in tmp.iterdir() if p.name != "dmq-hypothesis"]


def _children_of_run(tmp: Path) -> list[str]:
    """Processes whose command line names the run's temporary directory."""
    ps = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if str(tmp) in line and "-m pytest" not in line]


def _start(script: str, args: list[str], tmp: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(tmp)}  # the benchmark's work directory lands here
    return subprocess.Popen([sys.executable, str(ROOT / "bench" / script), *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


@pytest.mark.parametrize("script,args", [
    ("failover.py", ["--repeats", "5", "--session-timeouts", "6000"]),  # SIGTERMed long before its end
    ("cluster.py", ["--records", "500000", "--sizes", "100", "--repeats", "3", "--failovers", "1"]),
    ("latency_sweep.py", ["--seconds", "30", "--repeats", "1"]),
])
def test_sigterm_stops_every_process_and_removes_the_work_directory(
        tmp_path: Path, script: str, args: list[str]) -> None:
    bench = _start(script, args, tmp_path)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if sum("dmq server" in line for line in _children_of_run(tmp_path)) >= 3:
                break
            if bench.poll() is not None:
                out, err = bench.communicate()
                pytest.fail(f"the benchmark ended (exit {bench.returncode}) before its brokers were seen: {out[-1500:]} {err[-1500:]}")
            time.sleep(0.1)
        else:
            pytest.fail("the benchmark's brokers never started")
        bench.send_signal(signal.SIGTERM)
        bench.wait(60)
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait(10)
    time.sleep(0.5)
    assert _children_of_run(tmp_path) == []
    assert _left_in(tmp_path) == []


def test_a_broker_that_cannot_start_is_one_error_line_and_leaves_nothing(tmp_path: Path) -> None:
    bench = _start("failover.py", ["--repeats", "1", "--session-timeouts", "3000",
                                   "--override", "num.partitions=abc"], tmp_path)
    _out, err = bench.communicate(timeout=120)
    assert bench.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "exited" in lines[0], err
    assert "Traceback" not in err
    assert _children_of_run(tmp_path) == []
    assert _left_in(tmp_path) == []
