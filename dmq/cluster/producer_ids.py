"""ProducerIdManager: hands out unique producer ids in blocks reserved in the metadata store.

A block is persisted before any id in it is used, so ids are never reused
after a restart (a restarted broker starts at the next block). Event loop
only; reserving a block may wait on the store (and raise its MetadataError).
"""

from __future__ import annotations

import asyncio

from dmq.cluster.metadata import MetadataStore

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def generate(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                start = await self.store.allocate_producer_ids(BLOCK_SIZE)
                self._next, self._end = start, start + BLOCK_SIZE
            pid = self._next
            self._next += 1
            return pid
