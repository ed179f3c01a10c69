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
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("dmq.server")

# What a dispatcher returns: response bytes, None (no response) or CLOSE. Its third
# argument is the request's ``dispatched`` callback, its fourth the connection's id.
CLOSE = object()
Dispatch = Callable[[bytes, str, Callable[[], None], int], Coroutine[Any, Any, object]]
CloseHook = Callable[[int], None]
_connection_ids = itertools.count(1)

MAX_QUEUED_FRAMES = 64
MAX_IN_FLIGHT = 32
# Spliced answers (fetched file ranges) up to this size are read and written in one piece.
SPLICE_MIN_BYTES = 64 * 1024


class KafkaConnection(asyncio.Protocol):
    def __init__(self, dispatch: Dispatch, max_request_bytes: int,
                 connections: set[KafkaConnection], on_close: CloseHook | None = None) -> None:
        self.id = next(_connection_ids)
        self.dispatch = dispatch
        self.on_close = on_close
        self.max_request_bytes = max_request_bytes
        self.connections = connections
        self.buffer = bytearray()
        self.frames: deque[bytes] = deque()
        self.transport: asyncio.Transport | None = None
        self.worker: asyncio.Task[None] | None = None
        # Started and not yet answered, in request order.
        self.in_flight: deque[asyncio.Task[object]] = deque()
        self.room = asyncio.Event()  # set when a request may start
        self.room.set()
        self.writing_paused = False
        self.paused = False
        self.closed = False
        self.peer = "?"

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
        self.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.connections.discard(self)
        if self.on_close is not None:
            try:
                self.on_close(self.id)
            except Exception:
                log.exception("connection close hook failed for %s", self.peer)
        self.frames.clear()
        if self.worker is not None and not self.worker.done():
            self.worker.cancel()
        # Requests already started run to their end, as in Kafka; their answers are dropped.
        # Cancelling them would stop a handler between two steps (a topic written to the
        # metadata store but never taken up by this broker).

    def pause_writing(self) -> None:
        self.writing_paused = True
        self._update_room()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._update_room()

    def _update_room(self) -> None:
        if len(self.in_flight) < MAX_IN_FLIGHT and not self.writing_paused:
            self.room.set()
        else:
            self.room.clear()

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        start = 0
        end = len(buf)
        while end - start >= 4:
            size = int.from_bytes(buf[start : start + 4], "big", signed=True)
            if size < 0 or size > self.max_request_bytes:
                log.warning("closing connection from %s: request size %d is outside [0, %d] "
                            "(socket.request.max.bytes)", self.peer, size, self.max_request_bytes)
                self.close()
                return
            if end - start - 4 < size:
                break
            self.frames.append(bytes(buf[start + 4 : start + 4 + size]))
            start += 4 + size
        if start:
            del buf[:start]
        if self.frames and self.worker is None:
            self.worker = asyncio.get_running_loop().create_task(self._work())
        if len(self.frames) >= MAX_QUEUED_FRAMES and not self.paused and self.transport:
            self.paused = True
            self.transport.pause_reading()

    async def _work(self) -> None:
        """Start the queued requests in order, each once the previous one is dispatched."""
        loop = asyncio.get_running_loop()
        try:
            while self.frames and not self.closed:
                if not self.room.is_set():
                    await self.room.wait()
                    continue
                frame = self.frames.popleft()
                if self.paused and len(self.frames) < MAX_QUEUED_FRAMES // 2 and self.transport:
                    self.paused = False
                    self.transport.resume_reading()
                dispatched = loop.create_future()

                def signal(_: object = None, f: asyncio.Future[None] = dispatched) -> None:
                    if not f.done():
                        f.set_result(None)

                task = loop.create_task(self.dispatch(frame, self.peer, signal, self.id))
                self.in_flight.append(task)
                task.add_done_callback(self._completed)
                task.add_done_callback(signal)  # a request that completes is dispatched too
                self._update_room()
                await dispatched
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("unexpected error serving %s; closing the connection", self.peer)
            self.close()
        finally:
            self.worker = None

    def _completed(self, _task: asyncio.Task[object]) -> None:
        """Write the answers of the completed requests at the head, in request order."""
        while self.in_flight and self.in_flight[0].done():
            task = self.in_flight.popleft()
            if task.cancelled():
                continue
            if self.closed:
                task.exception()  # retrieved: an error is dropped with the answer
                continue
            error = task.exception()
            if error is not None:
                log.error("unexpected error serving %s; closing the connection", self.peer,
                          exc_info=error)
                self.close()
                continue
            result = task.result()
            if result is CLOSE:
                self.close()
                continue
            if result is not None and self.transport is not None:
                if isinstance(result, list):
                    if sum(len(p) if isinstance(p, bytes | bytearray) else p.length
                           for p in result) <= SPLICE_MIN_BYTES:
                        # Small: one write (one syscall, one segment) beats bytes + sendfile + bytes.
                        self.transport.write(b"".join(
                            p if isinstance(p, bytes | bytearray) else p.read() for p in result))
                    else:
                        self._write_parts(result)
                else:
                    self.transport.write(result)  # type: ignore[arg-type]
        self._update_room()

    def _write_parts(self, parts: list[Any]) -> None:
        """Write a spliced frame: bytes through the transport, file ranges by sendfile.

        sendfile goes straight to the socket, so it is used only while the
        transport has nothing buffered (order is kept); otherwise, and for
        whatever sendfile leaves, the range is read and written normally.
        """
        transport = self.transport
        assert transport is not None
        sock = transport.get_extra_info("socket")
        fileno = sock.fileno() if sock is not None else -1
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
                transport.write(os.pread(fd, remaining, offset))

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Listener:
    def __init__(self, host: str, port: int, dispatch: Dispatch, max_request_bytes: int,
                 on_close: CloseHook | None = None) -> None:
        self.host = host
        self.port = port
        self.dispatch = dispatch
        self.on_close = on_close
        self.max_request_bytes = max_request_bytes
        self.connections: set[KafkaConnection] = set()
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: KafkaConnection(self.dispatch, self.max_request_bytes, self.connections,
                                    self.on_close),
            self.host, self.port, reuse_address=True, backlog=1024,
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
