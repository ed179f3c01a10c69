"""The single-broker metadata store: async writes, each durable before it is visible."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from dmq.cluster.metadata import EmbeddedMetadataStore, MetadataError


def test_concurrent_writes_all_reach_the_file(tmp_path: Path) -> None:
    async def body() -> None:
        s = EmbeddedMetadataStore(str(tmp_path), 1)
        await asyncio.gather(*(s.create_topic(f"t{i}", 2, 1, {"retention.ms": str(i)})
                               for i in range(8)))
        assert await s.allocate_producer_ids(10) == 0
        await s.create_partitions("t0", 4)
        await s.set_topic_configs("t1", {"cleanup.policy": "compact"})
        await s.set_broker_configs("<default>", {"log.retention.ms": "5"})
        await s.delete_topic("t2")
        with pytest.raises(MetadataError):
            await s.create_topic("t3", 1, 1, {})
        reopened = EmbeddedMetadataStore(str(tmp_path), 1)
        assert set(reopened.topics()) == {f"t{i}" for i in range(8)} - {"t2"}
        assert len(reopened.topics()["t0"].partitions) == 4
        assert reopened.topics()["t1"].configs == {"cleanup.policy": "compact"}
        assert reopened.broker_configs("<default>") == {"log.retention.ms": "5"}
        assert await reopened.allocate_producer_ids(1) == 10

    asyncio.run(body())


def test_a_cancelled_write_still_completes_and_does_not_race_the_next(tmp_path: Path) -> None:
    """A client that disconnects cancels its request's task; the store's file write runs in a
    thread that cannot stop. The write must finish under the lock (the next write once raced
    it on the temporary file: FileNotFoundError) and its in-memory update must not be lost."""
    async def scenario() -> None:
        store = EmbeddedMetadataStore(str(tmp_path), 0)
        first = asyncio.ensure_future(store.create_topic("a", 1, 1, {}))
        await asyncio.sleep(0)  # it holds the lock; its write runs in a thread
        first.cancel()
        await store.create_topic("b", 1, 1, {})
        with contextlib.suppress(asyncio.CancelledError):
            await first
        assert store.topic("a") is not None and store.topic("b") is not None
    asyncio.run(scenario())
    reopened = EmbeddedMetadataStore(str(tmp_path), 0)
    assert reopened.topic("a") is not None and reopened.topic("b") is not None
