"""DelayedOperationPurgatory: requests that wait for a condition or a timeout.

A delayed operation (a long-polling Fetch, an ``acks=all`` Produce waiting for
the ISR) watches one or more keys (topic-partitions). Whoever changes what a
key's watchers wait for (an append, a high-watermark move) calls
``check_and_complete(key)``, which evaluates each watcher's condition at once
and completes the satisfied ones; the others stay registered, as in Kafka's
purgatory (``tryComplete``). An operation registers once, with one timer, for
its whole wait. Event-loop thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable


class _Operation:
    __slots__ = ("is_satisfied", "future")

    def __init__(self, is_satisfied: Callable[[], bool], future: asyncio.Future[bool]) -> None:
        self.is_satisfied = is_satisfied
        self.future = future


class DelayedOperationPurgatory:
    """Invariant: an operation is in the list of each of its keys from registration until
    its waiter returns; a completed one may linger in other keys' lists until then (it is
    skipped)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[Hashable, list[_Operation]] = {}

    async def wait_until(self, keys: Iterable[Hashable], timeout_s: float,
                         is_satisfied: Callable[[], bool]) -> bool:
        """Wait until ``is_satisfied()`` holds (True) or ``timeout_s`` passes (False)."""
        if is_satisfied():
            return True
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        op = _Operation(is_satisfied, loop.create_future())
        key_list = list(keys)
        for key in key_list:
            self._watchers.setdefault(key, []).append(op)
        timer = loop.call_later(timeout_s, _resolve, op.future, False)
        try:
            if await op.future:
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

    def check_and_complete(self, key: Hashable) -> None:
        ops = self._watchers.get(key)
        if not ops:
            return
        for op in ops:
            if op.future.done():
                continue
            try:
                satisfied = op.is_satisfied()
            except Exception:  # noqa: BLE001 - let the waiter see it: it re-checks and raises
                satisfied = True
            if satisfied:
                op.future.set_result(True)


def _resolve(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():
        fut.set_result(value)
