"""LeaderEpochFileCache: which leader epoch wrote which offsets of one partition.

File ``leader-epoch-checkpoint`` in the partition directory, Kafka's format::

    0                 version
    2                 number of entries
    0 0               epoch start_offset
    3 1200

Invariants: entries are sorted by epoch and by start offset, both strictly
increasing; an entry ``(e, s)`` says the first record written in epoch ``e``
has offset ``s``, and epoch ``e`` ends where the next entry starts (or at the
log end offset for the latest epoch). A follower uses it with
OffsetForLeaderEpoch to find where its log diverges from the leader's.
The file is rewritten (temporary file, fsync, rename) on every change; changes
happen only on leadership changes and truncation, so they are rare.
Plain synchronous code, called by the owning Log.
"""

from __future__ import annotations

import os
from bisect import bisect_right

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED = -1


class LeaderEpochFileCache:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self.entries: list[tuple[int, int]] = []
        if os.path.exists(self.path):
            self.entries = _read(self.path)

    @property
    def exists(self) -> bool:
        return os.path.exists(self.path)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op for an older or known epoch).
        A new epoch cannot start below where an older one started: those entries go."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return  # every append of a leader: nothing to do
        self.assign_all([(epoch, start_offset)])

    def assign_all(self, assigns: list[tuple[int, int]]) -> None:
        """``assign`` each (epoch, start offset) in order, with one write at the end."""
        changed = False
        for epoch, start_offset in assigns:
            if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
                continue
            while self.entries and self.entries[-1][1] >= start_offset:
                self.entries.pop()
            self.entries.append((epoch, start_offset))
            changed = True
        if changed:
            self._write()

    def epoch_for(self, offset: int) -> int:
        """The epoch that wrote ``offset``: the latest entry starting at or below it
        (Kafka's epochForOffset); -1 when it predates every entry."""
        starts = [s for _, s in self.entries]
        i = bisect_right(starts, offset)
        return self.entries[i - 1][0] if i else UNDEFINED

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers for ``requested``.

        The end offset is the start of the first epoch after ``requested`` (or the
        log end offset for the latest epoch); the epoch is the largest one at or
        below ``requested``. An epoch older than every entry (its entries went with
        the records: retention, a reassignment, a leadership that wrote nothing) is
        answered with itself and the first entry's start, as Kafka's endOffsetFor:
        (-1, -1) there made a consumer validating its position take it for a
        truncation and reset its offset. (An epoch newer than every entry is answered
        with the latest: followers rely on it; Kafka answers (-1, -1).)
        """
        if not self.entries or requested < 0:
            return UNDEFINED, UNDEFINED
        if requested >= self.entries[-1][0]:
            return self.entries[-1][0], log_end_offset
        epochs = [e for e, _ in self.entries]
        i = bisect_right(epochs, requested)
        if i == 0:
            return requested, self.entries[0][1]
        return self.entries[i - 1][0], self.entries[i][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or above ``end_offset`` (the log was truncated there)."""
        kept = [(e, s) for e, s in self.entries if s < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._write()

    def clear_and_flush(self) -> None:
        self.entries = []
        self._write()

    def _write(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"0\n{len(self.entries)}\n")
            for epoch, start in self.entries:
                f.write(f"{epoch} {start}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


def _read(path: str) -> list[tuple[int, int]]:
    with open(path) as f:
        lines = [line.split() for line in f.read().splitlines() if line.strip()]
    if len(lines) < 2 or lines[0] != ["0"]:
        return []
    out: list[tuple[int, int]] = []
    for parts in lines[2:2 + int(lines[1][0])]:
        if len(parts) == 2:
            out.append((int(parts[0]), int(parts[1])))
    return out
