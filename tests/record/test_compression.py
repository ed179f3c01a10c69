"""``decompress_bounded``: what any codec decompresses round-trips; a few KB that say
gigabytes stop at the limit without being decompressed whole; data that is not
compressed is a ValueError, never the codec library's own error."""

from __future__ import annotations

import struct
import time
import tracemalloc

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.record import compression
from dmq.record.compression import (
    GZIP,
    LZ4,
    SNAPPY,
    ZSTD,
    DecompressedTooLargeError,
    decompress_bounded,
)

CODECS = [GZIP, SNAPPY, LZ4, ZSTD]
MiB = 1 << 20


def xerial(blocks: list[bytes]) -> bytes:
    """Snappy in the Java client's xerial framing."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for block in blocks:
        raw = bytes(cramjam.snappy.compress_raw(block))
        out += struct.pack(">i", len(raw)) + raw
    return bytes(out)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000), st.sampled_from(CODECS))
def test_round_trip(data: bytes, codec: int) -> None:
    packed = compression.compress(codec, data)
    assert decompress_bounded(codec, packed, len(data)) == data
    if len(data) > 0:
        with pytest.raises(DecompressedTooLargeError):
            decompress_bounded(codec, packed, len(data) - 1)


def test_concatenated_frames_and_members_are_read_whole() -> None:
    a, b = b"a" * 1000, b"b" * 3000
    assert decompress_bounded(GZIP, compression.compress(GZIP, a) + compression.compress(GZIP, b), 4000) == a + b
    assert decompress_bounded(LZ4, lz4.frame.compress(a) + lz4.frame.compress(b), 4000) == a + b
    assert decompress_bounded(ZSTD, zstandard.compress(a) + zstandard.compress(b), 4000) == a + b
    assert decompress_bounded(SNAPPY, xerial([a, b]), 4000) == a + b
    with pytest.raises(DecompressedTooLargeError):
        decompress_bounded(SNAPPY, xerial([a, b]), 3999)


def bomb(kind: str) -> tuple[int, bytes]:
    """A few KB that decompress to far more than the tests' 4 MiB limit (built when its
    test runs, not when the module is collected)."""
    zeros = bytes(64 * MiB)
    if kind == "gzip":
        return GZIP, compression.compress(GZIP, zeros) * 4  # 256 MiB in about 250 KB
    if kind == "lz4":
        return LZ4, lz4.frame.compress(zeros) * 4
    if kind == "zstd":
        return ZSTD, zstandard.ZstdCompressor(level=3).compress(zeros) * 40  # 2.5 GiB in about 80 KB
    if kind == "snappy-xerial":
        return SNAPPY, xerial([zeros[: 8 * MiB]] * 32)
    return SNAPPY, b"\xff\xff\xff\xff\x0f\x00"  # a raw block that says 4 GiB


BOMBS = ["gzip", "lz4", "zstd", "snappy-xerial", "snappy-raw"]


@pytest.mark.parametrize("kind", BOMBS)
def test_a_bomb_stops_at_the_limit(kind: str) -> None:
    codec, data = bomb(kind)
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(DecompressedTooLargeError):
            decompress_bounded(codec, data, 4 * MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * 4 * MiB, f"{peak / MiB:.0f} MiB held decompressing"  # a buffer growing past the limit
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"not compressed at all", b"", b"\x82SNAPPY\x00\0\0\0\1\0\0\0\1\0\0\0\x09abc"])
def test_data_that_does_not_decompress_is_a_value_error(codec: int, data: bytes) -> None:
    try:
        decompress_bounded(codec, data, MiB)
    except ValueError:
        pass  # the only error allowed; an empty input may decompress to nothing
    with pytest.raises(ValueError):
        decompress_bounded(codec, compression.compress(codec, b"x" * 1000)[:-3], MiB)


def test_a_zstd_frame_cut_short_is_refused_even_when_its_data_is_whole() -> None:
    """Only its checksum, or its last empty block, missing: the data all decompresses, but
    dmq's readers and librdkafka refuse the frame, so the batch must be refused too."""
    with_checksum = zstandard.ZstdCompressor(write_checksum=True).compress(b"x" * 1000)
    c = zstandard.ZstdCompressor().compressobj()
    unfinished = c.compress(b"x" * 1000) + c.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    for data in (with_checksum[:-4], unfinished):
        with pytest.raises(ValueError):
            decompress_bounded(ZSTD, data, MiB)


def test_zstd_frames_of_the_highest_levels_are_read() -> None:
    """Streamed at levels 20-22 (no size stated) a frame declares a window of up to 128 MiB."""
    c = zstandard.ZstdCompressor(level=22).compressobj()
    data = c.compress(b"x" * 1000) + c.flush()
    assert zstandard.get_frame_parameters(data).window_size > 16 * MiB
    assert decompress_bounded(ZSTD, data, MiB) == b"x" * 1000


@pytest.mark.parametrize("codec", [GZIP, LZ4])
def test_thousands_of_empty_members_are_refused_at_once(codec: int) -> None:
    member = compression.compress(codec, b"")
    started = time.monotonic()
    with pytest.raises(ValueError, match="more than 64"):
        decompress_bounded(codec, member * 50_000, 64 * MiB)
    assert time.monotonic() - started < 1
    assert decompress_bounded(codec, member * 64, 64 * MiB) == b""


def test_padding_after_the_last_gzip_member_is_skipped_as_java_does() -> None:
    packed = compression.compress(GZIP, b"x" * 100)
    assert decompress_bounded(GZIP, packed + b"\0" * 8, 1000) == b"x" * 100
