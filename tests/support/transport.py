"""A stand-in for an asyncio transport, for KafkaConnection tests without sockets."""

from __future__ import annotations

from typing import Any


class Transport:
    """What KafkaConnection asks of a transport: records what is written and whether it
    was closed or aborted; no socket, so no sendfile."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:
        self.written += data

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True
