"""BrokerSharePersister on the embedded (single-node) metadata store: local calls where
this broker leads the key's state partition, retries of NOT_COORDINATOR until leadership
arrives, and a bounded wait that answers the error (an unreachable leader included)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from kio.schema.errors import ErrorCode
from support.broker import free_port
from support.coordinator import MemoryWriter

from dmq.cluster.metadata import BrokerInfo, EmbeddedMetadataStore
from dmq.share.broker_persister import BrokerSharePersister
from dmq.share.coordinator import SHARE_STATE_TOPIC, ShareCoordinator, ShareCoordinatorConfig
from dmq.share.persister import ReadStateResult, SharePartitionKey
from dmq.share.records import StateBatch

KEY = SharePartitionKey("g", uuid.UUID(int=1), 0)
CONFIG = ShareCoordinatorConfig(num_partitions=3)


async def store(tmp_path: Path, port: int = 9092) -> EmbeddedMetadataStore:
    s = EmbeddedMetadataStore(str(tmp_path), 1)
    await s.register_broker(BrokerInfo(1, "127.0.0.1", port, None))
    await s.create_topic(SHARE_STATE_TOPIC, 3, 1, {})
    return s


def test_local_calls_where_this_broker_leads_the_state_partition(tmp_path: Path) -> None:
    async def scenario() -> None:
        s = await store(tmp_path)
        coordinator = ShareCoordinator(CONFIG, MemoryWriter(), s)
        coordinator.set_led({p: 0 for p in range(3)})
        persister = BrokerSharePersister(1, s, coordinator)
        batches = (StateBatch(0, 3, 2, 1),)
        assert await persister.initialize_state(KEY, 0, 0) == ErrorCode.none
        assert await persister.write_state(KEY, 0, 1, 0, batches, 4) == ErrorCode.none
        assert await persister.read_state(KEY, 1) == ReadStateResult(ErrorCode.none, 0, 0, batches)
        assert (await persister.read_state_summary(KEY, 1)).delivery_complete_count == 4
        assert await persister.write_state(KEY, 0, 0, 0, ()) == ErrorCode.fenced_leader_epoch  # not retried
        assert await persister.delete_state(KEY) == ErrorCode.none

    asyncio.run(scenario())


def test_not_coordinator_is_retried_until_the_shard_loads(tmp_path: Path) -> None:
    async def scenario() -> None:
        s = await store(tmp_path)
        coordinator = ShareCoordinator(CONFIG, MemoryWriter(), s)
        persister = BrokerSharePersister(1, s, coordinator, retry_timeout_ms=5000, retry_backoff_ms=20)
        asyncio.get_running_loop().call_later(0.2, coordinator.set_led, {p: 0 for p in range(3)})
        assert await persister.initialize_state(KEY, 0, 0) == ErrorCode.none

    asyncio.run(scenario())


def test_retries_are_bounded_and_answer_the_last_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        s = await store(tmp_path, port=free_port())  # broker 1 leads, and nothing listens there
        persister = BrokerSharePersister(1, s, ShareCoordinator(CONFIG, MemoryWriter(), s),
                                         retry_timeout_ms=300, retry_backoff_ms=20)
        started = time.monotonic()
        assert (await persister.read_state(KEY, 0)).error == ErrorCode.not_coordinator  # never loaded
        assert 0.3 <= time.monotonic() - started < 3
        remote = BrokerSharePersister(2, s, ShareCoordinator(CONFIG, MemoryWriter(), s),
                                      retry_timeout_ms=300, retry_backoff_ms=20, request_timeout_s=1)
        started = time.monotonic()
        assert await remote.write_state(KEY, 0, 0, 0, ()) == ErrorCode.coordinator_not_available
        assert 0.3 <= time.monotonic() - started < 3
        remote.close()

    asyncio.run(scenario())
