"""A minimal blocking Kafka wire client over kio entities.

For tests, tools and diagnostics that need exact control of requests (raw
batches, specific API versions, malformed frames); applications should use a
real Kafka client.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from dmq.protocol.codec import API_VERSIONS_KEY, response_class


class WireClient:
    def __init__(self, host: str, port: int, client_id: str = "dmq-wire", timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def encode(self, request: Any) -> tuple[int, bytes]:
        self.correlation_id += 1
        cls = type(request)
        header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
        header = header_cls(request_api_key=cls.__api_key__, request_api_version=cls.__version__,
                            correlation_id=self.correlation_id,  # type: ignore[arg-type]
                            client_id=self.client_id)
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, header)
        entity_writer(cls)(buf, request)
        body = buf.getvalue()
        return self.correlation_id, struct.pack(">i", len(body)) + body

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
        data = self.recv_frame()
        (got,) = struct.unpack_from(">i", data, 0)
        if got != corr:
            raise ValueError(f"correlation id {got} != {corr}")
        offset = 4
        api_key = int(cls.__api_key__)
        version = int(cls.__version__)
        resp_cls = response_class(api_key, version)
        if resp_cls.__flexible__ and api_key != API_VERSIONS_KEY:
            offset += 1  # empty tagged fields of response header v1
        response, _ = entity_reader(resp_cls)(data, offset)
        return response
