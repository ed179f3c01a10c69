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
The file is rewritten (temporary file, fsync, rename) when the entries change;
changes happen only on leadership changes and truncation, so they are rare.

Invariant (KIP-101's): before a batch of epoch ``e`` is in the log, the file
holds the entry of ``e`` and every earlier one, so after any crash the file
names every epoch the log holds (entries past the log end are cut on load).
``assign`` keeps it by writing before it returns. A caller that must not wait
for an fsync (the event loop) writes first on a worker thread: ``plan`` says
what the entries will be after some assigns, ``write_planned`` writes that on
the thread, and the ``assign`` that follows finds the file holding it already.
``truncate_from_end(flush=False)`` leaves the file behind (``dirty``) for a
thread to write with ``write_planned(*planned_flush())``; stale entries there
start at or past the log end, and the next ``assign`` writes first if the file
is still behind.

Threads: the owning Log's thread (the event loop) reads and changes ``entries``;
``write_planned`` may run on any thread. Every write of the file and every
change of ``_file`` (what the file holds), ``dirty`` and ``generation`` happens
under ``_write_lock``. ``write_planned`` writes only if ``entries`` still equal
the entries it was planned from and no ``fence()`` came since the plan, so a
late thread never puts back older entries. A plan's caller sees that nothing is
appended to the log until the write is done; anything else that may append
(a new leadership, another leader to follow) calls ``fence()`` first, so a
planned entry never lands on disk after batches of an older epoch were appended
at or past its start.
"""

from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_right
from collections.abc import Sequence

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED = -1

log = logging.getLogger("dmq.storage")


Entries = tuple[tuple[int, int], ...]
Plan = tuple[Entries, Entries, int]  # write_planned's arguments: base, planned, generation


def _assigned(entries: list[tuple[int, int]], epoch: int, start_offset: int) -> bool:
    """Apply one assign to ``entries`` in place; whether they changed (Kafka's assign: an
    older or known epoch is ignored, and a new epoch cannot start below where an older
    one started: those entries go)."""
    if epoch < 0 or (entries and epoch <= entries[-1][0]):
        return False
    while entries and entries[-1][1] >= start_offset:
        entries.pop()
    entries.append((epoch, start_offset))
    return True


class LeaderEpochFileCache:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self.entries: list[tuple[int, int]] = []
        self._write_lock = threading.Lock()
        self._file: Entries | None = None  # what the file holds; None: no file
        self.dirty = False  # entries differ from the file
        self.generation = 0  # fences so far
        if os.path.exists(self.path):
            self.entries = _read(self.path)
            self._file = tuple(self.entries)

    @property
    def exists(self) -> bool:
        return os.path.exists(self.path)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op for an older or known
        epoch), and see that the file holds the entries before returning."""
        entries = self.entries
        if (epoch < 0 or (entries and epoch <= entries[-1][0])) and not self.dirty:
            return  # every append of a leader: nothing to do
        if _assigned(entries, epoch, start_offset) or self.dirty:
            self._changed(flush=True)

    def assign_all(self, assigns: list[tuple[int, int]]) -> None:
        """``assign`` each (epoch, start offset) in order, with one write at the end."""
        changed = False
        for epoch, start in assigns:
            changed = _assigned(self.entries, epoch, start) or changed
        if changed or self.dirty:
            self._changed(flush=True)

    def plan(self, assigns: list[tuple[int, int]]) -> Plan | None:
        """``write_planned``'s arguments that write the entries as they will be after
        ``assigns`` ((epoch, start offset), in order); None when the file holds those."""
        after = list(self.entries)
        for epoch, start in assigns:
            _assigned(after, epoch, start)
        planned = tuple(after)
        if planned == self._file:
            return None
        return tuple(self.entries), planned, self.generation

    def planned_flush(self) -> Plan:
        """``write_planned``'s arguments that write the entries as they are."""
        now = tuple(self.entries)
        return now, now, self.generation

    def write_planned(self, base: Entries, planned: Entries, generation: int) -> bool:
        """Write ``planned`` (any thread) if the entries are still ``base`` and no fence came
        since the plan; whether it did."""
        with self._write_lock:
            if generation != self.generation or tuple(self.entries) != base:
                return False  # changed since: the change sees that the file holds it
            if planned != self._file:
                self._write(planned)
            self.dirty = tuple(self.entries) != planned
            return True

    def fence(self) -> None:
        """Something else may append from now on (a new leadership, another leader to
        follow): no write planned before lands after this returns. Waits for a planned
        write in progress (an fsync, only when one races the change)."""
        with self._write_lock:
            self.generation += 1

    def _changed(self, flush: bool) -> None:
        with self._write_lock:
            current = tuple(self.entries)
            self.dirty = current != self._file
            if self.dirty and flush:
                self._write(current)
                self.dirty = False

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
        below ``requested``. (-1, -1) when ``requested`` predates every entry.
        """
        if not self.entries or requested < 0:
            return UNDEFINED, UNDEFINED
        if requested >= self.entries[-1][0]:
            return self.entries[-1][0], log_end_offset
        epochs = [e for e, _ in self.entries]
        i = bisect_right(epochs, requested)
        if i == 0:
            return UNDEFINED, UNDEFINED
        return self.entries[i - 1][0], self.entries[i][1]

    def truncate_from_end(self, end_offset: int, flush: bool = True) -> None:
        """Drop entries starting at or above ``end_offset`` (the log was truncated there);
        with ``flush`` False the file may stay behind (``dirty``) for a thread to write."""
        kept = [(e, s) for e, s in self.entries if s < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._changed(flush)

    def clear_and_flush(self) -> None:
        self.entries = []
        with self._write_lock:
            self._write(())
            self.dirty = False

    def _write(self, entries: Entries) -> None:
        """Under ``_write_lock``."""
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"0\n{len(entries)}\n")
            for epoch, start in entries:
                f.write(f"{epoch} {start}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._file = entries


EpochPlan = tuple[LeaderEpochFileCache, Entries, Entries, int]  # a cache, and write_planned's arguments


def write_plans(plans: Sequence[EpochPlan]) -> list[bool]:
    """Worker thread: ``write_planned`` each plan; per plan, False when its write failed
    (logged: the caller's next ``assign`` writes on its own thread, or fails there)."""
    written = []
    for cache, base, planned, generation in plans:
        try:
            cache.write_planned(base, planned, generation)
            written.append(True)
        except OSError as e:
            log.warning("cannot write %s: %s", cache.path, e)
            written.append(False)
    return written


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
