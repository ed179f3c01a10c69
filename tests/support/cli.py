"""Run the ``dmq`` command line as a subprocess, as a user would: with its output in a pipe
(``run_dmq``), or on a terminal of a given width (``run_dmq_at_terminal``)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import socket
import struct
import subprocess
import sys
import termios
import time


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


# Colours, bold and cursor movements a terminal gets (CSI sequences), and OSC sequences.
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def run_dmq_at_terminal(bootstrap: str | None, *args: str, columns: int = 80, rows: int = 50,
                        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m dmq ARGS`` with stdout on a pseudo-terminal ``columns`` wide, as a user at
    an 80-column terminal sees it (the width comes from the terminal: COLUMNS is unset).
    Its stdout is the text shown, without colour codes and with plain newlines; stderr is
    a pipe. A non-zero exit is the caller's to check."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = dmq_env(bootstrap)
    env.pop("COLUMNS", None)
    env["TERM"] = "xterm-256color"
    try:
        proc = subprocess.Popen([sys.executable, "-m", "dmq", *args], stdin=subprocess.DEVNULL,
                                stdout=slave, stderr=subprocess.PIPE, env=env)
    finally:
        os.close(slave)
    shown = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while True:  # until the child closes the terminal (EIO on Linux)
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout, bytes(shown))
            ready, _, _ = select.select([master], [], [], min(left, 1.0))
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
        assert proc.stderr is not None
        err = proc.stderr.read().decode(errors="replace")
        code = proc.wait(max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = _ESCAPES.sub("", shown.decode(errors="replace")).replace("\r\n", "\n")
    return subprocess.CompletedProcess(proc.args, code, text, err)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
