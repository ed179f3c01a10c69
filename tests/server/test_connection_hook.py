"""The listener's connection ids and close hook (what share sessions are released by)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from dmq.server.network import Listener


def test_each_connection_has_an_id_given_to_dispatch_and_to_the_close_hook() -> None:
    async def scenario() -> None:
        seen: list[int] = []
        closed: list[int] = []
        gone = asyncio.Event()

        async def dispatch(frame: bytes, peer: str, dispatched: Callable[[], None], connection: int) -> object:
            seen.append(connection)
            return len(frame).to_bytes(4, "big") + frame  # echo

        def on_close(connection: int) -> None:
            closed.append(connection)
            gone.set()

        listener = Listener("127.0.0.1", 0, dispatch, 1 << 20, on_close)
        host, port = await listener.start()
        try:
            conns = [await asyncio.open_connection(host, port) for _ in range(2)]
            for reader, writer in conns:
                writer.write(b"\0\0\0\2hi")
                await writer.drain()
                assert await reader.readexactly(6) == b"\0\0\0\2hi"
            assert len(set(seen)) == 2
            first = seen[0]
            conns[0][1].close()
            await asyncio.wait_for(gone.wait(), 5)
            assert closed == [first]
        finally:
            await listener.stop()
        assert sorted(closed) == sorted(set(seen))  # stopping closes the other: its hook runs too

    asyncio.run(scenario())
