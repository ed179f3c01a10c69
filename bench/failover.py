#!/usr/bin/env python3
"""Failover time: leader SIGKILL -> first acknowledged acks=all record written after the kill.

For each ``--session-timeouts`` value (ms) and ``--repeats`` times, on loopback:
a fresh Debian ZooKeeper and three ``dmq server`` brokers with
``zookeeper.session.timeout.ms`` set to that value; a topic with one partition,
RF=3, min.insync.replicas=2; a steady acks=all idempotent producer on
partition 0; SIGKILL of partition 0's leader; the time from the kill to the
first acknowledgement of a record *produced after the kill*.

Targets (the acceptance criterion): median <= session timeout + 1 s and
max <= session timeout + 3 s. Prints a JSON line per run, a table, and with
``--timeline`` the surviving brokers' log lines around the kill (seconds
relative to it) so the time can be attributed: session expiry seen,
controller election write, leader reconcile, client metadata refresh.
Every loop is bounded; processes are killed in finally blocks.

    python bench/failover.py --repeats 5 --session-timeouts 6000,3000
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import Processes, broker, stop_on_sigterm, zookeeper  # noqa: E402

TIMELINE = re.compile(r"session|expir|controller|elect|leader|isr|registered|broker.*(dead|gone|lost)", re.I)
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[.,]\d+)")


class SteadyProducer:
    """acks=all records on partition 0 at ``rate``/s; remembers when each was produced and acked."""

    def __init__(self, bootstrap: str, topic: str, rate: int = 200) -> None:
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                           "enable.idempotence": True, "message.timeout.ms": 60000,
                           "topic.metadata.refresh.interval.ms": 1000, "log_level": 0})
        self.topic, self.rate = topic, rate
        self.acks: list[tuple[float, float]] = []  # (produced_at, acked_at)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.acks.append((float(msg.value().decode()), time.monotonic()))

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set() and n < 100_000:
            try:
                self.p.produce(self.topic, repr(time.monotonic()).encode(), partition=0,
                               on_delivery=self._delivered)
                n += 1
            except BufferError:
                pass
            self.p.poll(0)
            time.sleep(1 / self.rate)

    def first_ack_after(self, t: float) -> float | None:
        later = [acked for produced, acked in list(self.acks) if produced > t]
        return min(later) if later else None


def timeline(work: Path, killed: int, kill_wall: float, window: float) -> list[str]:
    out = []
    for i in (1, 2, 3):
        if i == killed:
            continue
        for line in (work / f"broker-{i}.log").read_text(errors="replace").splitlines():
            m = STAMP.match(line)
            if not m or not TIMELINE.search(line):
                continue
            try:
                ts = datetime.fromisoformat(m.group(1).replace(",", ".")).timestamp()
            except ValueError:
                continue
            rel = ts - kill_wall
            if -0.5 <= rel <= window:
                out.append(f"  +{rel:6.2f}s  broker {i}: {line[m.end():].strip()[:160]}")
    return sorted(out, key=lambda s: float(s.split("s", 1)[0].strip().lstrip("+")))


def one_run(session_ms: int, extra: list[str], show_timeline: bool, keep: bool) -> float:
    work = Path(tempfile.mkdtemp(prefix="dmq-failover-"))
    procs = Processes()
    prod: SteadyProducer | None = None
    try:
        zk = procs.start(zookeeper(work))
        overrides = [f"zookeeper.session.timeout.ms={session_ms}",
                     "leader.imbalance.check.interval.seconds=3600", *extra]
        brokers = {i: procs.start(broker(work, i, f"127.0.0.1:{zk.port}/dmq", overrides))
                   for i in (1, 2, 3)}
        bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        admin.create_topics([NewTopic("failover", 1, 3, config={"min.insync.replicas": "2"})])["failover"].result(30)
        deadline = time.monotonic() + 30
        leader = -1
        while time.monotonic() < deadline:
            part = admin.list_topics("failover", timeout=10).topics["failover"].partitions[0]
            if part.leader > 0 and len(part.isrs) == 3:
                leader = int(part.leader)
                break
            time.sleep(0.2)
        assert leader > 0, "partition 0 never got a leader with a full ISR"
        prod = SteadyProducer(bootstrap, "failover")
        prod.thread.start()
        deadline = time.monotonic() + 30
        while len(prod.acks) < 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        kill_wall = time.time()
        kill_at = time.monotonic()
        brokers[leader].kill()
        deadline = kill_at + 90
        acked = None
        while acked is None and time.monotonic() < deadline:
            time.sleep(0.05)
            acked = prod.first_ack_after(kill_at)
        took = (acked - kill_at) if acked is not None else float("nan")
        print(json.dumps({"session_timeout_ms": session_ms, "killed_leader": leader, "failover_s": round(took, 3),
                          "work": str(work) if keep else None}), flush=True)
        if show_timeline:
            time.sleep(0.5)
            for line in timeline(work, leader, kill_wall, took + 1 if took == took else 30):
                print(line)
        return took
    finally:
        if prod is not None:
            prod.stop.set()
            prod.thread.join(5)
            prod.p.purge()
            prod.p.flush(0)
            del prod
        procs.stop_all()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--session-timeouts", default="6000,3000", help="zookeeper.session.timeout.ms values")
    ap.add_argument("--override", action="append", default=[], help="extra broker config key=value")
    ap.add_argument("--timeline", action="store_true", help="print survivors' log lines around each kill")
    ap.add_argument("--keep", action="store_true", help="keep each run's directory (logs)")
    args = ap.parse_args()
    stop_on_sigterm()
    rows = []
    for session_ms in (int(s) for s in args.session_timeouts.split(",")):
        try:
            runs = [one_run(session_ms, args.override, args.timeline, args.keep) for _ in range(args.repeats)]
        except (RuntimeError, TimeoutError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        ok = [r for r in runs if r == r]
        med = statistics.median(ok) if ok else float("nan")
        mx = max(ok) if len(ok) == len(runs) else float("inf")
        s = session_ms / 1000
        rows.append((session_ms, med, mx, med <= s + 1, mx <= s + 3, runs))
    print("\ncommand: " + " ".join([sys.executable, *sys.argv]))
    print(f"{'session ms':>10} {'median s':>9} {'max s':>7} {'target med':>10} {'target max':>10}  runs")
    for session_ms, med, mx, ok_med, ok_max, runs in rows:
        s = session_ms / 1000
        print(f"{session_ms:>10} {med:>9.2f} {mx:>7.2f} {f'<= {s + 1:.0f}':>7} {'ok' if ok_med else 'MISS':>2}"
              f" {f'<= {s + 3:.0f}':>7} {'ok' if ok_max else 'MISS':>2}  {[round(r, 2) for r in runs]}")
    return 0 if all(r[3] and r[4] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
