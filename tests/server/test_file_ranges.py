"""Answers that carry file ranges (fetch answers: FileSlices of segment files) are written
whole, or, when the file was cut short after the answer was made (this broker turned
follower and truncated its log), the connection is aborted instead of sending a frame
shorter than its size says: a client would read the next answer's bytes as this one's.
(A file truncated and refilled past the range before the write sends a whole frame of the
new bytes, as Kafka's FileRecords would; the client's CRC and offset checks see those.)"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from support.transport import Transport

from dmq.server.network import SPLICE_MIN_BYTES, KafkaConnection
from dmq.storage.segment import FileSlice


def answer(tmp_path: Path, size: int, cut_to: int | None) -> tuple[Transport, bytes]:
    """One request answered [4-byte size, file range of ``size`` bytes]; the file is cut to
    ``cut_to`` bytes after the answer is made and before it is written."""
    path = tmp_path / "segment.log"
    body = bytes(i % 251 for i in range(size))
    path.write_bytes(body)
    fd = os.open(path, os.O_RDWR)
    made = asyncio.Event()

    async def dispatch(frame: bytes, peer: str, dispatched: Any, connection_id: int) -> object:
        parts = [size.to_bytes(4, "big"), FileSlice(fd, 0, size)]
        made.set()
        await asyncio.sleep(0.01)  # the answer waits (say, behind an earlier one)
        return parts

    async def main() -> Transport:
        conn = KafkaConnection(dispatch, 10**7, set())
        transport = Transport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.data_received((6).to_bytes(4, "big") + b"\x00\x01\x00\x0c\x00\x00")
        await made.wait()
        if cut_to is not None:
            os.ftruncate(fd, cut_to)
        for _ in range(50):
            await asyncio.sleep(0.01)
            if transport.written or transport.closed:
                break
        return transport

    try:
        return asyncio.run(main()), body
    finally:
        os.close(fd)


@pytest.mark.parametrize("size", [1000, SPLICE_MIN_BYTES + 1000])
def test_a_file_range_is_written_whole(tmp_path: Path, size: int) -> None:
    transport, body = answer(tmp_path, size, None)
    assert bytes(transport.written) == size.to_bytes(4, "big") + body and not transport.closed


@pytest.mark.parametrize("size", [1000, SPLICE_MIN_BYTES + 1000])
def test_a_range_truncated_before_its_write_aborts_the_connection(tmp_path: Path, size: int) -> None:
    transport, _ = answer(tmp_path, size, size // 2)
    assert transport.aborted
    assert len(transport.written) < 4 + size  # not a whole frame
