"""Minimal Kafka wire clients over kio entities.

``WireClient`` (blocking) is for tests, tools and diagnostics that need exact
control of requests (raw batches, specific API versions, malformed frames);
applications should use a real Kafka client. ``AsyncWireClient`` is the
broker's own client: followers fetch from leaders with it.
"""

from __future__ import annotations

import asyncio
import io
import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from dmq.client.security import AuthenticationError, ClientSecurity, SaslClient
from dmq.protocol import fast
from dmq.protocol.bounds import plan_of, walk_plan
from dmq.protocol.codec import API_VERSIONS_KEY, response_class
from dmq.protocol.framing import FrameReader, FrameSizeError
from dmq.protocol.lenient import READERS as LENIENT_READERS


class WireClient:
    """Blocking; with ``security`` over TLS and/or authenticated by SASL once connected."""

    def __init__(self, host: str, port: int, client_id: str = "dmq-wire", timeout: float = 10.0,
                 security: ClientSecurity | None = None, source_host: str | None = None) -> None:
        """``source_host``: the local address to connect from (tests: another loopback address)."""
        self.sock = socket.create_connection((host, port), timeout=timeout,
                                             source_address=(source_host, 0) if source_host else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if security is not None and security.ssl_context is not None:
            try:
                self.sock = security.ssl_context.wrap_socket(self.sock, server_hostname=host)
            except BaseException:
                self.sock.close()
                raise
        self.client_id = client_id
        self.correlation_id = 0
        self.session_lifetime_ms = 0
        if security is not None and security.mechanism is not None:
            try:
                self.session_lifetime_ms = self._authenticate(security)
            except BaseException:
                self.sock.close()
                raise

    def _authenticate(self, security: ClientSecurity) -> int:
        from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
        from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

        assert security.mechanism and security.username is not None and security.password is not None
        answer = self.request(SaslHandshakeRequest(mechanism=security.mechanism))
        if answer.error_code != 0:
            raise AuthenticationError(f"SASL handshake refused: {answer.error_code.name} "
                                      f"(enabled: {', '.join(answer.mechanisms)})")
        client = SaslClient(security.mechanism, security.username, security.password)
        token: bytes | None = client.first()
        lifetime = 0
        while token is not None:
            response = self.request(SaslAuthenticateRequest(auth_bytes=token))
            if response.error_code != 0:
                raise AuthenticationError(response.error_message or response.error_code.name)
            lifetime = int(response.session_lifetime.total_seconds() * 1000)
            token = client.step(response.auth_bytes)
        return lifetime

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def encode(self, request: Any) -> tuple[int, bytes]:
        self.correlation_id += 1
        return self.correlation_id, encode_request(request, self.correlation_id, self.client_id)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv_exact(4))[0]
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def request(self, request: Any, expect_response: bool = True) -> Any:
        cls = type(request)
        corr, frame = self.encode(request)
        self.sock.sendall(frame)
        if not expect_response:
            return None
        return decode_response(cls, corr, self.recv_frame())


def encode_request(request: Any, correlation_id: int, client_id: str) -> bytes:
    cls = type(request)
    fast_encode = fast.REQUEST_ENCODERS.get(cls)  # a follower's Fetch
    if fast_encode is not None:
        try:
            return fast_encode(request, correlation_id, client_id)
        except Exception:
            pass  # off the fast path (a tagged field set) or invalid: kio writes it or says why
    return encode_request_with_kio(request, correlation_id, client_id)


def encode_request_with_kio(request: Any, correlation_id: int, client_id: str) -> bytes:
    """``encode_request`` by kio's generic writer (what the fast encoders must match)."""
    cls = type(request)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    header = header_cls(request_api_key=cls.__api_key__, request_api_version=cls.__version__,
                        correlation_id=correlation_id,  # type: ignore[arg-type]
                        client_id=client_id)
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header)
    entity_writer(cls)(buf, request)
    body = buf.getvalue()
    return struct.pack(">i", len(body)) + body


def decode_response(request_cls: Any, correlation_id: int, data: bytes) -> Any:
    (got,) = struct.unpack_from(">i", data, 0)
    if got != correlation_id:
        raise ValueError(f"correlation id {got} != {correlation_id}")
    offset = 4
    api_key = int(request_cls.__api_key__)
    resp_cls = response_class(api_key, int(request_cls.__version__))
    if resp_cls.__flexible__ and api_key != API_VERSIONS_KEY:
        offset += 1  # empty tagged fields of response header v1
    # Counts the bytes cannot hold are refused first: kio's reader would reserve room for
    # them and abort the process (dmq.protocol.bounds); a ValueError, as for bad bytes.
    walk_plan(plan_of(resp_cls), data, offset)
    reader = LENIENT_READERS.get((api_key, int(request_cls.__version__))) or entity_reader(resp_cls)
    response, _ = reader(data, offset)
    return response


def detect_dead_peer(sock: socket.socket, after_ms: int) -> None:
    """Have the kernel abort the connection when the peer stops acknowledging for ``after_ms``.

    A peer cut off by the network sends nothing, not even a reset: a request waiting
    for its answer would wait out the whole request timeout, and after the network
    heals TCP's retransmission backoff can add ten seconds more. Keepalive probes
    every second while nothing arrives, and TCP_USER_TIMEOUT for unacknowledged data
    (it also bounds the probes), end such a connection within ``after_ms``; a peer
    that is merely slow or paused still acknowledges at the kernel and is not affected.
    """
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, max(1, after_ms // 1000))
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, after_ms)


class _ClientProtocol(asyncio.Protocol):
    """The connection of an AsyncWireClient: frames in arrival order to the one waiter."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader()
        self.frames: deque[bytes] = deque()
        self.waiter: asyncio.Future[bytes] | None = None
        self.lost: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.reader.feed(data, self.frames.append)
        except FrameSizeError as e:
            # Not Kafka's framing: what follows cannot be read either.
            self.lost = ConnectionError(f"the broker sent a bad response frame: {e}")
            if self.transport is not None:
                self.transport.close()
            waiter = self.waiter
            if waiter is not None and not waiter.done():
                waiter.set_exception(self.lost)
            return
        waiter = self.waiter
        if self.frames and waiter is not None and not waiter.done():
            waiter.set_result(self.frames.popleft())

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or EOFError("the broker closed the connection")
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(self.lost)


def _expire(waiter: asyncio.Future[bytes], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError(f"no answer within {timeout:g} s"))


class AsyncWireClient:
    """One connection, one request at a time (the caller awaits each answer).

    A request that fails (timed out, cancelled, the connection lost) closes the
    connection, so a late answer is never taken for the next request's; the next
    request connects again. With ``dead_peer_ms`` the connection is ended by the
    kernel when the peer stops acknowledging for that long (``detect_dead_peer``).
    Requests need no current task (a callback may send one)."""

    def __init__(self, host: str, port: int, client_id: str, dead_peer_ms: int | None = None,
                 security: ClientSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.dead_peer_ms = dead_peer_ms
        self.security = security
        self.correlation_id = 0
        self._protocol: _ClientProtocol | None = None
        # monotonic time after which the SASL session is renewed by connecting again
        self._renew_at: float | None = None

    async def connect(self, timeout: float) -> None:
        """Connect (TLS when the security says so), then authenticate (SASL) within ``timeout``."""
        loop = asyncio.get_running_loop()
        security = self.security
        tls: dict[str, Any] = {}
        if security is not None and security.ssl_context is not None:
            tls = {"ssl": security.ssl_context, "server_hostname": self.host}
        started = time.monotonic()
        transport, protocol = await asyncio.wait_for(
            loop.create_connection(_ClientProtocol, self.host, self.port, **tls), timeout)
        self._protocol = protocol
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.dead_peer_ms is not None:
                detect_dead_peer(sock, self.dead_peer_ms)
        if security is not None and security.mechanism is not None:
            try:
                await self._authenticate(security, max(0.1, timeout - (time.monotonic() - started)))
            except BaseException:
                self.close()
                raise

    async def _authenticate(self, security: ClientSecurity, timeout: float) -> None:
        from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
        from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

        assert security.mechanism and security.username is not None and security.password is not None
        answer = await self.request(SaslHandshakeRequest(mechanism=security.mechanism), timeout)
        if answer.error_code != 0:
            raise AuthenticationError(f"SASL handshake with {self.host}:{self.port} refused: "
                                      f"{answer.error_code.name}")
        client = SaslClient(security.mechanism, security.username, security.password)
        token: bytes | None = client.first()
        lifetime_ms = 0
        while token is not None:
            response = await self.request(SaslAuthenticateRequest(auth_bytes=token), timeout)
            if response.error_code != 0:
                raise AuthenticationError(f"SASL authentication with {self.host}:{self.port} "
                                          f"failed: {response.error_message or response.error_code.name}")
            lifetime_ms = int(response.session_lifetime.total_seconds() * 1000)
            token = client.step(response.auth_bytes)
        # KIP-368: a session with a lifetime is renewed (here: by a new connection) before it ends.
        self._renew_at = time.monotonic() + lifetime_ms * 0.8 / 1000 if lifetime_ms > 0 else None

    async def request(self, request: Any, timeout: float) -> Any:
        """Send a kio request and return its decoded response."""
        client_id = self.client_id
        return await self.request_frame(
            lambda correlation_id: encode_request(request, correlation_id, client_id),
            type(request), timeout)

    async def request_frame(self, encode: Callable[[int], bytes], request_cls: Any,
                            timeout: float) -> Any:
        """Send the frame ``encode(correlation_id)`` writes (a request of ``request_cls``)
        and return its decoded response: for callers that write their frames directly."""
        if self._renew_at is not None and time.monotonic() >= self._renew_at and self._protocol is not None:
            self.close()  # the SASL session is about to end: authenticate on a new connection
        if self._protocol is None:
            await self.connect(timeout)
        # A local reference: close() from another task (say a shutdown) ends this request
        # with the connection's error rather than a None protocol.
        protocol = self._protocol
        assert protocol is not None
        if protocol.lost is not None or protocol.transport is None or protocol.transport.is_closing():
            raise ConnectionResetError(f"connection to {self.host}:{self.port} was closed")
        if protocol.waiter is not None and not protocol.waiter.done():
            raise RuntimeError("AsyncWireClient takes one request at a time")
        self.correlation_id += 1
        correlation_id = self.correlation_id
        loop = asyncio.get_running_loop()
        waiter = protocol.waiter = loop.create_future()
        protocol.transport.write(encode(correlation_id))
        if protocol.frames:  # an answer nobody took: the connection is out of step
            waiter.set_result(protocol.frames.popleft())
        timer = loop.call_later(timeout, _expire, waiter, timeout)
        try:
            data = await waiter
        except BaseException:
            if self._protocol is protocol:
                self.close()
            raise
        finally:
            timer.cancel()
            protocol.waiter = None
        try:
            return decode_response(request_cls, correlation_id, data)
        except Exception:
            if self._protocol is protocol:
                self.close()
            raise

    def close(self) -> None:
        protocol, self._protocol = self._protocol, None
        self._renew_at = None
        if protocol is None:
            return
        if protocol.transport is not None:
            protocol.transport.close()
        if protocol.lost is None:
            protocol.lost = ConnectionResetError(f"connection to {self.host}:{self.port} was closed")
        waiter = protocol.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(protocol.lost)
