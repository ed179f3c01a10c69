"""Request frames whose array counts run to billions: kio's native reader (0.6.5) reserved
room for every item before reading any, the allocation failed and Rust aborted the process
(dmq.protocol.bounds now refuses them first). Frames without their size prefix."""

from __future__ import annotations

import struct


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def header(api_key: int, version: int, flexible: bool) -> bytes:
    """A request header (v1, or v2 with no tagged fields) with correlation id 1, client id "c"."""
    return struct.pack(">hhih", api_key, version, 1, 1) + b"c" + (b"\x00" if flexible else b"")


_PRODUCE_V9 = header(0, 9, True) + b"\x00" + struct.pack(">hi", 1, 1000)

# name -> (api key, version, frame)
HUGE: dict[str, tuple[int, int, bytes]] = {
    "produce-v9-topics": (0, 9, _PRODUCE_V9 + uvarint(2**32 - 1)),
    "fetch-v12-topics": (1, 12, header(1, 12, True) + struct.pack(">iiiibii", -1, 500, 1, 1000, 0, 0, 0)
                         + uvarint(2**32 - 1)),
    "produce-v3-topics": (0, 3, header(0, 3, False) + struct.pack(">hhii", -1, 1, 1000, 2**31 - 1)),
    "produce-v9-partitions": (0, 9, _PRODUCE_V9 + uvarint(2) + uvarint(2) + b"t" + uvarint(2**32 - 1)),
    "metadata-v12-topics": (3, 12, header(3, 12, True) + uvarint(2**32 - 1)),
    "produce-v9-tagged": (0, 9, _PRODUCE_V9 + uvarint(1) + uvarint(2**32 - 1)),
}
