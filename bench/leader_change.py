#!/usr/bin/env python3
"""How long brokers stop answering while many partitions change leader.

On loopback: a fresh Debian ZooKeeper and three ``dmq server`` brokers; one topic
with ``--partitions`` partitions, RF=3; a producer writing to every partition
(acks=all, ``--rate`` records/s). Then broker 1 is SIGKILLed: once its ZooKeeper
session expires, brokers 2 and 3 lead its partitions and follow each other in
the new epochs. Meanwhile a probe per surviving broker sends ApiVersions
requests one after the other over one connection and times each answer: a
broker's event loop that is busy (a leadership change done on it, with a file
written and fsynced per partition) answers late.

Prints, per repeat and surviving broker, the probe's p50, p99 and largest answer
time from the kill to ``--window`` seconds after it, and the time from the kill
until the producer had every partition acknowledged again; then the medians
over the repeats and one JSON line. Every loop is bounded; the processes are
killed in ``finally`` blocks.

    .venv/bin/python bench/leader_change.py --partitions 300 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import Processes, bootstrap_of, start_cluster, stop_on_sigterm  # noqa: E402

SESSION_TIMEOUT_MS = 6000


class Probe:
    """ApiVersions v0 requests to one broker, one at a time; (sent at, answer time) of each."""

    def __init__(self, port: int, deadline: float) -> None:
        self.port = port
        self.deadline = deadline
        self.samples: list[tuple[float, float]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        client = b"probe"
        correlation = 0
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while time.monotonic() < self.deadline:
                correlation += 1
                body = struct.pack(">hhih", 18, 0, correlation, len(client)) + client
                sent = time.monotonic()
                s.sendall(struct.pack(">i", len(body)) + body)
                size = struct.unpack(">i", _read(s, 4))[0]
                _read(s, size)
                self.samples.append((sent, time.monotonic() - sent))
                time.sleep(0.001)


def _read(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the probe's connection")
        out += chunk
    return bytes(out)


class Writer:
    """acks=all records to every partition in turn; the last acknowledgement time of each."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int) -> None:
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                           "message.timeout.ms": 120000, "topic.metadata.refresh.interval.ms": 1000,
                           "log_level": 0})
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.acked: dict[int, float] = {}
        self.mark = float("inf")
        self.first_after_mark: dict[int, float] = {}  # partition -> its first acknowledgement after mark
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            now = time.monotonic()
            self.acked[msg.partition()] = now
            if now > self.mark:
                self.first_after_mark.setdefault(msg.partition(), now)

    def _run(self) -> None:
        i = 0
        gap = 1 / self.rate
        while not self.stop.is_set():
            try:
                self.p.produce(self.topic, b"x" * 100, partition=i % self.partitions, on_delivery=self._delivered)
            except BufferError:
                pass
            i += 1
            self.p.poll(0)
            time.sleep(gap)
        self.p.flush(30)


def one_run(work: Path, partitions: int, rate: int, window: float) -> dict[str, Any]:
    procs = Processes()
    try:
        brokers = start_cluster(procs, work, [f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}"])
        bootstrap = bootstrap_of(list(brokers.values()))
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        admin.create_topics([NewTopic("moving", partitions, 3)])["moving"].result(120)
        writer = Writer(bootstrap, "moving", partitions, rate)
        writer.thread.start()
        settle = time.monotonic() + 120
        while len(writer.acked) < partitions and time.monotonic() < settle:
            time.sleep(0.2)
        if len(writer.acked) < partitions:
            raise RuntimeError(f"only {len(writer.acked)} of {partitions} partitions took a record")
        killed_at = writer.mark = time.monotonic()
        probes = {i: Probe(brokers[i].port, killed_at + window) for i in (2, 3)}
        for probe in probes.values():
            probe.thread.start()
        assert brokers[1].proc is not None
        brokers[1].proc.kill()
        for probe in probes.values():
            probe.thread.join(window + 60)
        writer.stop.set()
        writer.thread.join(60)
        # When the last partition to recover had a record acknowledged after the kill.
        after = writer.first_after_mark
        recovered = (max(after.values()) - killed_at) if len(after) == partitions else None
        out: dict[str, Any] = {"partitions": partitions, "rate": rate,
                               "all_partitions_acked_again_s": None if recovered is None else round(recovered, 2)}
        for i, probe in probes.items():
            rtts = sorted(r for _, r in probe.samples)
            out[f"broker_{i}"] = {"answers": len(rtts), "p50_ms": round(rtts[len(rtts) // 2] * 1000, 2),
                                  "p99_ms": round(rtts[int(len(rtts) * 0.99)] * 1000, 2),
                                  "max_ms": round(rtts[-1] * 1000, 1)}
        return out
    finally:
        procs.stop_all()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=300)
    ap.add_argument("--rate", type=int, default=2000, help="records/s over all partitions")
    ap.add_argument("--window", type=float, default=20.0, help="seconds probed after the kill")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    stop_on_sigterm()
    runs = []
    for repeat in range(args.repeats):
        work = Path(tempfile.mkdtemp(prefix="dmq-leader-change-"))
        try:
            row = one_run(work, args.partitions, args.rate, args.window)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        row["repeat"] = repeat
        print(json.dumps(row), flush=True)
        runs.append(row)
    print(f"\n{args.partitions} partitions, RF=3, broker 1 SIGKILLed; ApiVersions answer times on the "
          f"survivors in the {args.window:g} s after the kill (medians of {len(runs)} runs)")
    print(f"{'broker':>6}  {'p50 ms':>7}  {'p99 ms':>7}  {'max ms':>8}")
    for i in (2, 3):
        rows = [r[f"broker_{i}"] for r in runs]
        print(f"{i:>6}  {statistics.median(r['p50_ms'] for r in rows):>7.2f}  "
              f"{statistics.median(r['p99_ms'] for r in rows):>7.2f}  "
              f"{statistics.median(r['max_ms'] for r in rows):>8.1f}")
    recovered = [r["all_partitions_acked_again_s"] for r in runs if r["all_partitions_acked_again_s"] is not None]
    if recovered:
        print(f"every partition acknowledged again after the kill: median {statistics.median(recovered):.2f} s "
              f"({len(recovered)}/{len(runs)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
