"""Pacing a background task that runs on the event loop in slices (the key indexer).

``LoopSharePacer`` decides how long to pause after each slice so the task takes at most a
share of the loop, and shrinks that share while other work needs the CPU: the broker's
own (produce, fetch) or, on a machine with few cores, another process's (a client on the
same host). ``CpuIdleMeter`` says how idle the machine's CPUs were between two readings.
"""

from __future__ import annotations

from collections.abc import Callable

MIN_PAUSE_S = 0.001


class LoopSharePacer:
    """Invariant: ``most / 10 <= share <= most`` (``most`` > 0).

    After each slice that left work to do, the task pauses ``pause_after(spent)`` so that
    its slices take ``share`` of the time; after the pause, ``observe`` halves the share
    (down to a tenth of ``most``) when the broker itself kept the CPU busy more than
    ``busy_share`` of the pause, or when the machine's CPUs were idle less than
    ``machine_idle_min`` of it, and grows it back by a quarter (up to ``most``) otherwise.
    Pure: the caller measures. Used by one task at a time.
    """

    def __init__(self, most: float, busy_share: float = 0.5, machine_idle_min: float = 0.15) -> None:
        if most <= 0:
            raise ValueError("a pacer needs a share above 0")
        self.most = most
        self.share = most
        self.busy_share = busy_share
        self.machine_idle_min = machine_idle_min

    def pause_after(self, spent_s: float) -> float:
        return max(spent_s * (1 - self.share) / self.share, MIN_PAUSE_S)

    def observe(self, paused_s: float, own_cpu_s: float, machine_idle: float | None) -> None:
        """What the pause of ``paused_s`` seconds saw: the broker's CPU seconds in it and
        the machine's idle share (None when unknown)."""
        loaded = own_cpu_s > paused_s * self.busy_share or (
            machine_idle is not None and machine_idle < self.machine_idle_min)
        if loaded:
            self.share = max(self.share / 2, self.most / 10)
        else:
            self.share = min(self.share * 1.25, self.most)


def _read_proc_stat() -> str:
    with open("/proc/stat") as f:
        return f.readline()


class CpuIdleMeter:
    """The share of the machine's CPU time that was idle since the previous ``sample()``
    (Linux ``/proc/stat``: idle and iowait over all time); None at the first sample, and
    always where there is no such file."""

    def __init__(self, read: Callable[[], str] = _read_proc_stat) -> None:
        self._read = read
        self._last: tuple[int, int] | None = None
        self._broken = False

    def sample(self) -> float | None:
        if self._broken:
            return None
        try:
            fields = [int(x) for x in self._read().split()[1:]]
            idle, total = fields[3] + fields[4], sum(fields[:8])
        except (OSError, ValueError, IndexError):
            self._broken = True
            return None
        last, self._last = self._last, (idle, total)
        if last is None or total <= last[1]:
            return None
        return (idle - last[0]) / (total - last[1])
