"""AsyncWireClient: a close() from another task (the replica fetcher's shutdown) ends an
in-flight request with a connection error; a request that times out closes the connection,
so its late answer is never taken for the next request's; answers split across reads or
arriving together are framed right; a request needs no current task."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from dmq.client.wire import AsyncWireClient


def test_close_during_a_request_raises_a_connection_error() -> None:
    async def scenario() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1 << 16)  # take the request, never answer
            await asyncio.sleep(5)

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = AsyncWireClient("127.0.0.1", port, "test")
        request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        pending = asyncio.ensure_future(client.request(request, 5.0))
        await asyncio.sleep(0.2)
        client.close()
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError, OSError)):
            await asyncio.wait_for(pending, 5)
        server.close()

    asyncio.run(scenario())


def test_a_request_on_a_connection_the_peer_reset_raises_a_connection_error() -> None:
    # Under uvloop, writing to a transport that a reset (or the kernel's dead-peer
    # detection) closed raised RuntimeError, which the replica fetcher did not expect:
    # a traceback in a long chaos run (seed 103). It is a connection error now.
    import socket
    import struct

    import uvloop

    async def scenario() -> None:
        async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # RST, not FIN

        server = await asyncio.start_server(reset, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = AsyncWireClient("127.0.0.1", port, "test")
        await client.connect(5.0)
        await asyncio.sleep(0.3)  # the reset arrives and closes the client's transport
        request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        with pytest.raises(ConnectionError):
            await client.request(request, 5.0)
        server.close()

    uvloop.run(scenario())


async def _server(answer: object) -> tuple[asyncio.AbstractServer, int]:
    server = await asyncio.start_server(answer, "127.0.0.1", 0)  # type: ignore[arg-type]
    return server, server.sockets[0].getsockname()[1]


def _api_versions_answer(correlation_id: int) -> bytes:
    from kio.schema.errors import ErrorCode

    from dmq.protocol.codec import encode_response, response_class

    body = response_class(18, 3)(error_code=ErrorCode.none, api_keys=(), throttle_time=__import__(
        "datetime").timedelta(0))
    frame = encode_response(correlation_id, 18, body)
    assert isinstance(frame, bytes)
    return frame


def test_a_timed_out_request_closes_the_connection_and_its_late_answer_is_not_taken() -> None:
    async def scenario() -> None:
        connections = 0

        async def slow_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            first = connections == 1
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                frame = await reader.readexactly(size)
                corr = int.from_bytes(frame[4:8], "big")
                if first:
                    await asyncio.sleep(0.5)  # answers after the client gave up
                try:
                    writer.write(_api_versions_answer(corr))
                    await writer.drain()
                except ConnectionError:
                    return

        server, port = await _server(slow_first)
        client = AsyncWireClient("127.0.0.1", port, "test")
        request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        with pytest.raises(TimeoutError):
            await client.request(request, 0.2)
        answer = await client.request(request, 5.0)  # a new connection, its own answer
        assert answer.error_code == 0 and connections == 2
        client.close()
        server.close()

    asyncio.run(scenario())


def test_answers_split_or_together_are_framed_and_need_no_task() -> None:
    async def scenario() -> None:
        async def dribble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                try:
                    size = int.from_bytes(await reader.readexactly(4), "big")
                except asyncio.IncompleteReadError:
                    return
                frame = await reader.readexactly(size)
                data = _api_versions_answer(int.from_bytes(frame[4:8], "big"))
                for i in range(len(data)):  # one byte at a time
                    writer.write(data[i:i + 1])
                    await writer.drain()

        server, port = await _server(dribble)
        client = AsyncWireClient("127.0.0.1", port, "test")
        request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        for _ in range(3):
            assert (await client.request(request, 5.0)).error_code == 0
        # Stepped by hand outside any task, as a connection drives an eager request: it
        # waits on a plain future (asyncio.timeout would raise "should be used inside a task").
        loop = asyncio.get_running_loop()
        result: asyncio.Future[object] = loop.create_future()
        coro = client.request(request, 5.0)

        def step(_: object = None) -> None:
            try:
                waiting = coro.send(None)
            except StopIteration as stop:
                result.set_result(stop.value)
                return
            waiting._asyncio_future_blocking = False
            waiting.add_done_callback(step)

        loop.call_soon(step)
        assert (await asyncio.wait_for(result, 5)).error_code == 0  # type: ignore[attr-defined]
        client.close()
        server.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("size", [-1, -(2**31)])
def test_an_answer_with_a_negative_size_fails_the_request_and_closes_the_connection(size: int) -> None:
    """Before FrameReader the client sliced a negative-size frame out of its buffer and
    handed garbage on; now the request fails with a connection error and the next one on
    that client reports the connection closed."""
    async def scenario() -> None:
        async def bad(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1 << 16)
            writer.write(size.to_bytes(4, "big", signed=True) + b"\x00" * 16)
            await writer.drain()
            await asyncio.sleep(5)

        server = await asyncio.start_server(bad, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = AsyncWireClient("127.0.0.1", port, "test")
        request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        with pytest.raises(ConnectionError, match="bad response frame"):
            await asyncio.wait_for(client.request(request, 5.0), 10)
        with pytest.raises((ConnectionError, EOFError, OSError)):
            await asyncio.wait_for(client.request(request, 5.0), 10)
        client.close()
        server.close()

    asyncio.run(scenario())
