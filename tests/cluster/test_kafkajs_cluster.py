"""KafkaJS through a leader's failover: an idempotent acks=all producer sending one record
at a time while the partition's leader is SIGKILLed loses nothing it was told was written
and writes nothing twice (KafkaJS retries NOT_LEADER_OR_FOLLOWER and lost connections on
its own, with the same sequence numbers)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

from support import kafkajs
from support.cluster import Cluster

RECORDS = 300


def test_an_idempotent_kafkajs_producer_loses_and_repeats_nothing_when_the_leader_dies(
        cluster: Cluster, tmp_path: Path) -> None:
    cluster.create_topic("kjs-failover", rf=3, config={"min.insync.replicas": "2"})
    leader = cluster.partition("kjs-failover").leader
    proc = subprocess.Popen(kafkajs.command("failover", cluster.bootstrap, "kjs-failover"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=kafkajs.environment(RECORDS=str(RECORDS)))
    acked: list[int] = []
    answer: list[str] = []
    stderr: list[str] = []

    def read() -> None:
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stdout:
            if line.startswith("acked "):
                acked.append(int(line.split()[1]))
            else:
                answer.append(line)
        stderr.append(proc.stderr.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while len(acked) < RECORDS // 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        if len(acked) < RECORDS // 3:
            proc.kill()
            reader.join(10)
            raise AssertionError(f"{len(acked)} acknowledged before the kill; {''.join(stderr)[-2000:]}")
        cluster.brokers[leader].kill()
        killed_at = len(acked)
        proc.wait(timeout=150)
        reader.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(stderr)[-2000:]
    assert killed_at < RECORDS, "the producer had finished before the leader was killed"
    assert acked == list(range(RECORDS))
    result = json.loads(answer[-1])
    # Every acknowledged record once, in the order sent, at consecutive offsets.
    assert result["values"] == [f"r{i}" for i in range(RECORDS)]
    assert result["offsets"] == list(range(RECORDS))
    new_leader = cluster.partition("kjs-failover").leader
    assert new_leader not in (-1, leader)
