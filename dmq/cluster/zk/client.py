"""The kazoo client dmq connects to ZooKeeper with, and its reconnect policy.

Reconnection: kazoo's default connection retry doubles its pause up to an
hour, so after an outage of a few tens of seconds a broker came back long
after ZooKeeper did and its session had expired meanwhile (ZooKeeper restores
sessions from its log on restart and gives each its full timeout again: a
client that reconnects within that timeout keeps its session, its ephemeral
registration and its watches). Here attempts stay a fraction of the session
timeout apart for ever, and one TCP connect attempt is bounded the same way,
so a server that does not answer does not eat the session either.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.retry import KazooRetry

# Longest pause between two reconnect attempts, whatever the session timeout.
MAX_RECONNECT_PAUSE_S = 0.5
RECONNECT_JITTER = 0.2


def reconnect_pause_s(session_timeout_ms: int) -> float:
    """The cap on the pause between reconnect attempts (before jitter)."""
    return min(MAX_RECONNECT_PAUSE_S, session_timeout_ms / 1000 / 4)


def connection_retry(session_timeout_ms: int) -> KazooRetry:
    """Retry connecting for ever, never more than a fraction of the session timeout apart.

    kazoo sleeps ``delay * jitter`` with ``jitter`` up to ``1 + max_jitter`` and caps the
    next delay at ``max_delay``: the longest pause is ``max_delay * (1 + max_jitter)``,
    at most 0.6 s and a third of the session timeout.
    """
    return KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_jitter=RECONNECT_JITTER,
                      max_delay=reconnect_pause_s(session_timeout_ms))


class _BoundedConnectHandler(SequentialThreadingHandler):
    """kazoo's threading handler with a TCP connect timeout of at most ``limit_s``
    (kazoo uses the whole session timeout per attempt)."""

    def __init__(self, limit_s: float) -> None:
        super().__init__()
        self.limit_s = limit_s

    def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        timeout = kwargs.get("timeout")
        kwargs["timeout"] = self.limit_s if timeout is None else min(timeout, self.limit_s)
        return super().create_connection(*args, **kwargs)


def new_kazoo_client(connect: str, session_timeout_ms: int) -> KazooClient:
    """A KazooClient for ``connect`` (``host:port[,...][/chroot]``), not yet started."""
    session_s = session_timeout_ms / 1000
    return KazooClient(hosts=connect, timeout=session_s,
                       connection_retry=connection_retry(session_timeout_ms),
                       handler=_BoundedConnectHandler(max(0.5, session_s / 3)))
