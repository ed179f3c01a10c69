"""The Kafka listener: TCP framing, pipelined requests, responses in request order.

Each connection reads size-prefixed frames and serves them in two phases, as
Redpanda does: a request is *dispatched* (started, in arrival order, each only
after the one before it was dispatched) and later *completed*. A handler says
it is dispatched by calling the ``dispatched`` callback it is given — a produce
does once its batches are appended, before it waits for the followers — and a
handler that never calls it is dispatched when it completes. So appends happen
in request order, while several acks=all produces of one connection wait for
replication together. Responses are written strictly in request order (what
Kafka clients rely on), each as soon as it and every earlier one completed.

Eager requests: a request of an API in ``eager_api_keys`` (Produce and Fetch,
the hot path) runs outside any task, driven by its connection: it starts right
where its frame is read and runs until it first waits. Most finish there (an
acks=1 produce, a fetch that finds data) and are answered in the same turn of
the event loop. One that waits on a purgatory's delayed operation (an acks=all
produce, a long-polling fetch) is resumed by whoever completes the operation,
in that same turn (Kafka's ``onComplete``: ``dmq.replication.purgatory``); on
any other future, by the future's callback. No task, no extra trip through the
loop's ready queue per request: on two cores that trip costs about as much as
a small request. Such a handler must need no current task (``asyncio.timeout``
does; futures, locks and purgatories do not). Other APIs run in a task.

A request never starts inside another request's handler: a ``dispatched``
signal or a completion outside the connection's own start loop schedules the
next start through the loop.

A connection that closes drops the answers of its started requests but does not
cancel them: a handler is never stopped between two of its steps.

Bounds: at most ``MAX_IN_FLIGHT`` requests of a connection are started and
unanswered, at most ``MAX_QUEUED_FRAMES`` read and not started (then reading
pauses), and nothing new starts while the transport's write buffer is above
its high-water mark (a client that does not read its responses stops being
read). The server knows nothing of an API's meaning: it hands each frame to a
``Dispatch`` and writes back what it returns. Each connection has an id (unique
in the process), handed to the dispatcher with every frame; ``on_close(id)`` is
called once when the connection is lost (share sessions are released then). Frames above
``socket.request.max.bytes`` or with a negative size close the connection.

Security (dmq.security): a listener may be TLS (an ``ssl.SSLContext``: asyncio does the
handshake, a failed one never reaches the protocol) and may be given ``on_open``, called
with each new connection before its first frame: the broker hangs the connection's
authentication state on ``session`` and may lower ``max_request_bytes`` until the client
has authenticated (``sasl.server.max.receive.size``). A dispatcher may answer
``CloseAfter(bytes)``: the answer is written, then the connection closed (a failed SASL
authentication). File ranges are never sendfile'd into a TLS connection.

Metrics: each answered request is counted by API key with its time since it
started, in the listener's ``RequestStats`` (plain numbers; ``dmq.metrics``
reads them when scraped).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import ssl
from collections import deque
from collections.abc import Callable, Coroutine
from time import monotonic
from typing import Any

from dmq.metrics.requests import RequestStats
from dmq.protocol.framing import FrameReader, FrameSizeError

log = logging.getLogger("dmq.server")

# What a dispatcher returns: response bytes, None (no response) or CLOSE. Its third
# argument is the request's ``dispatched`` callback, its fourth the connection's id.
CLOSE = object()
Dispatch = Callable[[bytes, str, Callable[[], None], int], Coroutine[Any, Any, object]]
CloseHook = Callable[[int], None]
OpenHook = Callable[["KafkaConnection"], None]
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class CloseAfter:
    """A dispatcher's answer that is written and then ends the connection."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


_connection_ids = itertools.count(1)

MAX_QUEUED_FRAMES = 64
MAX_IN_FLIGHT = 32
# Spliced answers (fetched file ranges) up to this size are read and written in one piece.
SPLICE_MIN_BYTES = 64 * 1024


class _Request:
    """One started request of a connection, in request order in ``in_flight``.

    ``dispatched`` once its handler said so or it completed; ``done`` with
    ``result`` (or ``error``) once it completed. An eager request's ``coro`` is
    stepped by ``step`` until it ends; another runs in ``task``."""

    __slots__ = ("connection", "coro", "dispatched", "done", "result", "error", "task", "api_key",
                 "started")

    def __init__(self, connection: KafkaConnection, api_key: int) -> None:
        self.connection = connection
        self.api_key = api_key  # for the listener's RequestStats (metrics)
        self.started = monotonic()
        self.coro: Coroutine[Any, Any, object] | None = None
        self.dispatched = False
        self.done = False
        self.result: object = None
        self.error: BaseException | None = None
        self.task: asyncio.Task[None] | None = None

    def signal(self) -> None:
        """The handler's ``dispatched`` callback."""
        if not self.dispatched:
            self.dispatched = True
            self.connection._on_dispatched()

    def step(self, _future: object = None) -> None:
        """Run an eager request's coroutine until it waits again or ends; never raises."""
        coro = self.coro
        if coro is None:
            return
        try:
            waiting = coro.send(None)
        except StopIteration as stop:
            self.connection._finished(self, stop.value, None)
            return
        except Exception as e:  # noqa: BLE001 - reported as a task's error would be
            self.connection._finished(self, None, e)
            return
        if waiting is None:  # a bare yield (asyncio.sleep(0)): go on in the next turn
            asyncio.get_running_loop().call_soon(self.step)
        elif getattr(waiting, "_asyncio_future_blocking", False):
            waiting._asyncio_future_blocking = False
            if hasattr(waiting, "resume"):  # a delayed operation: its completer resumes us
                waiting.resume = self.step
            else:
                waiting.add_done_callback(self.step)
        else:
            coro.close()
            self.connection._finished(self, None, RuntimeError(f"a handler yielded {waiting!r}"))


class KafkaConnection(asyncio.Protocol):
    def __init__(self, dispatch: Dispatch, max_request_bytes: int,
                 connections: set[KafkaConnection], on_close: CloseHook | None = None,
                 eager_api_keys: frozenset[int] = frozenset(), on_open: OpenHook | None = None,
                 stats: RequestStats | None = None) -> None:
        self.id = next(_connection_ids)
        self.on_open = on_open
        # The broker's per-connection security state (dmq.security.sasl.ConnectionAuth).
        self.session: Any = None
        self.tls = False
        self.stats = stats if stats is not None else RequestStats()
        self.dispatch = dispatch
        self.on_close = on_close
        self.connections = connections
        self.eager_api_keys = eager_api_keys
        self.reader = FrameReader(max_request_bytes)
        self.frames: deque[bytes] = deque()
        self.transport: asyncio.Transport | None = None
        # Started and not yet answered, in request order.
        self.in_flight: deque[_Request] = deque()
        self.writing_paused = False
        self.paused = False
        self.closed = False
        self.starting = False  # in _start's first step of an eager request
        self.start_scheduled = False
        self.peer = "?"

    @property
    def max_request_bytes(self) -> int:
        """The largest request this connection takes now (the broker lowers it until a
        SASL client has authenticated)."""
        return self.reader.max_bytes

    @max_request_bytes.setter
    def max_request_bytes(self, value: int) -> None:
        self.reader.max_bytes = value

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.tls = transport.get_extra_info("ssl_object") is not None
        self.connections.add(self)
        self.stats.connections_total += 1
        if self.on_open is not None:
            try:
                self.on_open(self)
            except Exception:
                log.exception("connection open hook failed for %s; closing it", self.peer)
                self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.connections.discard(self)
        if self.on_close is not None:
            try:
                self.on_close(self.id)
            except Exception:
                log.exception("connection close hook failed for %s", self.peer)
        self.frames.clear()
        self.reader.clear()
        # Requests already started run to their end, as in Kafka; their answers are dropped.
        # Cancelling them would stop a handler between two steps (a topic written to the
        # metadata store but never taken up by this broker).

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._start_soon()

    def data_received(self, data: bytes) -> None:
        try:
            self.reader.feed(data, self.frames.append)
        except FrameSizeError as e:
            log.warning("closing connection from %s: request size %d is outside [0, %d] "
                        "(socket.request.max.bytes; before SASL authentication, "
                        "sasl.server.max.receive.size)", self.peer, e.size, e.max_bytes)
            self.close()
            return
        if self.frames:
            self._start()
        if len(self.frames) >= MAX_QUEUED_FRAMES and not self.paused and self.transport:
            self.paused = True
            self.transport.pause_reading()

    # --------------------------------------------------------------- requests

    def _start_soon(self) -> None:
        """Start what may start, from the loop's ready queue (never inside a handler)."""
        if self.frames and not self.start_scheduled and not self.closed:
            self.start_scheduled = True
            asyncio.get_running_loop().call_soon(self._start)

    def _start(self) -> None:
        """Start the queued requests in order, each once the one before it is dispatched,
        within the bounds; then write what completed."""
        self.start_scheduled = False
        in_flight = self.in_flight
        while self.frames and not self.closed:
            if in_flight and not in_flight[-1].dispatched:
                break
            if len(in_flight) >= MAX_IN_FLIGHT:
                self._write_completed()
                if len(in_flight) >= MAX_IN_FLIGHT:
                    break
            if self.writing_paused:
                break
            frame = self.frames.popleft()
            if self.paused and len(self.frames) < MAX_QUEUED_FRAMES // 2 and self.transport:
                self.paused = False
                self.transport.resume_reading()
            api_key = int.from_bytes(frame[:2], "big") if len(frame) >= 2 else -1
            req = _Request(self, api_key)
            in_flight.append(req)
            try:
                coro = req.coro = self.dispatch(frame, self.peer, req.signal, self.id)
            except Exception as e:  # noqa: BLE001 - a dispatcher that fails to start
                self._finished(req, None, e)
                continue
            if api_key not in self.eager_api_keys:
                req.task = asyncio.get_running_loop().create_task(self._run(req, coro))
                continue
            self.starting = True
            try:
                req.step()
            finally:
                self.starting = False
        self._write_completed()

    async def _run(self, req: _Request, coro: Coroutine[Any, Any, object]) -> None:
        """A request that is not eager, in its task."""
        try:
            result = await coro
        except asyncio.CancelledError:
            self._finished(req, None, None)  # stopped with the loop: nothing to answer
            raise
        except Exception as e:  # noqa: BLE001 - the connection is closed, with a log line
            self._finished(req, None, e)
        else:
            self._finished(req, result, None)

    def _on_dispatched(self) -> None:
        # In _start's own first step, the start loop goes on once the step returns.
        if not self.starting:
            self._start_soon()

    def _finished(self, req: _Request, result: object, error: BaseException | None) -> None:
        """A request completed (and so is dispatched too): write what is in order, let the
        next requests start."""
        req.dispatched = req.done = True
        req.result, req.error = result, error
        req.coro = None
        self._write_completed()
        if not self.starting:
            self._start_soon()

    def _write_completed(self) -> None:
        """Write the answers of the completed requests at the head, in request order."""
        in_flight = self.in_flight
        while in_flight and in_flight[0].done:
            req = in_flight.popleft()
            req.task = None
            self.stats.observe(req.api_key, monotonic() - req.started)
            result, req.result = req.result, None
            if self.closed:
                continue  # dropped with the connection
            if req.error is not None:
                log.error("unexpected error serving %s; closing the connection", self.peer,
                          exc_info=req.error)
                self.close()
                continue
            if result is CLOSE:
                self.close()
                continue
            if isinstance(result, CloseAfter):
                if self.transport is not None:
                    self.transport.write(result.data)
                self.close()  # the transport sends what it buffered, then closes
                continue
            if result is not None and self.transport is not None:
                if isinstance(result, list):
                    size = sum(len(p) if isinstance(p, bytes | bytearray) else p.length for p in result)
                    if size <= SPLICE_MIN_BYTES:
                        # Small: one write (one syscall, one segment) beats bytes + sendfile + bytes.
                        try:
                            frame = b"".join(p if isinstance(p, bytes | bytearray) else p.read() for p in result)
                        except OSError:
                            frame = b""
                        if len(frame) != size:
                            self._cut_short()
                            continue
                        self.transport.write(frame)
                    elif not self._write_parts(result):
                        self._cut_short()
                else:
                    self.transport.write(result)  # type: ignore[arg-type]

    def _cut_short(self) -> None:
        """A file range of an answer came back shorter than the frame's size says: the
        segment was truncated since the answer was made (this broker became a follower
        and cut its log). The frame cannot be finished, so the connection is aborted, as
        Kafka's FileRecords.writeTo fails a send truncated during the write; the client
        reconnects and asks again."""
        log.warning("a fetch answer to %s lost bytes its log truncated meanwhile; closing the connection",
                    self.peer)
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _write_parts(self, parts: list[Any]) -> bool:
        """Write a spliced frame: bytes through the transport, file ranges by sendfile.

        sendfile goes straight to the socket, so it is used only while the
        transport has nothing buffered (order is kept); otherwise, and for
        whatever sendfile leaves, the range is read and written normally.
        False when a file range could not be read whole (see ``_cut_short``).
        """
        transport = self.transport
        assert transport is not None
        sock = transport.get_extra_info("socket")
        # Under TLS the socket carries ciphertext: file ranges go through the transport.
        fileno = sock.fileno() if sock is not None and not self.tls else -1
        for part in parts:
            if isinstance(part, bytes | bytearray):
                if part:
                    transport.write(part)
                continue
            fd = getattr(part, "fd", None)
            if fd is None:  # not a file range: just bytes kept elsewhere
                transport.write(part.read())
                continue
            offset, remaining = part.position, part.length
            if fileno >= 0 and transport.get_write_buffer_size() == 0:
                while remaining > 0:
                    try:
                        sent = os.sendfile(fileno, fd, offset, remaining)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        break
                    if sent == 0:
                        break
                    offset += sent
                    remaining -= sent
            if remaining > 0:
                try:
                    rest = os.pread(fd, remaining, offset)
                except OSError:
                    return False
                if len(rest) != remaining:
                    return False  # truncated meanwhile: the frame cannot be finished
                transport.write(rest)
        return True

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Listener:
    def __init__(self, host: str, port: int, dispatch: Dispatch, max_request_bytes: int,
                 on_close: CloseHook | None = None,
                 eager_api_keys: frozenset[int] = frozenset(), *, name: str = "PLAINTEXT",
                 ssl_context: ssl.SSLContext | None = None, on_open: OpenHook | None = None,
                 stats: RequestStats | None = None) -> None:
        self.name = name
        self.ssl_context = ssl_context
        self.on_open = on_open
        self.host = host
        self.eager_api_keys = eager_api_keys
        self.port = port
        self.dispatch = dispatch
        self.on_close = on_close
        self.max_request_bytes = max_request_bytes
        self.connections: set[KafkaConnection] = set()
        self.server: asyncio.base_events.Server | None = None
        # Read by dmq.metrics; the broker gives all its listeners one.
        self.stats = stats if stats is not None else RequestStats()

    async def start(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        tls: dict[str, Any] = {}
        if self.ssl_context is not None:
            tls = {"ssl": self.ssl_context, "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT_S}
        self.server = await loop.create_server(
            lambda: KafkaConnection(self.dispatch, self.max_request_bytes, self.connections,
                                    self.on_close, self.eager_api_keys, self.on_open, self.stats),
            self.host, self.port, reuse_address=True, backlog=1024, **tls,
        )
        sockname = self.server.sockets[0].getsockname()
        return sockname[0], sockname[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for conn in list(self.connections):
                conn.close()
            try:
                await asyncio.wait_for(self.server.wait_closed(), 2)
            except TimeoutError:
                pass
