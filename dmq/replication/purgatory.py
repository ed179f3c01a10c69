"""DelayedOperationPurgatory: requests that wait for a condition or a timeout.

A delayed operation (a long-polling Fetch, an ``acks=all`` Produce waiting for
the ISR) watches one or more keys (topic-partitions). Whoever changes what a
key's watchers wait for (an append, a high-watermark move) calls
``check_and_complete(key)``, which evaluates each watcher's condition at once
and completes the satisfied ones; the others stay registered, as in Kafka's
purgatory (``tryComplete``). An operation registers once, with one timer, for
its whole wait. Event-loop thread only.

Completion in the caller, as Kafka's ``onComplete``: an operation is an
asyncio future, and a waiter in an asyncio task is woken the usual way (a
callback through the loop's ready queue). A waiter that a connection drives
itself (``dmq.server.network``: Produce and Fetch run outside any task) sets
``DelayedOperation.resume`` when it sees the operation it waits on; completing
the operation then calls it at once, so the waiting request goes on — writes
its answer — inside ``check_and_complete``, in the same turn of the loop as
the append or the follower's fetch that satisfied it. A resumed request only
reads state and writes its own answer; it never starts another request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable

log = logging.getLogger("dmq.purgatory")


class DelayedOperation(asyncio.Future):  # type: ignore[type-arg]
    """What a waiter awaits: done with True when satisfied, False when timed out.

    ``resume`` (None for a waiter in a task) is called once the operation is done
    by whoever completed it."""

    __slots__ = ("is_satisfied", "resume")

    def __init__(self, is_satisfied: Callable[[], bool], loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self.is_satisfied = is_satisfied
        self.resume: Callable[[], None] | None = None


def _complete(op: DelayedOperation, value: bool) -> None:
    if op.done():
        return
    op.set_result(value)
    resume = op.resume
    if resume is not None:
        op.resume = None
        try:
            resume()
        except Exception:  # a driver reports its request's errors itself; this is a bug
            log.exception("resuming a delayed operation failed")


class DelayedOperationPurgatory:
    """Invariant: an operation is in the list of each of its keys from registration until
    its waiter returns; a completed one may linger in other keys' lists until then (it is
    skipped)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}

    async def wait_until(self, keys: Iterable[Hashable], timeout_s: float,
                         is_satisfied: Callable[[], bool]) -> bool:
        """Wait until ``is_satisfied()`` holds (True) or ``timeout_s`` passes (False)."""
        if is_satisfied():
            return True
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        op = DelayedOperation(is_satisfied, loop)
        key_list = list(keys)
        for key in key_list:
            self._watchers.setdefault(key, []).append(op)
        timer = loop.call_later(timeout_s, _complete, op, False)
        try:
            if await op:
                return True
            return is_satisfied()  # timed out: one last look
        finally:
            timer.cancel()
            for key in key_list:
                ops = self._watchers.get(key)
                if ops is not None:
                    try:
                        ops.remove(op)
                    except ValueError:
                        pass
                    if not ops:
                        del self._watchers[key]

    def sizes(self) -> tuple[int, int]:
        """(operations waiting, watcher entries): Kafka's NumDelayedOperations and
        PurgatorySize, counted when asked (for metrics) rather than kept on the hot path."""
        entries = 0
        waiting: set[int] = set()
        for ops in self._watchers.values():
            for op in ops:
                if not op.done():
                    entries += 1
                    waiting.add(id(op))
        return len(waiting), entries

    def check_and_complete(self, key: Hashable) -> None:
        ops = self._watchers.get(key)
        if not ops:
            return
        satisfied = []
        for op in ops:
            if op.done():
                continue
            try:
                if op.is_satisfied():
                    satisfied.append(op)
            except Exception:  # noqa: BLE001 - let the waiter see it: it re-checks and raises
                satisfied.append(op)
        # Completed after the scan: a resumed waiter leaves the lists as it returns.
        for op in satisfied:
            _complete(op, True)
