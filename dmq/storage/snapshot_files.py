"""Offset-named snapshot files of one partition directory.

A log keeps small state snapshots beside its segments (the producer state's
``.snapshot`` files, the delayed records' ``.delayed`` files). Each is named by
the offset it was taken at, zero-padded to 20 digits like a segment,
``<offset:020d><suffix>``, and means "the state with every batch below this
offset applied". The files' bodies are their owners' business; this class only
names, writes, lists and removes them.

Invariants:

* a snapshot file is written whole or not at all: the bytes go to
  ``<name>.tmp`` (fsynced unless the caller says the log itself will be), then
  ``os.replace`` gives it its name, so a crash leaves the old set intact;
* after a write the newest ``keep`` files remain, the one just written (a log
  truncates its snapshots before it writes below them, so that one is normally
  among the newest), and with ``keep_segment_bases`` every one taken at a
  segment's base offset while that segment exists (a ``<offset:020d>.log``
  file in the directory): an unclean restart rebuilds the producer state from
  the base of the segment holding the recovery point, and needs the snapshot
  there (Kafka keeps a producer snapshot per segment and deletes it with its
  segment). Those go at the next write once their segment is gone;
* ``.tmp`` leftovers of a crash are never listed (their suffix differs).

Called from whichever task owns the log (its lock held), except ``sync``,
which a flush on a worker thread calls; plain synchronous file code.
"""

from __future__ import annotations

import os
from collections.abc import Iterator


class SnapshotFiles:
    """The ``<offset:020d><suffix>`` files in ``directory`` (see the module docstring)."""

    def __init__(self, directory: str, suffix: str, keep: int = 2, keep_segment_bases: bool = False) -> None:
        self.directory = directory
        self.suffix = suffix
        self.keep = keep
        self.keep_segment_bases = keep_segment_bases

    def path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{self.suffix}")

    def offsets(self) -> list[int]:
        """Every snapshot's offset, ascending (names that are not an offset are ignored)."""
        return self._offsets_in(os.listdir(self.directory))

    def _offsets_in(self, names: list[str]) -> list[int]:
        out = []
        for name in names:
            if name.endswith(self.suffix):
                try:
                    out.append(int(name[: -len(self.suffix)]))
                except ValueError:
                    continue
        return sorted(out)

    def write(self, offset: int, data: bytes, fsync: bool = True) -> None:
        """Write the snapshot taken at ``offset`` atomically; keep the newest ``keep``."""
        final = self.path(offset)
        tmp = final + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, final)
        names = os.listdir(self.directory)
        bases = {int(name[:-4]) for name in names if name.endswith(".log") and name[:-4].isdigit()} \
            if self.keep_segment_bases else set()
        for old in self._offsets_in(names)[: -self.keep]:
            if old != offset and old not in bases:
                self.delete(old)

    def sync(self, after: int, up_to: int) -> None:
        """fsync the snapshots taken in (``after``, ``up_to``] (written without) and then, if
        there were any, the directory, so that their names survive too. Any thread: one
        deleted meanwhile by the owner's task is skipped."""
        synced = False
        for offset in self.offsets():
            if after < offset <= up_to:
                try:
                    fd = os.open(self.path(offset), os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                synced = True
        if not synced:
            return  # a flush with no roll in its range (flush.messages): no directory fsync
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self, offset: int) -> None:
        try:
            os.unlink(self.path(offset))
        except FileNotFoundError:
            pass

    def delete_after(self, offset: int) -> None:
        """Remove every snapshot taken after ``offset`` (the log was truncated to it)."""
        for snap in self.offsets():
            if snap > offset:
                self.delete(snap)

    def newest_first(self, max_offset: int) -> Iterator[int]:
        """The offsets of the snapshots at or below ``max_offset``, newest first: the
        owner reads them in turn and keeps the first it can parse."""
        for snap in reversed(self.offsets()):
            if snap <= max_offset:
                yield snap

    def read(self, offset: int) -> bytes:
        with open(self.path(offset), "rb") as f:
            return f.read()
