"""Stopping a process for a fault test, and knowing it has stopped."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _all_threads_stopped(pid: int) -> bool:
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True  # gone (or going): nothing of it runs
    return all(s in ("T", "t") for s in states)


def sigstop(pid: int, timeout: float = 5.0) -> None:
    """SIGSTOP ``pid`` and wait until every one of its threads is stopped. ``kill`` returns
    before that: a thread running on the other core may still answer a request sent just
    after (a ZooKeeper test saw its ``get`` answered by a "paused" server)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not _all_threads_stopped(pid):
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {pid} did not stop within {timeout}s")
        time.sleep(0.001)
