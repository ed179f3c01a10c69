"""ClusterBackend.reconcile: local replicas follow the published partition states."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from support.replication import open_log_manager

from dmq.cluster.backend import ClusterBackend
from dmq.cluster.metadata import EmbeddedMetadataStore, PartitionState
from dmq.config import BrokerConfig, LogConfig
from dmq.record.batch import validate_batches
from dmq.record.records import encode_batch
from dmq.replication.replica_manager import ReplicaManager
from dmq.storage.cleaner import LogCleaner
from dmq.storage.log_manager import LOG_START_FILE, read_checkpoint


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
    run(backend.reconcile_now())
    assert {tp: p.is_leader for tp, p in rm.partitions.items()} == {("t", 0): True, ("t", 1): True}
    assert rm.partitions[("t", 0)].log.config.overrides == {"retention.ms": "1000"}
    # The published state moves leadership of t-1 to broker 2 (version 3), alters a config.
    store.topics()["t"].partitions[1] = PartitionState([1, 2], 2, 1, [1, 2], 3)
    run(store.set_topic_configs("t", {"retention.ms": "2000"}))
    run(backend.reconcile_now())
    follower = rm.partitions[("t", 1)]
    assert not follower.is_leader and follower.leader_id == 2 and follower.leader_epoch == 1
    assert follower.partition_version == 3
    assert rm.partitions[("t", 0)].log.config.overrides == {"retention.ms": "2000"}
    # Reconciling again changes nothing (idempotent).
    run(backend.reconcile_now())
    assert rm.partitions[("t", 1)] is follower and follower.leader_id == 2
    # Deleted: the logs go.
    run(store.delete_topic("t"))
    run(backend.reconcile_now())
    assert rm.partitions == {} and not (tmp_path / "t-0").exists()
    assert led and all(partitions == {} for partitions in led)  # no offsets partition here
    rm.log_manager.shutdown()


def test_offsets_partitions_led_here_go_to_the_group_coordinators(tmp_path: Path) -> None:
    backend, store, rm, led = _backend(tmp_path)
    run(store.create_topic("__consumer_offsets", 3, 1, {"cleanup.policy": "compact"}))
    store.topics()["__consumer_offsets"].partitions[2] = PartitionState([1, 2], 2, 1, [1, 2])
    run(backend.reconcile_now())
    epochs = {p: s.leader_epoch for p, s in store.topics()["__consumer_offsets"].partitions.items()}
    assert led[-1] == {0: epochs[0], 1: epochs[1]}  # with the epochs: a new one reloads a shard
    rm.log_manager.shutdown()


class _SlowDisk:
    """Wraps ``LogManager.open_new``: each call waits until the test releases it (a disk
    that takes its time), and can be told to fail."""

    def __init__(self, backend: ClusterBackend) -> None:
        self.real = backend.log_manager.open_new
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail: set[int] = set()
        self.calls: list[tuple[str, int]] = []
        backend.log_manager.open_new = self  # type: ignore[method-assign]

    def __call__(self, topic: str, partition: int, topic_id: str, config: LogConfig) -> Any:
        self.calls.append((topic, partition))
        self.entered.set()
        if not self.release.wait(10):
            raise AssertionError("never released: the creation blocked the event loop")
        if partition in self.fail:
            raise OSError(28, "No space left on device")
        return self.real(topic, partition, topic_id, config)


async def _until(check: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_new_logs_are_created_off_the_event_loop(tmp_path: Path) -> None:
    backend, store, rm, _led = _backend(tmp_path)
    disk = _SlowDisk(backend)

    async def scenario() -> None:
        await store.create_topic("t", 3, 1, {})
        epoch = store.topics()["t"].partitions[0].leader_epoch
        reconciling = asyncio.create_task(backend.reconcile_now())
        await _until(disk.entered.is_set)
        ticks = 0
        # The loop runs on while the worker thread is stuck. A reconcile that created the
        # logs on the loop never gets here: the disk waits for a release only this
        # coroutine gives (it fails after 10 s, and the partitions stay missing).
        for _ in range(5):
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 5 and not reconciling.done() and rm.partitions == {}
        disk.release.set()
        await asyncio.wait_for(reconciling, 10)
        assert {tp: p.is_leader for tp, p in rm.partitions.items()} == {("t", i): True for i in range(3)}
        # The first leader-epoch entry was written with the log, off the loop.
        assert rm.partitions[("t", 0)].log.leader_epochs.entries == [(epoch, 0)]
        assert sorted(disk.calls) == [("t", 0), ("t", 1), ("t", 2)]

    run(scenario())
    rm.log_manager.shutdown()


def test_a_log_made_for_a_topic_deleted_meanwhile_is_removed(tmp_path: Path) -> None:
    backend, store, rm, _led = _backend(tmp_path)
    disk = _SlowDisk(backend)

    async def scenario() -> None:
        await store.create_topic("gone", 1, 1, {})
        backend.reconcile()
        await _until(disk.entered.is_set)
        await store.delete_topic("gone")
        disk.release.set()
        await backend.reconcile_now()
        assert rm.partitions == {} and rm.log_manager.get("gone", 0) is None
        await _until(lambda: not (tmp_path / "gone-0").exists())

    run(scenario())
    rm.log_manager.shutdown()


def test_a_log_that_cannot_be_created_is_tried_again_later(tmp_path: Path) -> None:
    backend, store, rm, _led = _backend(tmp_path)
    disk = _SlowDisk(backend)
    disk.fail = {1}
    disk.release.set()

    async def scenario() -> None:
        await store.create_topic("t", 2, 1, {})
        await backend.reconcile_now()
        assert set(rm.partitions) == {("t", 0)}  # the other one failed, and is not retried at once
        assert disk.calls.count(("t", 1)) == 1
        disk.fail = set()  # the disk has room again: the retry a second later creates it
        await _until(lambda: ("t", 1) in rm.partitions, timeout_s=5)
        assert disk.calls.count(("t", 1)) == 2

    run(scenario())
    rm.log_manager.shutdown()


def test_a_log_made_for_a_topic_created_again_meanwhile_is_made_anew(tmp_path: Path) -> None:
    backend, store, rm, _led = _backend(tmp_path)
    disk = _SlowDisk(backend)

    async def scenario() -> None:
        await store.create_topic("t", 1, 1, {})
        backend.reconcile()
        await _until(disk.entered.is_set)
        await store.delete_topic("t")
        again = await store.create_topic("t", 1, 1, {})
        disk.release.set()
        await backend.reconcile_now()
        await _until(lambda: ("t", 0) in rm.partitions)
        assert disk.calls == [("t", 0), ("t", 0)]  # the first log was for the old topic id
        metadata = (tmp_path / "t-0" / "partition.metadata").read_text()
        assert f"topic_id: {again.topic_id}" in metadata

    run(scenario())
    rm.log_manager.shutdown()


def test_deleted_topics_are_reported_also_when_created_again_before_a_reconcile(tmp_path: Path) -> None:
    """Every broker hears of a deleted topic (its group coordinator drops the topic's
    committed offsets), whether it hosted the topic or not, and also when the topic was
    created again under the same name before this broker reconciled (a new topic id)."""
    backend, store, rm, _ = _backend(tmp_path)
    deleted: list[frozenset[str]] = []
    backend.on_topics_deleted = deleted.append
    run(store.create_topic("a", 1, 1, {}))
    run(store.create_topic("b", 1, 1, {}))
    run(backend.reconcile_now())
    run(backend.reconcile_now())
    assert deleted == []  # the first reconcile notes the topics; nothing changed since
    run(store.delete_topic("a"))
    run(backend.reconcile_now())
    assert deleted == [frozenset({"a"})]
    run(store.delete_topic("b"))
    run(store.create_topic("b", 1, 1, {}))
    run(backend.reconcile_now())
    assert deleted == [frozenset({"a"}), frozenset({"b"})]
    rm.log_manager.shutdown()


def test_a_topic_created_again_does_not_take_the_deleted_ones_checkpointed_offsets(tmp_path: Path) -> None:
    """Through the reconcile: the deleted topic's log start offset leaves the checkpoint
    file before the worker thread creates the new topic's log."""
    backend, store, rm, _ = _backend(tmp_path)
    run(store.create_topic("t", 1, 1, {}))
    run(backend.reconcile_now())
    lg = rm.partitions[("t", 0)].log
    data = bytearray(encode_batch([(None, b"v", [])] * 10, timestamp=1))
    lg.append_as_leader(data, validate_batches(data, 10**6), 0)
    lg.delete_records_before(8)
    rm.log_manager.checkpoint()
    assert read_checkpoint(str(tmp_path / LOG_START_FILE)) == {("t", 0): 8}
    run(store.delete_topic("t"))
    run(backend.reconcile_now())
    run(store.create_topic("t", 1, 1, {}))
    run(backend.reconcile_now())
    assert rm.partitions[("t", 0)].log is not lg
    assert read_checkpoint(str(tmp_path / LOG_START_FILE)).get(("t", 0), 0) == 0
    rm.log_manager.shutdown()


def test_a_topic_created_again_before_a_reconcile_gets_a_new_log(tmp_path: Path) -> None:
    """Deleted and created again under the same name between two reconciles (a broker
    whose ZooKeeper session was lost meanwhile sees only the new topic id): the log of
    the earlier topic is deleted and a new one made, not reused for the new topic."""
    backend, store, rm, _ = _backend(tmp_path)
    run(store.create_topic("t", 1, 1, {}))
    run(backend.reconcile_now())
    old = rm.partitions[("t", 0)]
    data = bytearray(encode_batch([(None, b"old", [])] * 10, timestamp=1))
    old.log.append_as_leader(data, validate_batches(data, 10**6), 0)
    run(store.delete_topic("t"))
    run(store.create_topic("t", 1, 1, {}))
    new_id = store.topics()["t"].topic_id
    assert new_id != old.topic_id
    run(backend.reconcile_now())
    run(backend.reconcile_now())  # the new log is made on the worker, held by the next reconcile
    now = rm.partitions[("t", 0)]
    assert now.topic_id == new_id and now.log is not old.log
    assert now.log.log_end_offset == 0 and now.is_leader
    rm.log_manager.shutdown()
