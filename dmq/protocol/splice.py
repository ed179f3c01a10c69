"""Records whose bytes live in a file range and are spliced into a frame when it is sent."""

from __future__ import annotations

from typing import Protocol


class ByteSource(Protocol):
    """Bytes that live elsewhere (a file range): ``length`` of them, ``read()`` on demand."""

    length: int

    def read(self) -> bytes: ...


class SpliceRecords(bytes):
    """A ``records`` field value whose bytes are spliced into the frame later.

    kio writes ``len(value)`` as the length prefix and then hands the value to
    the writer, which records a splice point instead of copying bytes. The
    bytes object itself is empty; the source supplies the data (zero-copy
    sendfile from a segment file in the server).
    """

    source: ByteSource

    @classmethod
    def of(cls, source: ByteSource) -> SpliceRecords:
        obj = cls(b"")
        obj.source = source
        return obj

    def __len__(self) -> int:
        return self.source.length
