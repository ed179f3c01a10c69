"""A real ZooKeeper and several ``dmq server --zookeeper`` brokers on loopback, for cluster tests."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from support.broker import BrokerProcess, free_port
from support.signals import sigstop
from support.zookeeper import ZooKeeperProcess

# Short timeouts keep failover tests quick; the defaults are Kafka's.
FAST = {
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "200",
    "controlled.shutdown.retry.backoff.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "6",
    "leader.imbalance.check.interval.seconds": "3600",
}


class Cluster:
    def __init__(self, base: Path, size: int = 3, overrides: dict[str, str] | None = None,
                 per_broker: dict[int, dict[str, str]] | None = None) -> None:
        self.base = base
        self.zookeeper = ZooKeeperProcess(base / "zk")
        self.overrides = {**FAST, **(overrides or {})}
        self.brokers: dict[int, BrokerProcess] = {}
        for broker_id in range(1, size + 1):
            extra = {"broker.id": str(broker_id), "zookeeper.connect": self.zk_connect,
                     **self.overrides, **(per_broker or {}).get(broker_id, {})}
            self.brokers[broker_id] = BrokerProcess(base / f"broker-{broker_id}", extra,
                                                    port=free_port(),
                                                    log_path=base / f"broker-{broker_id}.log")

    @property
    def zk_connect(self) -> str:
        return f"{self.zookeeper.connect}/dmq"

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> Cluster:
        self.zookeeper.start()
        for b in self.brokers.values():
            b.start(timeout=60)
        self.wait_for(lambda: len(self.metadata().brokers) == len(self.brokers), "all brokers registered")
        return self

    def stop(self) -> None:
        for b in self.brokers.values():
            if b.proc is not None:
                try:
                    if b.paused:
                        os.kill(b.pid(), signal.SIGCONT)
                    b.kill()
                except Exception:  # noqa: BLE001 - best effort teardown
                    pass
        self.zookeeper.stop()

    def reachable_bootstrap(self, via: list[int] | None = None) -> str:
        """Brokers that are running and not paused: a SIGSTOPped broker still accepts TCP
        connections (the kernel does), so a client bootstrapping there waits for its timeouts."""
        return ",".join(b.bootstrap for i, b in self.brokers.items()
                        if b.alive() and not b.paused and (via is None or i in via))

    def admin(self, via: list[int] | None = None) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.reachable_bootstrap(via)})

    def metadata(self, topic: str | None = None, via: list[int] | None = None) -> Any:
        return self.admin(via).list_topics(topic, timeout=10)

    def partition(self, topic: str, index: int = 0, via: list[int] | None = None) -> Any:
        """A partition's metadata, as the brokers in ``via`` (default: every live one) see it."""
        return self.metadata(topic, via).topics[topic].partitions[index]

    def wait_for(self, cond: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                result = cond()
                if result:
                    return result
            except Exception as e:  # noqa: BLE001 - retried until the deadline
                last = e
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last})")

    def create_topic(self, name: str, partitions: int = 1, rf: int = 3,
                     config: dict[str, str] | None = None) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        deadline = time.monotonic() + 30
        while True:  # a broker of a just-started cluster may not have registered yet
            try:
                admin.create_topics([NewTopic(name, partitions, rf, config=config or {})])[name].result(30)
                break
            except KafkaException as e:
                if e.args[0].code() != KafkaError.INVALID_REPLICATION_FACTOR or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self.wait_for(lambda: all(
            len(p.isrs) == rf and p.leader >= 0
            for p in self.metadata(name).topics[name].partitions.values()), f"{name} fully in sync")

    def controller_id(self) -> int:
        return int(self.metadata().controller_id)

    def pause(self, broker_id: int) -> None:
        b = self.brokers[broker_id]
        sigstop(b.pid())
        b.paused = True

    def resume(self, broker_id: int) -> None:
        b = self.brokers[broker_id]
        os.kill(b.pid(), signal.SIGCONT)
        b.paused = False
