"""Consume-transform-produce with ``send_offsets_to_transaction`` across process
crashes (issue 11, acceptance): the worker (tests/support/ctp_worker.py, its own
OS process) is SIGKILLed mid-transaction and restarted with the same
transactional.id; and a SIGSTOPped worker, replaced by a new instance, wakes up
as a zombie whose later sends are fenced."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess

WORKER = Path(__file__).parent.parent / "support" / "ctp_worker.py"
FENCING = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


class Worker:
    """A ctp_worker.py process; its stdout lines are read by a thread so every wait is bounded."""

    def __init__(self, broker: BrokerProcess, log: Path, *args: str) -> None:
        self.log_path = log
        stderr = open(log, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen([sys.executable, str(WORKER), broker.bootstrap, *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        stderr.close()
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, out: IO[bytes]) -> None:
        for raw in out:
            self.lines.put(raw.decode().rstrip("\n"))
        self.lines.put(None)

    def expect(self, prefix: str, seconds: float) -> str:
        """The first line starting with ``prefix`` (other lines are kept in ``seen``)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"worker exited ({self.proc.wait(10)}) before {prefix!r}; "
                                     f"stdout {self.seen[-5:]}; stderr {self.log_path.read_text()[-2000:]}")
            self.seen.append(line)
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        raise AssertionError(f"no {prefix!r} from the worker within {seconds}s; stdout {self.seen[-5:]}; "
                             f"stderr {self.log_path.read_text()[-2000:]}")

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped process dies of SIGKILL too, but be plain
            self.proc.kill()
        self.proc.wait(10)


def _fill(broker: BrokerProcess, source: str, sink: str, partitions: int, per_partition: int) -> dict[int, list[str]]:
    """Create both topics and write ``per_partition`` records with unique ids to each source partition."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in (source, sink)]).values():
        future.result(15)
    ids = {p: [f"p{p}-{i:05d}" for i in range(per_partition)] for p in range(partitions)}
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for p, values in ids.items():
        for v in values:
            plain.produce(source, key=v.encode(), value=v.encode(), partition=p)
    assert plain.flush(30) == 0
    return ids


def _read(broker: BrokerProcess, topic: str, partitions: int, isolation: str,
          seconds: float = 30) -> dict[int, list[tuple[str, str, int]]]:
    """Every record of ``topic`` up to its end for ``isolation``, per partition, as (id, tag, txn)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"read-{topic}-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: dict[int, list[tuple[str, str, int]]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + seconds
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{topic} not read to its end in {seconds}s: {at_end}"
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    at_end.add(msg.partition())
                    continue
                at_end.discard(msg.partition())
                value, tag, txn = msg.value().decode().split("|")
                assert msg.key().decode() == value
                got[msg.partition()].append((value, tag, int(txn)))
    finally:
        consumer.close()
    return got


def _committed(broker: BrokerProcess, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "isolation.level": "read_committed"})
    try:
        return {tp.partition: tp.offset for tp in
                consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)}
    finally:
        consumer.close()


def _assert_exactly_once(output: dict[int, list[tuple[str, str, int]]], ids: dict[int, list[str]]) -> None:
    """Every input id once, in the input's order, on the input's partition."""
    for p, expected in ids.items():
        got = [value for value, _, _ in output[p]]
        dupes = [v for v, n in Counter(got).items() if n > 1]
        missing = set(expected) - set(got)
        assert not dupes and not missing, (p, dupes[:5], len(dupes), sorted(missing)[:5], len(missing))
        assert got == expected, p


def test_worker_sigkilled_mid_transaction_then_restarted_outputs_each_input_once(
        broker: BrokerProcess, tmp_path: Path) -> None:
    source, sink, group, txn_id = "crash-in", "crash-out", "crash-ctp", "crash-ctp"
    partitions, per_partition = 3, 2000
    ids = _fill(broker, source, sink, partitions, per_partition)
    first = Worker(broker, tmp_path / "first.log", source, sink, group, txn_id, "first", "--pause-at", "4")
    second: Worker | None = None
    try:
        mid = json.loads(first.expect("MID", 60))
        assert mid["txn"] == 4 and mid["ids"]
        first.signal(signal.SIGKILL)  # produced, offsets sent, not committed
        assert first.proc.wait(10) == -signal.SIGKILL
        second = Worker(broker, tmp_path / "second.log", source, sink, group, txn_id, "second")
        second.expect("DONE", 120)
        assert second.proc.wait(10) == 0
    finally:
        first.close()
        if second is not None:
            second.close()

    committed = _read(broker, sink, partitions, "read_committed")
    _assert_exactly_once(committed, ids)
    tags = Counter((tag, txn) for records in committed.values() for _, tag, txn in records)
    assert {("first", n) for n in range(1, 4)} <= set(tags), tags
    assert not [k for k in tags if k[0] == "first" and k[1] >= 4], tags  # the killed transaction is aborted
    assert _committed(broker, group, source, partitions) == {p: per_partition for p in range(partitions)}
    # A read_uncommitted reader sees the aborted transaction's records: the kill was mid-transaction.
    uncommitted = _read(broker, sink, partitions, "read_uncommitted")
    aborted = [value for records in uncommitted.values() for value, tag, txn in records
               if (tag, txn) == ("first", 4)]
    assert sorted(aborted) == sorted(mid["ids"])


@pytest.mark.parametrize("resume", ["send", "commit"])
def test_sigstopped_worker_is_fenced_by_its_replacement(broker: BrokerProcess, tmp_path: Path, resume: str) -> None:
    """The zombie wakes up and sends more records then commits, or only commits."""
    source, sink, group, txn_id = (f"zombie-{resume}-in", f"zombie-{resume}-out", f"zombie-{resume}",
                                   f"zombie-{resume}")
    partitions, per_partition = 3, 500
    ids = _fill(broker, source, sink, partitions, per_partition)
    zombie = Worker(broker, tmp_path / "zombie.log", source, sink, group, txn_id, "zombie",
                    "--pause-at", "2", "--batch", "100", "--resume", resume)
    fresh: Worker | None = None
    try:
        mid = json.loads(zombie.expect("MID", 60))
        zombie.signal(signal.SIGSTOP)  # mid-transaction, and alive
        fresh = Worker(broker, tmp_path / "fresh.log", source, sink, group, txn_id, "fresh")
        fresh.expect("DONE", 120)
        assert fresh.proc.wait(10) == 0
        zombie.signal(signal.SIGCONT)
        zombie.tell("resume")
        errors = json.loads(zombie.expect("FENCED", 60))
        assert zombie.proc.wait(30) == 3
    finally:
        zombie.close()
        if fresh is not None:
            fresh.close()

    # The broker refuses the old epoch (Produce: INVALID_PRODUCER_EPOCH, EndTxn: PRODUCER_FENCED);
    # librdkafka reports either as its fatal _FENCED.
    assert [e["source"] for e in errors] == (["send", "commit"] if resume == "send" else ["commit"]), errors
    assert all(e["code"] in FENCING and e["fatal"] for e in errors), errors
    committed = _read(broker, sink, partitions, "read_committed")
    _assert_exactly_once(committed, ids)
    tags = {(tag, txn) for records in committed.values() for _, tag, txn in records}
    assert ("zombie", 1) in tags and ("fresh", 1) in tags, tags
    assert not [k for k in tags if k[0].startswith("zombie") and k[1] >= 2], tags
    assert _committed(broker, group, source, partitions) == {p: per_partition for p in range(partitions)}
    uncommitted = _read(broker, sink, partitions, "read_uncommitted")
    paused = [value for records in uncommitted.values() for value, tag, txn in records
              if (tag, txn) == ("zombie", 2)]
    assert sorted(paused) == sorted(mid["ids"])
