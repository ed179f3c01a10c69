"""Builders for replication unit tests: a ReplicaManager on real logs and a
ZooKeeper stand-in for ISR writes that a test holds, releases or fails at will."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dmq.config import BrokerConfig, LogConfig
from dmq.record.records import encode_batch
from dmq.replication.partition import Partition
from dmq.replication.replica_manager import ReplicaManager
from dmq.storage.log_manager import LogManager


def records(n: int, value: bytes = b"v") -> bytes:
    """One record batch of ``n`` records."""
    return encode_batch([(None, value, [])] * n, timestamp=1)


def open_log_manager(path: Path, topic_configs: dict[str, str] | None = None,
                     config_for: Callable[[str], LogConfig] | None = None) -> LogManager:
    lm = LogManager(str(path), config_for or (
        lambda t: LogConfig(BrokerConfig(), dict(topic_configs or {}))))
    lm.load_logs(lambda t, p: "id")
    return lm


@dataclass
class IsrStore:
    """What ZooKeeper holds for one partition, and the leader's ISR writes to it.

    ``hold()`` makes writes wait (ZooKeeper paused) until ``release()``; ``fail()``
    makes them raise (connection lost). A write is a compare-and-set on
    ``version`` and lands when it is released, as the real znode write would.
    """

    isr: list[int]
    leader: int = 1
    leader_epoch: int = 0
    version: int = 0
    held: bool = False
    failing: bool = False
    lands_before_failing: bool = False
    writes: list[list[int]] = field(default_factory=list)
    # Called once a write has landed, before its answer returns: ZooKeeper can deliver the
    # data watch's event (the new state) ahead of the SetData reply.
    on_landed: Callable[[], None] | None = None
    resignations: list[int] = field(default_factory=list)  # leader epochs that asked to go
    _waiting: list[asyncio.Future[None]] = field(default_factory=list)

    def hold(self) -> None:
        self.held = True

    def release(self) -> None:
        self.held = False
        for fut in self._waiting:
            if not fut.done():
                fut.set_result(None)
        self._waiting.clear()

    def fail(self, failing: bool = True, landed: bool = False) -> None:
        """Make writes raise; with ``landed`` they apply first (the reply was lost)."""
        self.failing = failing
        self.lands_before_failing = landed

    def shrink_by_controller(self, broker_id: int) -> None:
        """The controller drops a broker it considers gone (same leader epoch, new version)."""
        self.isr = [r for r in self.isr if r != broker_id]
        self.version += 1

    async def write(self, partition: Partition, leader_epoch: int, isr: list[int],
                    expected_version: int) -> int | None:
        while self.held:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append(fut)
            await fut
        if self.failing and not self.lands_before_failing:
            raise ConnectionError("ZooKeeper connection lost")
        if expected_version != self.version or leader_epoch != self.leader_epoch:
            return None
        self.isr = list(isr)
        self.version += 1
        self.writes.append(list(isr))
        if self.on_landed is not None:
            self.on_landed()
        if self.failing:
            raise ConnectionError("ZooKeeper connection lost after the write")
        return self.version


    async def resign(self, partition: Partition, leader_epoch: int) -> None:
        """A leader asks the controller to replace it; fails as writes do."""
        if self.failing:
            raise ConnectionError("ZooKeeper connection lost")
        self.resignations.append(leader_epoch)


def replica_manager(path: Path, store: IsrStore | None = None,
                    eligible: Callable[[int], bool] = lambda broker_id: True,
                    topic_configs: dict[str, str] | None = None) -> ReplicaManager:
    """A ReplicaManager of broker 1 on real logs under ``path``."""
    lm = open_log_manager(path, topic_configs)
    return ReplicaManager(1, lm, store.write if store is not None else None,
                          replica_eligible=eligible,
                          resigner=store.resign if store is not None else None)


async def settle() -> None:
    """Let the ISR write tasks the ReplicaManager started run as far as they can."""
    for _ in range(5):
        await asyncio.sleep(0)
