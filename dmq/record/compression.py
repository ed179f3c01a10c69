"""Kafka's batch compression codecs (sans-io), via cramjam.

Codec ids are Kafka's: 1 gzip, 2 snappy, 3 lz4 (LZ4 frame), 4 zstd. Snappy
data from the Java client uses xerial framing (magic ``\\x82SNAPPY\\x00``);
librdkafka and others send raw snappy. Both are read; raw is written.
"""

from __future__ import annotations

import struct

import cramjam

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "uncompressed", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


class UnsupportedCodecError(ValueError):
    pass


def _snappy_decompress(data: bytes) -> bytes:
    if data.startswith(_XERIAL_MAGIC):
        out = bytearray()
        pos = 16  # magic (8) + version (4) + compatible version (4)
        while pos + 4 <= len(data):
            (length,) = struct.unpack_from(">i", data, pos)
            pos += 4
            out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + length]))
            pos += length
        return bytes(out)
    return bytes(cramjam.snappy.decompress_raw(data))


def decompress(codec: int, data: bytes) -> bytes:
    """The data a batch's codec compressed; ValueError when it does not decompress
    (UnsupportedCodecError, a ValueError too, for a codec id Kafka does not have)."""
    try:
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            return _snappy_decompress(data)
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except (cramjam.DecompressionError, struct.error) as e:
        raise ValueError(f"cannot decompress {CODEC_NAMES[codec]} data: {e}") from None
    if codec == NONE:
        return data
    raise UnsupportedCodecError(f"unknown compression codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    if codec == NONE:
        return data
    raise UnsupportedCodecError(f"unknown compression codec {codec}")
