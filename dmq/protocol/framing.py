"""Kafka's framing: a stream of frames, each a big-endian int32 size and that many bytes.

Sans-io: ``FrameReader.feed`` takes whatever a read returned and hands back the frames
it completed. The broker's listener reads requests with it, dmq's own clients responses.
"""

from __future__ import annotations

from collections.abc import Callable

# Frames at least this large are gathered from their reads rather than buffered.
GATHER_BYTES = 64 * 1024


class FrameSizeError(ValueError):
    """A frame's size is negative or above the reader's ``max_bytes``."""

    def __init__(self, size: int, max_bytes: int) -> None:
        super().__init__(f"frame size {size} is outside [0, {max_bytes}]")
        self.size = size
        self.max_bytes = max_bytes


class FrameReader:
    """Splits a byte stream into frames (their bytes without the size).

    Invariant: ``buffer`` holds read bytes that are not part of a complete frame, unless
    ``gathering``: then a frame of ``gather_size`` bytes (at least GATHER_BYTES) is
    arriving, ``gather_parts`` holds its first ``gather_have`` bytes as they were read,
    and ``buffer`` is empty. A large frame is joined once, when its last byte arrives (one
    copy), rather than grown into the buffer and sliced out of it (three). Sizes are
    checked against ``max_bytes`` when their header is read (the caller may change it
    between reads); a bad one raises FrameSizeError and the reader is then unusable
    (the caller closes the connection). Not thread-safe: one reader per connection,
    fed by its protocol.
    """

    def __init__(self, max_bytes: int = 2**31 - 1) -> None:
        self.max_bytes = max_bytes
        self.buffer = bytearray()
        self.gathering = False
        self.gather_parts: list[bytes] = []
        self.gather_size = self.gather_have = 0

    def feed(self, data: bytes, emit: Callable[[bytes], object]) -> None:
        """Pass each frame ``data`` completes to ``emit``, in order. Raises
        FrameSizeError at a bad size (frames before it in ``data`` were emitted)."""
        if self.gathering:
            need = self.gather_size - self.gather_have
            if len(data) < need:
                self.gather_parts.append(data)
                self.gather_have += len(data)
                return
            self.gather_parts.append(data if len(data) == need else data[:need])
            emit(b"".join(self.gather_parts))
            self.gathering = False
            self.gather_parts = []
            data = data[need:]
        buf = self.buffer
        buf += data
        start = 0
        end = len(buf)
        with memoryview(buf) as view:
            while end - start >= 4:
                size = int.from_bytes(view[start : start + 4], "big", signed=True)
                if size < 0 or size > self.max_bytes:
                    raise FrameSizeError(size, self.max_bytes)
                if end - start - 4 < size:
                    if size >= GATHER_BYTES:
                        self.gathering = True
                        self.gather_size = size
                        self.gather_have = end - start - 4
                        self.gather_parts = [bytes(view[start + 4 : end])]
                        start = end
                    break
                emit(bytes(view[start + 4 : start + 4 + size]))
                start += 4 + size
        if start:
            del buf[:start]

    def clear(self) -> None:
        self.buffer.clear()
        self.gathering = False
        self.gather_parts = []
