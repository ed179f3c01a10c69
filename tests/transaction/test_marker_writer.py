"""BrokerMarkerWriter over the wire: the markers of several transactions written at once to
one broker share its connection without taking each other's answers."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import response as schema

from dmq.cluster.metadata import BrokerInfo
from dmq.protocol.codec import decode_request, encode_response, make, peek_header
from dmq.server.markers import BrokerMarkerWriter
from dmq.transaction.shard import SendMarkers


class Store:
    def __init__(self, port: int) -> None:
        self.port = port

    def brokers(self) -> list[BrokerInfo]:
        return [BrokerInfo(2, "127.0.0.1", self.port)]


async def slow_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each WriteTxnMarkers after 50 ms: every partition written."""
    while True:
        try:
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            frame = await reader.readexactly(size)
        except asyncio.IncompleteReadError:
            return
        api_key, version, correlation_id = peek_header(frame)
        _, request = decode_request(frame, api_key, version)
        await asyncio.sleep(0.05)
        results = tuple(make(schema.WritableTxnMarkerResult, producer_id=m.producer_id, topics=tuple(
            make(schema.WritableTxnMarkerTopicResult, name=t.name, partitions=tuple(
                make(schema.WritableTxnMarkerPartitionResult, partition_index=p, error_code=ErrorCode.none)
                for p in t.partition_indexes)) for t in m.topics)) for m in request.markers)
        frame_out: Any = encode_response(correlation_id, api_key,
                                         make(schema.WriteTxnMarkersResponse, markers=results))
        writer.write(frame_out)
        await writer.drain()


def test_concurrent_marker_writes_to_one_broker_each_get_their_own_answer() -> None:
    # Seen in a chaos run: two transactions' markers to one broker at once raised
    # "readexactly() called while another coroutine is already waiting" or took each other's
    # responses ("correlation id 9 != 12"), left the connection out of step, and the
    # transactions stayed prepared (their partitions' last stable offset with them) for 69 s.
    async def scenario() -> None:
        server = await asyncio.start_server(slow_broker, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        writer = BrokerMarkerWriter(1, Store(port), None)  # type: ignore[arg-type]
        try:
            first = SendMarkers("tx", 9, 0, True, 0, frozenset({("t", 9)}))
            assert await writer.write(2, first, [("t", 9)]) == {("t", 9): ErrorCode.none}  # connected
            calls = [writer.write(2, SendMarkers(f"tx{i}", i, 0, True, 0, frozenset({("t", i)})), [("t", i)])
                     for i in range(4)]
            results = await asyncio.wait_for(asyncio.gather(*calls), 10)
            assert results == [{("t", i): ErrorCode.none} for i in range(4)]
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


async def closing_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads one request and closes the connection without an answer (a killed broker)."""
    await reader.readexactly(4)
    writer.close()


def test_a_broker_closing_the_connection_is_a_retriable_failure() -> None:
    # Seen in a chaos run: a killed broker's EOF raised IncompleteReadError out of write(),
    # ending the sender's task; the transaction stayed prepared until the coordinator's sweep.
    async def scenario() -> None:
        server = await asyncio.start_server(closing_broker, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        writer = BrokerMarkerWriter(1, Store(port), None)  # type: ignore[arg-type]
        try:
            result = await writer.write(2, SendMarkers("tx", 1, 0, True, 0, frozenset({("t", 0)})), [("t", 0)])
            assert result == {("t", 0): ErrorCode.network_exception}
            assert not writer._clients, "the connection is dropped, a new one made next time"
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
