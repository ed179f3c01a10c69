"""The share coordinator in a cluster: a BrokerSharePersister on a broker that does not
lead a key's ``__share_group_state`` partition reaches the one that does (WriteShareGroupState
and friends over the wire, found through ZooKeeper's metadata), and after SIGKILL of that
leader the state is read back from the new leader: nothing acknowledged is lost.

The persister runs in the test process as broker 99 (no replica of anything), on its own
ZooKeeper metadata cache, exactly as a broker's: nothing in a broker calls it yet (the
share-partition manager will)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.read_share_group_state.v0 import request as read_req
from support.cluster import Cluster
from support.coordinator import MemoryWriter

from dmq.client.wire import WireClient
from dmq.cluster.zookeeper import ZooKeeperMetadataStore
from dmq.protocol.codec import make
from dmq.share.broker_persister import BrokerSharePersister
from dmq.share.coordinator import SHARE_STATE_TOPIC, ShareCoordinator, ShareCoordinatorConfig
from dmq.share.persister import ReadStateResult, SharePartitionKey
from dmq.share.records import StateBatch

STATE_PARTITIONS = 3
pytestmark = pytest.mark.cluster_config(**{"share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS)})


def state_topic_in_sync(cluster: Cluster) -> bool:
    parts = cluster.metadata(SHARE_STATE_TOPIC).topics[SHARE_STATE_TOPIC].partitions
    return len(parts) == STATE_PARTITIONS and all(p.leader >= 0 and len(p.isrs) == 3 for p in parts.values())


def test_a_persister_off_the_leader_reaches_it_and_the_state_survives_the_leader_dying(cluster: Cluster) -> None:
    cluster.create_topic("shared", partitions=1, rf=3)
    with WireClient("127.0.0.1", cluster.brokers[1].port) as c:  # any 83-87 creates __share_group_state
        c.request(make(read_req.ReadShareGroupStateRequest, group_id="g", topics=()))
    cluster.wait_for(lambda: state_topic_in_sync(cluster), f"{SHARE_STATE_TOPIC} led and in sync")

    async def scenario() -> None:
        store = await ZooKeeperMetadataStore.connect(cluster.zk_connect, 99)
        try:
            await run(store)
        finally:
            await store.stop(5)

    async def run(store: Any) -> None:
        topic = store.topic("shared")
        assert topic is not None
        coordinator = ShareCoordinator(ShareCoordinatorConfig(STATE_PARTITIONS), MemoryWriter(), store)
        persister = BrokerSharePersister(99, store, coordinator, retry_timeout_ms=40_000)
        key = SharePartitionKey("g", topic.uuid, 0)
        leader = store.topic(SHARE_STATE_TOPIC).partitions[coordinator.partition_for(key)].leader
        assert leader in cluster.brokers
        batches = (StateBatch(0, 9, 2, 1), StateBatch(10, 14, 0, 3))
        assert await persister.initialize_state(key, 1, 0) == ErrorCode.none
        assert await persister.write_state(key, 1, 5, 0, batches, 10) == ErrorCode.none
        assert await persister.read_state(key, 5) == ReadStateResult(ErrorCode.none, 1, 0, batches)
        assert await persister.write_state(key, 1, 4, 0, ()) == ErrorCode.fenced_leader_epoch

        await asyncio.to_thread(cluster.brokers[leader].kill)  # SIGKILL the state partition's leader
        # The persister retries (connection refused, then NOT_COORDINATOR while the next
        # leader loads) until the metadata names the new leader and it answers.
        assert await persister.read_state(key, 5) == ReadStateResult(ErrorCode.none, 1, 0, batches)
        new_leader = store.topic(SHARE_STATE_TOPIC).partitions[coordinator.partition_for(key)].leader
        assert new_leader not in (leader, -1)
        summary = await persister.read_state_summary(key, 5)
        assert (summary.error, summary.leader_epoch, summary.delivery_complete_count) == (ErrorCode.none, 5, 10)
        assert await persister.write_state(key, 1, 4, 0, ()) == ErrorCode.fenced_leader_epoch
        assert await persister.write_state(key, 1, 6, 10, (StateBatch(10, 14, 2, 3),)) == ErrorCode.none
        assert await persister.read_state(key, 6) == ReadStateResult(ErrorCode.none, 1, 10,
                                                                      (StateBatch(10, 14, 2, 3),))
        assert await persister.delete_state(key) == ErrorCode.none
        assert await persister.read_state(key, 6) == ReadStateResult(ErrorCode.none)
        persister.close()

    asyncio.run(scenario())
