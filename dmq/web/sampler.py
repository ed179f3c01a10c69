"""What the console remembers between page loads: topics' end offsets (for message rates)
and consumer and share groups' total lag (for lag over time), sampled in the background.

Bounded: at most ``HISTORY`` samples per series and ``MAX_GROUPS`` groups (those sampled
longest ago are dropped first); a group that no longer exists is forgotten. One sample
costs a Metadata, a ListOffsets per leader and an OffsetFetch per sampled group.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field

from dmq.web.kafka import Cluster, ConsoleError

log = logging.getLogger("dmq.web")

HISTORY = 120  # samples kept per series
MAX_GROUPS = 100
RATE_WINDOW_S = 60.0


@dataclass(slots=True)
class History:
    """Samples as (monotonic seconds, wall-clock ms, value) per series."""

    topic_ends: dict[str, deque[tuple[float, int]]] = field(default_factory=dict)
    group_lag: dict[str, deque[tuple[float, int, int]]] = field(default_factory=dict)

    def record_topics(self, now: float, ends: dict[str, int]) -> None:
        for topic in list(self.topic_ends):
            if topic not in ends:
                del self.topic_ends[topic]
        for topic, end in ends.items():
            self.topic_ends.setdefault(topic, deque(maxlen=HISTORY)).append((now, end))

    def record_lag(self, group: str, now: float, wall_ms: int, lag: int) -> None:
        series = self.group_lag.pop(group, None) or deque(maxlen=HISTORY)
        series.append((now, wall_ms, lag))
        self.group_lag[group] = series  # most recently sampled last
        while len(self.group_lag) > MAX_GROUPS:
            del self.group_lag[next(iter(self.group_lag))]

    def forget_groups_except(self, groups: set[str]) -> None:
        for g in [g for g in self.group_lag if g not in groups]:
            del self.group_lag[g]

    def rate(self, topic: str, end: int, now: float) -> float | None:
        """Records per second into ``topic``: its end offsets now against the oldest sample
        of the last minute (None without a sample at least a second old)."""
        series = self.topic_ends.get(topic)
        if not series:
            return None
        for t, e in series:
            if now - t <= RATE_WINDOW_S:
                if now - t < 1.0:
                    return None
                return max(0, end - e) / (now - t)
        return None

    def lag_series(self, group: str) -> list[tuple[int, int]]:
        return [(wall, lag) for _t, wall, lag in self.group_lag.get(group, ())]


class Sampler:
    """Samples the cluster every ``interval`` seconds while running (one asyncio task)."""

    def __init__(self, cluster: Cluster, history: History, interval: float) -> None:
        self.cluster = cluster
        self.history = history
        self.interval = interval
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    def start(self) -> None:
        if self._task is None and self.interval > 0:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="dmq-console-sampler")

    async def stop(self) -> None:
        """End the sampling task. Its cancellation may be swallowed by a request finishing
        at the same moment (asyncio.wait_for in Python 3.11), so the loop also stops on a
        flag, and the wait is bounded."""
        task, self._task = self._task, None
        self._stopping.set()
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=5)

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.sample()
            except ConsoleError as e:
                log.debug("console sample failed: %s", e)
            except Exception:  # noqa: BLE001 - the sampler must outlive any one bad answer
                log.exception("console sample failed")
            try:
                await asyncio.wait_for(self._stopping.wait(), self.interval)
            except TimeoutError:
                pass

    async def sample(self) -> None:
        md = await self.cluster.metadata()
        _start, ends = await self.cluster.offsets(md, md.topics)
        now = time.monotonic()
        per_topic: dict[str, int] = {}
        for (t, _p), e in ends.items():
            per_topic[t] = per_topic.get(t, 0) + e
        self.history.record_topics(now, per_topic)
        listed, complete = await self.cluster.list_groups()
        groups = [g for g in listed if g[1] in ("classic", "share")]
        if complete:  # a broker that did not answer has not forgotten its groups
            self.history.forget_groups_except({g[0] for g in groups})
        for group, kind, _state, node in groups[:MAX_GROUPS]:
            try:
                if kind == "share":  # the broker's lag: records after the start offset not yet done
                    lags = [lag for _start, lag in (await self.cluster.share_offsets(group, node)).values()]
                    if any(lag < 0 for lag in lags):
                        continue  # not known (yet) for some partition
                    lag = sum(lags)
                else:
                    committed = await self.cluster.committed(group, node)
                    lag = sum(max(0, ends[tp] - o) for tp, o in committed.items() if tp in ends)
            except ConsoleError:
                continue
            self.history.record_lag(group, time.monotonic(), int(time.time() * 1000), lag)
