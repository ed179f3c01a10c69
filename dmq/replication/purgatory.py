"""DelayedOperationPurgatory: requests that wait for a condition or a timeout.

A delayed operation (a long-polling Fetch, an ``acks=all`` Produce waiting for
the ISR) watches one or more keys (topic-partitions). Whoever changes what a
key's watchers wait for (an append, a high-watermark move) calls
``check_and_complete(key)``; every watcher of the key re-evaluates its
condition. Event-loop thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable


class DelayedOperationPurgatory:
    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[Hashable, list[asyncio.Future[None]]] = {}

    async def wait_until(self, keys: Iterable[Hashable], timeout_s: float,
                         is_satisfied: Callable[[], bool]) -> bool:
        """Wait until ``is_satisfied()`` holds (True) or ``timeout_s`` passes (False)."""
        if is_satisfied():
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        key_list = list(keys)
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return is_satisfied()
            fut: asyncio.Future[None] = loop.create_future()
            for key in key_list:
                self._watchers.setdefault(key, []).append(fut)
            timer = loop.call_later(remaining, _resolve, fut)
            try:
                await fut
            finally:
                timer.cancel()
                for key in key_list:
                    watchers = self._watchers.get(key)
                    if watchers is not None:
                        try:
                            watchers.remove(fut)
                        except ValueError:
                            pass
                        if not watchers:
                            del self._watchers[key]
            if is_satisfied():
                return True

    def check_and_complete(self, key: Hashable) -> None:
        watchers = self._watchers.pop(key, None)
        if watchers:
            for fut in watchers:
                _resolve(fut)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
