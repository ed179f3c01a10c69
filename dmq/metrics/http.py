"""MetricsServer: ``/metrics`` over HTTP, on its own port, from the broker's event loop.

A deliberately small HTTP/1.1 server (Prometheus needs nothing more): one
request per connection, ``GET``/``HEAD`` of ``/metrics`` (the exposition) and
``/`` (a page linking to it); anything else gets 404, 405 or 400, and a client
that sends no request head within ``READ_TIMEOUT_S`` (or one over
``MAX_HEAD_BYTES``) is dropped. It runs on the broker's event loop, so a scrape
reads the broker's objects on the thread that owns them (``dmq.metrics.exposition``
formats the text on a worker thread).
"""

from __future__ import annotations

import asyncio
import logging

from dmq.metrics import CONTENT_TYPE, exposition
from dmq.metrics.collector import BrokerView

log = logging.getLogger("dmq.metrics")

READ_TIMEOUT_S = 10.0
MAX_HEAD_BYTES = 16 * 1024
INDEX = (b"<!doctype html><title>dmq metrics</title>"
         b"<p>Prometheus metrics of this dmq broker: <a href=\"/metrics\">/metrics</a></p>\n")


class MetricsServer:
    """Invariant: only the event-loop thread calls it; ``stop`` closes the listening socket
    and every connection still open."""

    def __init__(self, broker: BrokerView, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> tuple[str, int]:
        """Listen; returns the bound address (port 0 picks a free one). The broker's
        collector starts here, so its event-loop lag probe runs from the start."""
        from dmq.metrics.exposition import collector_for

        collector_for(self.broker)
        self.server = await asyncio.start_server(self._serve, self.host, self.port,
                                                 limit=MAX_HEAD_BYTES, reuse_address=True)
        sockname = self.server.sockets[0].getsockname()
        return sockname[0], sockname[1]

    async def stop(self) -> None:
        if self.server is None:
            return
        from dmq.metrics.exposition import collector_for

        collector_for(self.broker)[0].loop_lag.stop()
        self.server.close()
        for writer in list(self._writers):
            writer.close()
        try:
            await asyncio.wait_for(self.server.wait_closed(), 2)
        except TimeoutError:
            pass
        self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                    ConnectionError):
                return
            status, content_type, body, extra = await self._answer(head)
            method = head.split(b" ", 1)[0]
            lines = [f"HTTP/1.1 {status}", f"Content-Type: {content_type}",
                     f"Content-Length: {len(body)}", "Connection: close", *extra]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            if method != b"HEAD":
                writer.write(body)
            await writer.drain()
        except (ConnectionError, TimeoutError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, head: bytes) -> tuple[str, str, bytes, list[str]]:
        """(status, content type, body, more header lines) for one request head."""
        text = "text/plain; charset=utf-8"
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return "400 Bad Request", text, b"bad request\n", []
        method, target = parts[0], parts[1]
        path = target.split(b"?", 1)[0]
        if path not in (b"/metrics", b"/"):
            return "404 Not Found", text, b"not found: the metrics are at /metrics\n", []
        if method not in (b"GET", b"HEAD"):
            return "405 Method Not Allowed", text, b"method not allowed\n", ["Allow: GET, HEAD"]
        if path == b"/":
            return "200 OK", "text/html; charset=utf-8", INDEX, []
        try:
            body = await exposition(self.broker)
        except Exception:
            log.exception("metrics: building /metrics failed")
            return "500 Internal Server Error", text, b"building the metrics failed; see the broker log\n", []
        return "200 OK", CONTENT_TYPE, body, []
