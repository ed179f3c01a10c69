"""ProducerIdManager: hands out unique producer ids in blocks reserved in the metadata store.

A block is persisted before any id in it is used, so ids are never reused
after a restart (a restarted broker starts at the next block).
"""

from __future__ import annotations

from dmq.cluster.metadata import MetadataStore

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._next = 0
        self._end = 0

    def generate(self) -> int:
        if self._next >= self._end:
            self._next = self.store.allocate_producer_ids(BLOCK_SIZE)
            self._end = self._next + BLOCK_SIZE
        pid = self._next
        self._next += 1
        return pid
