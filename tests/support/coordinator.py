"""Builders for coordinator tests: an in-memory PartitionWriter and a driver that runs
a shard's operations the way the CoordinatorRuntime does, without an event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.coordinator.runtime import (
    Cancel,
    CoordinatorResult,
    Deferred,
    EndMarker,
    LogEntry,
    Record,
    Schedule,
)
from dmq.storage.producer_state import SKIP_VERIFICATION, VerificationGuard


class MemoryWriter:
    """A PartitionWriter over lists. ``hold()`` keeps appended records uncommitted until
    ``release()``; ``fail_append``/``fail_commit`` make the next writes fail."""

    def __init__(self) -> None:
        self.logs: dict[int, list[LogEntry]] = {}
        self.committed: dict[int, int] = {}  # partition -> high watermark
        self.holding = False
        self.fail_append: ErrorCode | None = None
        self.fail_commit: ErrorCode | None = None
        self._changed: asyncio.Event | None = None
        self.leading: set[int] = set()  # partitions metadata says this broker leads

    def append(self, partition: int, records: list[Record], producer: tuple[int, int] | None = None,
               verification: VerificationGuard | None = SKIP_VERIFICATION) -> tuple[ErrorCode, int]:
        if self.fail_append is not None:
            return self.fail_append, -1
        log = self.logs.setdefault(partition, [])
        pid = producer[0] if producer is not None else -1
        base = len(log)
        log.extend([LogEntry(base + i, k, v, pid) for i, (k, v) in enumerate(records)])
        if not self.holding:
            self.committed[partition] = len(log)
        return ErrorCode.none, len(log) - 1

    def append_marker(self, partition: int, marker: EndMarker) -> tuple[ErrorCode, int]:
        if self.fail_append is not None:
            return self.fail_append, -1
        log = self.logs.setdefault(partition, [])
        log.append(LogEntry(len(log), None, None, marker.producer_id, marker))
        if not self.holding:
            self.committed[partition] = len(log)
        return ErrorCode.none, len(log) - 1

    def hold(self) -> None:
        self.holding = True

    def release(self, partition: int | None = None, upto: int | None = None) -> None:
        """Commit what was held (of one partition, up to offset ``upto`` excluded)."""
        for p, log in self.logs.items():
            if partition is None or p == partition:
                self.committed[p] = len(log) if upto is None else upto
        if partition is None and upto is None:
            self.holding = False
        self.wake()

    async def wait_committed(self, partition: int, last_offset: int) -> ErrorCode:
        while True:
            if self.fail_commit is not None:
                return self.fail_commit
            if self.committed.get(partition, 0) > last_offset:
                return ErrorCode.none
            # Every waiter waits on the same event, which a change sets and drops (a waiter
            # dropping it itself could orphan one that another waiter had just made).
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()

    async def ensure_exists(self) -> bool:
        return True

    def leads(self, partition: int) -> bool:
        return partition in self.leading

    def wake(self) -> None:
        event, self._changed = self._changed, None
        if event is not None:
            event.set()

    def read(self, partition: int) -> Iterator[LogEntry]:
        yield from self.logs.get(partition, [])


class ShardDriver:
    """Runs operations on one shard as the runtime would, with every write committed at
    once: records replayed, replies delivered to parked keys, timers kept as data.

    ``answers`` holds the response of every parked request once replied; ``timers``
    the keys set now (``fire(key)`` runs ``on_timer``); ``log`` every record written;
    ``effects`` every effect asked for."""

    def __init__(self, shard: Any, now_ms: int = 1_000_000) -> None:
        self.shard = shard
        self.now = now_ms
        self.parked: set[Hashable] = set()
        self.answers: dict[Hashable, Any] = {}
        self.timers: dict[Hashable, int] = {}  # key -> due time
        self.log: list[LogEntry] = []
        self.effects: list[Any] = []

    def run(self, op: Callable[..., CoordinatorResult], *args: Any) -> Any:
        result = op(*args, self.now)
        return self.apply(result)

    def apply(self, result: CoordinatorResult) -> Any:
        if isinstance(result.response, Deferred):
            self.parked.add(result.response.key)
        for timer in result.timers:
            if isinstance(timer, Schedule):
                self.timers[timer.key] = self.now + timer.delay_ms
            elif isinstance(timer, Cancel):
                self.timers.pop(timer.key, None)
        pid = result.producer[0] if result.producer is not None else -1
        for key, value in result.records:
            self.log.append(LogEntry(len(self.log), key, value, pid))
            self.shard.replay(key, value, loading=False, producer_id=pid, offset=len(self.log) - 1)
        if result.marker is not None:
            self.log.append(LogEntry(len(self.log), None, None, result.marker.producer_id, result.marker))
            self.shard.replay_marker(result.marker.producer_id, result.marker.commit, loading=False)
        if (result.records or result.marker is not None) and result.committed is not None:
            self.apply(result.committed(self.shard, self.now))
        self.effects.extend(result.effects)
        for key, answer in result.replies:
            if key in self.parked:
                self.parked.discard(key)
                self.answers[key] = answer
        return result.response

    def answer(self, response: Any) -> Any:
        """The answer of a request: its direct response, or what its parked key got."""
        if isinstance(response, Deferred):
            return self.answers.get(response.key)
        return response

    def fire(self, key: Hashable) -> None:
        due = self.timers.pop(key)
        self.now = max(self.now, due)
        self.apply(self.shard.on_timer(key, self.now))

    def advance(self, ms: int) -> None:
        """Let time pass, firing every timer that falls due, in due order."""
        end = self.now + ms
        while True:
            due = sorted((t, repr(k), k) for k, t in self.timers.items() if t <= end)
            if not due:
                break
            self.fire(due[0][2])
        self.now = end


def replay_into(shard: Any, log: list[LogEntry]) -> Any:
    """Build ``shard`` the way a new leader does: replaying the log from the start."""
    for entry in log:
        if entry.marker is not None:
            shard.replay_marker(entry.marker.producer_id, entry.marker.commit, loading=True)
        elif entry.key is not None:
            shard.replay(entry.key, entry.value, loading=True, producer_id=entry.producer_id,
                         offset=entry.offset)
    return shard
