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
ZSTD_MAX_WINDOW = 1 << 27  # zstd's own default: the window levels 20-22 declare
MAX_MEMBERS = 64  # gzip members or lz4 frames in one batch (clients write one)
_CHUNK = 1 << 20


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


def decompress_bounded(codec: int, data: bytes, limit: int) -> bytes | bytearray:
    """``decompress`` for data a client sent: ValueError when it does not decompress,
    DecompressedTooLargeError (a ValueError) as soon as it makes more than ``limit``
    bytes, having held at most about that much (twice, while a buffer grows). More than
    ``MAX_MEMBERS`` gzip members or lz4 frames is a ValueError too: each costs a copy of
    the rest of the data, and clients write one."""
    try:
        if codec == GZIP:
            return _gzip_bounded(data, limit)
        if codec == SNAPPY:
            return _snappy_bounded(data, limit)
        if codec == LZ4:
            return _lz4_bounded(data, limit)
        if codec == ZSTD:
            return _zstd_bounded(data, limit)
    except (cramjam.DecompressionError, zlib.error, RuntimeError, zstandard.ZstdError, struct.error) as e:
        # lz4.frame raises RuntimeError for data that is not an LZ4 frame.
        raise ValueError(f"cannot decompress {CODEC_NAMES[codec]} data: {e}") from None
    if codec == NONE:
        if len(data) > limit:
            _too_large(codec, limit)
        return data
    raise UnsupportedCodecError(f"unknown compression codec {codec}")


def _too_large(codec: int, limit: int) -> NoReturn:
    raise DecompressedTooLargeError(f"{CODEC_NAMES[codec]} data decompresses to more than {limit} bytes")


_GZIP_MAGIC = b"\x1f\x8b"


def _gzip_bounded(data: bytes, limit: int) -> bytearray:
    out = bytearray()
    rest = data
    for _member in range(MAX_MEMBERS):  # one gzip member after another, as GZIPInputStream
        d = zlib.decompressobj(wbits=31)
        out += d.decompress(rest, limit + 1 - len(out))
        if len(out) > limit or d.unconsumed_tail:
            _too_large(GZIP, limit)
        if not d.eof:
            raise ValueError("cannot decompress gzip data: truncated")
        rest = d.unused_data
        if not rest.startswith(_GZIP_MAGIC):  # the end, or padding GZIPInputStream skips too
            return out
    raise ValueError(f"cannot decompress gzip data: more than {MAX_MEMBERS} members")


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


def _snappy_bounded(data: bytes, limit: int) -> bytes | bytearray:
    if not data.startswith(_XERIAL_MAGIC):
        if _raw_snappy_length(data) > limit:
            _too_large(SNAPPY, limit)
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
            _too_large(SNAPPY, limit)
        out += cramjam.snappy.decompress_raw(block)
        pos += length
    return out


def _lz4_bounded(data: bytes, limit: int) -> bytearray:
    # python-lz4 allocates max_length on every call: asked for at most a MiB at a time.
    out = bytearray()
    rest = data
    for _frame in range(MAX_MEMBERS):  # concatenated frames
        if not rest:
            return out
        d = lz4.frame.LZ4FrameDecompressor()
        out += d.decompress(rest, max_length=min(_CHUNK, limit + 1 - len(out)))
        while not d.eof and not d.needs_input:  # more output waiting
            if len(out) > limit:
                _too_large(LZ4, limit)
            before = len(out)
            out += d.decompress(b"", max_length=min(_CHUNK, limit + 1 - len(out)))
            if len(out) == before:
                raise ValueError("cannot decompress lz4 data: no progress")
        if len(out) > limit:
            _too_large(LZ4, limit)
        if not d.eof:
            raise ValueError("cannot decompress lz4 data: truncated frame")
        rest = d.unused_data
    if rest:
        raise ValueError(f"cannot decompress lz4 data: more than {MAX_MEMBERS} frames")
    return out


def _zstd_bounded(data: bytes, limit: int) -> bytes:
    # First count what the frames make, a MiB at a time, keeping none of it; then, known
    # to be within the limit, decompress them as dmq's readers do (cramjam), which also
    # refuses a frame cut short (zstandard's reader gives what such a frame holds).
    dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    made = 0
    with dctx.stream_reader(data, read_across_frames=True) as reader:
        while chunk := reader.read(_CHUNK):
            made += len(chunk)
            if made > limit:
                _too_large(ZSTD, limit)
    return bytes(cramjam.zstd.decompress(data))


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """``data`` compressed by ``codec`` as Kafka's clients frame it; ``level``: the
    codec's level (None: its default; snappy has none)."""
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data, level=level))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    if codec == NONE:
        return data
    raise UnsupportedCodecError(f"unknown compression codec {codec}")
