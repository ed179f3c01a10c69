"""Loopback ports for the servers tests start, safe with tests running in parallel.

A port from ``bind(("127.0.0.1", 0))`` comes from the kernel's ephemeral range; it is
free only until the socket closes, and the server the port is meant for binds it
seconds later. Meanwhile the same port can be handed to another test's ``bind(0)``
(pytest-xdist runs several workers) or taken as the local end of any client's outgoing
connection. So the servers of a test get ports below the ephemeral range, which the
kernel never hands out by itself, from a block of that range of their own for each
xdist worker (``PYTEST_XDIST_WORKER``): two workers never pick the same port. Inside
a block, ports are handed out in turn from a random start (another test session on
the same machine walks from elsewhere), each checked free when handed out and never
handed out twice by one process until the block wraps.
"""

from __future__ import annotations

import os
import random
import socket
import threading

LOW = 10000  # ports below this are left to services with well-known numbers
_FALLBACK_EPHEMERAL_LOW = 32768


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _FALLBACK_EPHEMERAL_LOW


def _worker() -> tuple[int, int]:
    """(this worker's index, the number of workers); (0, 1) without xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if name.startswith("gw") and name[2:].isdigit() and count.isdigit() and int(count) > 0:
        return int(name[2:]) % int(count), int(count)
    return 0, 1


class _Block:
    def __init__(self) -> None:
        high = _ephemeral_low()
        index, count = _worker()
        size = (high - LOW) // count if high - LOW >= 64 * count else 0
        self.start = LOW + index * size
        self.size = size
        self.next = random.randrange(size) if size else 0
        self.given: set[int] = set()
        self.lock = threading.Lock()

    def take(self, n: int) -> int:
        """The first of ``n`` consecutive free ports of this block (never handed out before
        by this process while the block has others)."""
        if self.size < n:
            return _kernel_port(n)
        with self.lock:
            for _ in range(self.size):
                if self.next + n > self.size:
                    self.next = 0
                first = self.start + self.next
                self.next += n
                ports = range(first, first + n)
                if any(p in self.given for p in ports):
                    continue
                if all(_bindable(p) for p in ports):
                    if len(self.given) + n > self.size // 2:
                        self.given.clear()  # wrapped: ports handed out long ago may come again
                    self.given.update(ports)
                    return first
        raise RuntimeError(f"no {n} consecutive free loopback ports in {self.start}..{self.start + self.size - 1}")


def _bindable(port: int) -> bool:
    """Nothing listens or is bound there, and no connection lingers (a plain bind, without
    SO_REUSEADDR, also fails while one is in TIME_WAIT)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_port(n: int) -> int:
    """Where no block below the ephemeral range can be had: the kernel's choice."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = int(s.getsockname()[1])
        if all(_bindable(p) for p in range(first, first + n)):
            return first
    raise RuntimeError(f"no {n} consecutive free loopback ports")


_block: _Block | None = None


def _the_block() -> _Block:
    global _block
    if _block is None:
        _block = _Block()
    return _block


def free_port() -> int:
    """A loopback port nothing uses, for a server this test starts."""
    return _the_block().take(1)


def free_port_block(n: int) -> int:
    """A base port such that base .. base + n - 1 are all free on loopback."""
    return _the_block().take(n)
