"""Run the ``dmq`` command line as a subprocess, as a user would."""

from __future__ import annotations

import os
import socket
import subprocess
import sys


def dmq_env(bootstrap: str | None = None) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "120", "PYTHONUNBUFFERED": "1"}
    if bootstrap is not None:
        env["DMQ_BOOTSTRAP_SERVER"] = bootstrap
    else:
        env.pop("DMQ_BOOTSTRAP_SERVER", None)
    return env


def run_dmq(bootstrap: str | None, *args: str, stdin: bytes | None = None, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m dmq ARGS`` with DMQ_BOOTSTRAP_SERVER set to ``bootstrap`` (unless None).

    With ``check`` a non-zero exit fails the test, showing stderr."""
    res = subprocess.run([sys.executable, "-m", "dmq", *args], input=stdin, capture_output=True,
                         timeout=timeout, env=dmq_env(bootstrap))
    out = subprocess.CompletedProcess(res.args, res.returncode, res.stdout.decode(errors="replace"),
                                      res.stderr.decode(errors="replace"))
    if check:
        assert res.returncode == 0, f"dmq {' '.join(args)} exited {res.returncode}:\n{out.stderr}"
    return out


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
