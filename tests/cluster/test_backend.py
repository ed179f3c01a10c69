"""ClusterBackend.reconcile: local replicas follow the published partition states."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from support.replication import open_log_manager

from dmq.cluster.backend import ClusterBackend
from dmq.cluster.metadata import EmbeddedMetadataStore, PartitionState
from dmq.config import BrokerConfig, LogConfig
from dmq.replication.replica_manager import ReplicaManager
from dmq.storage.cleaner import LogCleaner


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """The store's writes are async; these tests drive them one at a time."""
    return asyncio.run(coro)


def _backend(path: Path) -> tuple[ClusterBackend, EmbeddedMetadataStore, ReplicaManager, list[dict[int, int]]]:
    store = EmbeddedMetadataStore(str(path), 1)

    def config_for(topic: str) -> LogConfig:
        meta = store.topic(topic)
        return LogConfig(BrokerConfig(), meta.configs if meta else {})

    lm = open_log_manager(path, config_for=config_for)
    backend = ClusterBackend(1, store, lm, LogCleaner(str(path)))
    rm = ReplicaManager(1, lm, None, backend.partition_exists, backend.replica_eligible)
    led: list[dict[int, int]] = []
    backend.attach(rm, None, lambda topic, partitions: led.append(partitions)
                   if topic == "__consumer_offsets" else None)
    return backend, store, rm, led


def test_reconcile_leads_follows_and_removes_as_published(tmp_path: Path) -> None:
    backend, store, rm, led = _backend(tmp_path)
    run(store.create_topic("t", 2, 1, {"retention.ms": "1000"}))
    backend.reconcile()
    assert {tp: p.is_leader for tp, p in rm.partitions.items()} == {("t", 0): True, ("t", 1): True}
    assert rm.partitions[("t", 0)].log.config.overrides == {"retention.ms": "1000"}
    # The published state moves leadership of t-1 to broker 2 (version 3), alters a config.
    store.topics()["t"].partitions[1] = PartitionState([1, 2], 2, 1, [1, 2], 3)
    run(store.set_topic_configs("t", {"retention.ms": "2000"}))
    backend.reconcile()
    follower = rm.partitions[("t", 1)]
    assert not follower.is_leader and follower.leader_id == 2 and follower.leader_epoch == 1
    assert follower.partition_version == 3
    assert rm.partitions[("t", 0)].log.config.overrides == {"retention.ms": "2000"}
    # Reconciling again changes nothing (idempotent).
    backend.reconcile()
    assert rm.partitions[("t", 1)] is follower and follower.leader_id == 2
    # Deleted: the logs go.
    run(store.delete_topic("t"))
    backend.reconcile()
    assert rm.partitions == {} and not (tmp_path / "t-0").exists()
    assert led == [{}, {}, {}, {}]
    rm.log_manager.shutdown()


def test_offsets_partitions_led_here_go_to_the_group_coordinators(tmp_path: Path) -> None:
    backend, store, rm, led = _backend(tmp_path)
    run(store.create_topic("__consumer_offsets", 3, 1, {"cleanup.policy": "compact"}))
    store.topics()["__consumer_offsets"].partitions[2] = PartitionState([1, 2], 2, 1, [1, 2])
    backend.reconcile()
    epochs = {p: s.leader_epoch for p, s in store.topics()["__consumer_offsets"].partitions.items()}
    assert led[-1] == {0: epochs[0], 1: epochs[1]}  # with the epochs: a new one reloads a shard
    rm.log_manager.shutdown()
