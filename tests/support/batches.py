"""Hand-made record batches for bad-input tests."""

from __future__ import annotations

import struct

from dmq.record.batch import CRC_START, HEADER_SIZE, LOG_OVERHEAD, compute_crc
from dmq.record.records import encode_batch


def recrc(batch: bytearray) -> bytes:
    """``batch`` with its batchLength and CRC made right again after an edit."""
    struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
    struct.pack_into(">I", batch, CRC_START - 4, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def with_records(body: bytes, codec: int = 0) -> bytes:
    """A one-record batch header (compression ``codec``) over the records ``body``, its
    length and CRC right: what a client that writes broken records would send."""
    batch = bytearray(encode_batch([(b"k", b"hello", [])])[:HEADER_SIZE] + body)
    struct.pack_into(">h", batch, 21, codec)
    return recrc(batch)
