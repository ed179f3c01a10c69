"""Kafka's batch compression codecs (sans-io), via cramjam.

Codec ids are Kafka's: 1 gzip, 2 snappy, 3 lz4 (LZ4 frame), 4 zstd. Snappy
data from the Java client uses xerial framing (magic ``\\x82SNAPPY\\x00``);
librdkafka and others send raw snappy. Both are read; raw is written.

``decompress_bounded`` is for data a client sent: it stops once the output
passes a limit, before holding more than that in memory (a few KB of zstd or
gzip can say gigabytes), with zlib, lz4 and zstandard's streaming decoders and,
for snappy, the uncompressed length each raw block states first. ``decompress``
is for batches already in a log, which passed that check when produced.
"""

from __future__ import annotations

import struct
import zlib
from typing import NoReturn

import cramjam
import lz4.frame
import zstandard

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "uncompressed", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
ZSTD_MAX_WINDOW = 1 << 24


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


class DecompressedTooLargeError(ValueError):
    pass


def decompress_bounded(codec: int, data: bytes, limit: int) -> bytes:
    """``decompress`` for data a client sent: ValueError when it does not decompress,
    DecompressedTooLargeError (a ValueError) once it would decompress to more than
    ``limit`` bytes, without making more than about that much."""
    try:
        if codec == GZIP:
            out = _gzip_bounded(data, limit)
        elif codec == SNAPPY:
            out = _snappy_bounded(data, limit)
        elif codec == LZ4:
            out = _lz4_bounded(data, limit)
        elif codec == ZSTD:
            out = _zstd_bounded(data, limit)
        elif codec == NONE:
            out = data
        else:
            raise UnsupportedCodecError(f"unknown compression codec {codec}")
    except (cramjam.DecompressionError, zlib.error, RuntimeError, zstandard.ZstdError, struct.error) as e:
        # lz4.frame raises RuntimeError for data that is not an LZ4 frame.
        raise ValueError(f"cannot decompress {CODEC_NAMES[codec]} data: {e}") from None
    if len(out) > limit:
        raise DecompressedTooLargeError(f"{CODEC_NAMES[codec]} data decompresses to more than {limit} bytes")
    return out


def _gzip_bounded(data: bytes, limit: int) -> bytes:
    out = bytearray()
    rest = data
    while rest:  # one gzip member after another, as Java's GZIPInputStream reads them
        d = zlib.decompressobj(wbits=31)
        out += d.decompress(rest, limit + 1 - len(out))
        if len(out) > limit or d.unconsumed_tail:
            return bytes(out[: limit + 1])  # over the limit: the caller says so
        if not d.eof:
            raise ValueError("cannot decompress gzip data: truncated")
        rest = d.unused_data
    return bytes(out)


def _raw_snappy_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block starts with (an unsigned varint)."""
    result = shift = 0
    for i in range(min(5, len(block))):
        b = block[i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
    raise ValueError("cannot decompress snappy data: bad length")


def _snappy_bounded(data: bytes, limit: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        if _raw_snappy_length(data) > limit:
            _too_large(limit)
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = 16  # magic (8) + version (4) + compatible version (4)
    while pos + 4 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        block = data[pos : pos + length]
        if length < 0 or len(block) < length:
            raise ValueError("cannot decompress snappy data: truncated xerial block")
        if len(out) + _raw_snappy_length(block) > limit:
            _too_large(limit)
        out += bytes(cramjam.snappy.decompress_raw(block))
        pos += length
    return bytes(out)


def _lz4_bounded(data: bytes, limit: int) -> bytes:
    out = bytearray()
    rest = data
    while rest:  # concatenated frames
        d = lz4.frame.LZ4FrameDecompressor()
        out += d.decompress(rest, max_length=limit + 1 - len(out))
        while not d.eof and not d.needs_input:  # more output waiting
            if len(out) > limit:
                return bytes(out)
            out += d.decompress(b"", max_length=limit + 1 - len(out))
        if len(out) > limit:
            return bytes(out)
        if not d.eof:
            raise ValueError("cannot decompress lz4 data: truncated frame")
        rest = d.unused_data
    return bytes(out)


def _zstd_bounded(data: bytes, limit: int) -> bytes:
    # The reader makes at most what is asked of it. A frame cut short reads as the data
    # it holds (zstandard's reader does not say so): the record walk after refuses it.
    out = bytearray()
    # A frame's header names the window it needs; 16 MiB covers zstd's levels up to 19.
    dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    with dctx.stream_reader(data, read_across_frames=True) as reader:
        while len(out) <= limit:
            chunk = reader.read(min(1 << 20, limit + 1 - len(out)))
            if not chunk:
                break
            out += chunk
    return bytes(out)


def _too_large(limit: int) -> NoReturn:
    raise DecompressedTooLargeError(f"snappy data decompresses to more than {limit} bytes")


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
