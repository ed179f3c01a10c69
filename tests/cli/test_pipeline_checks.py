"""`dmq pipeline run` checks what Spark needs before it starts Spark (issue 10, bug 7):
Java 17 and PySpark, each with one line that says how to install it."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path


def _pipeline(tmp_path: Path, env: dict[str, str], *pre: str,
              extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    with socket.socket() as listening:  # a "broker" that accepts: the reachability check passes
        listening.bind(("127.0.0.1", 0))
        listening.listen(5)
        port = listening.getsockname()[1]
        return subprocess.run([sys.executable, *pre, "-m", "dmq", "pipeline", "run", "-b", f"127.0.0.1:{port}",
                               "--output", str(tmp_path / "out"), *extra], capture_output=True, text=True,
                              timeout=60, env=env)


def test_an_old_java_is_named_with_the_install_command(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho \'openjdk version "11.0.22" 2024-01-16\' >&2\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("JAVA_HOME", None)
    res = _pipeline(tmp_path, env)
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        f"error: {fake} is Java 11; Spark needs Java 17 or newer: apt-get install openjdk-17-jre-headless"]


def test_missing_pyspark_names_the_install_command(tmp_path: Path) -> None:
    blocker = tmp_path / "sitecustomize_dir"
    blocker.mkdir()
    (blocker / "pyspark").mkdir()
    (blocker / "pyspark" / "__init__.py").write_text("raise ImportError('no pyspark here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])}
    res = _pipeline(tmp_path, env)
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        "error: PySpark is not installed: run .venv/bin/pip install -e '.[spark]' in the dmq checkout"]


def test_a_standalone_master_is_checked_before_spark_starts(tmp_path: Path) -> None:
    """--master spark://HOST:PORT: malformed is a usage error; unreachable is one line, before
    Spark starts (its client would otherwise retry for a minute)."""
    bad = _pipeline(tmp_path, dict(os.environ), extra=("--master", "spark://no-port"))
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == ["error: --master 'spark://no-port': a standalone master is spark://HOST:PORT"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    gone = _pipeline(tmp_path, dict(os.environ), extra=("--master", f"spark://127.0.0.1:{closed}"))
    assert gone.returncode == 1
    assert gone.stderr.splitlines() == [
        f"error: cannot reach the Spark master spark://127.0.0.1:{closed}: connection refused"]
    assert "Starting Spark" not in gone.stdout
