#!/usr/bin/env python3
"""End-to-end latency against the offered rate: RF=1 and RF=3, acks=1 and acks=all.

In one run, on loopback: Debian's ZooKeeper, three ``dmq server --zookeeper``
brokers (RF=3 topics) and one single-node ``dmq server`` (RF=1 topics). For
every case (replication factor x acks x rate) it runs ``bench/latency.py``
with ``--producers`` producer processes and a ``--partitions``-partition
topic, ``--repeats`` times; the repeats go round the whole case list, so the
cases alternate. Prints one JSON line per run, then a table of the medians of
p50, p99 and p99.9, of the records received per second, of the CPU the brokers
used and of the time each broker spent runnable but waiting for a CPU
(``/proc/PID/task/*/schedstat``: on a machine with fewer cores than busy
processes, that wait is a hop's latency).

Every run is bounded (latency.py: its seconds of sending plus at most 10 s
of draining); the brokers and ZooKeeper are stopped on every way out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from procs import (  # noqa: E402
    ZK_JAR,
    Proc,
    Processes,
    bootstrap_of,
    broker,
    sched_seconds,
    start_cluster,
    stop_on_sigterm,
)


def round_trip(bootstrap: str, rf: int, n: int) -> dict[str, float]:
    """One record at a time with acks=all: produce, then flush until it is acknowledged."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"rt-{rf}-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, 1, rf)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "log_level": 0,
                         "socket.nagle.disable": True})
    for _ in range(20):  # warm up: metadata, connections
        producer.produce(topic, b"w")
        producer.flush(10)
    took = []
    for _ in range(n):
        start = time.perf_counter()
        producer.produce(topic, b"x" * 100)
        producer.flush(10)
        took.append((time.perf_counter() - start) * 1000)
    admin.delete_topics([topic])
    took.sort()
    return {"p50_ms": round(took[len(took) // 2], 3), "p99_ms": round(took[int(len(took) * 0.99)], 3)}


def run_case(bootstrap: str, rf: int, acks: str, rate: int, args: argparse.Namespace,
             brokers: list[Proc]) -> dict[str, object]:
    """One latency.py run; with the brokers' CPU (cores, summed) and the seconds per second
    each spent runnable but waiting for a CPU (mean over the brokers) while it ran."""
    pids = [b.proc.pid for b in brokers if b.proc is not None]
    before = [sched_seconds(pid) for pid in pids]
    started = time.monotonic()
    result = _latency(bootstrap, rf, acks, rate, args)
    elapsed = time.monotonic() - started
    after = [sched_seconds(pid) for pid in pids]
    pairs = [(a, b) for a, b in zip(after, before, strict=True) if a is not None and b is not None]
    if pairs and elapsed > 0:
        result["brokers_cpu_cores"] = round(sum(a[0] - b[0] for a, b in pairs) / elapsed, 3)
        result["broker_cpu_wait_s_per_s"] = round(
            sum(a[1] - b[1] for a, b in pairs) / len(pairs) / elapsed, 3)
    return result


def _latency(bootstrap: str, rf: int, acks: str, rate: int, args: argparse.Namespace) -> dict[str, object]:
    cmd = [sys.executable, str(HERE / "latency.py"), bootstrap, "--rate", str(rate), "--seconds",
           str(args.seconds), "--acks", acks, "--replication-factor", str(rf), "--producers",
           str(args.producers), "--partitions", str(args.partitions), "--size", str(args.size)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds + 120)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1]}
    return dict(json.loads(lines[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="1000,5000,20000")
    ap.add_argument("--acks", default="1,all")
    ap.add_argument("--rfs", default="1,3")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--round-trips", type=int, default=300,
                    help="records sent one at a time (produce + flush, acks=all) per repeat; 0: none")
    ap.add_argument("--override", action="append", default=[], help="key=value for every broker")
    args = ap.parse_args()
    if not os.path.exists(ZK_JAR):
        print("ZooKeeper is not installed: apt-get install -y zookeeper", file=sys.stderr)
        return 2
    stop_on_sigterm()
    cases = [(rf, acks, rate) for rf in (int(x) for x in args.rfs.split(","))
             for acks in args.acks.split(",") for rate in (int(x) for x in args.rates.split(","))]
    work = Path(tempfile.mkdtemp(prefix="dmq-bench-sweep-"))
    procs = Processes()
    runs: dict[tuple[int, str, int], list[dict[str, object]]] = {c: [] for c in cases}
    peaks: dict[str, float | None] = {}
    trips: dict[int, list[dict[str, object]]] = {}
    try:
        cluster = list(start_cluster(procs, work, args.override).values())
        single = procs.start(broker(work, 0, None, args.override))
        bootstrap = {1: bootstrap_of([single]), 3: bootstrap_of(cluster)}
        brokers = {1: [single], 3: cluster}
        time.sleep(2)
        if args.round_trips > 0:
            trips.update({1: [], 3: []})
        for repeat in range(args.repeats):
            for rf in trips:
                trip = round_trip(bootstrap[rf], rf, args.round_trips)
                print(json.dumps({"repeat": repeat, "round_trip": 1, "rf": rf, **trip}), flush=True)
                trips[rf].append(dict(trip))
            for rf, acks, rate in cases:
                row = {"repeat": repeat, "rf": rf, "acks": acks, "rate": rate,
                       **run_case(bootstrap[rf], rf, acks, rate, args, brokers[rf])}
                print(json.dumps(row), flush=True)
                runs[(rf, acks, rate)].append(row)
        peaks = {p.name: p.peak_rss_mb() for p in (*cluster, single)}
        print(json.dumps({"peak_rss_mb": peaks}), flush=True)
    except (RuntimeError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)

    def med(rows: list[dict[str, object]], key: str) -> str:
        values = [float(r[key]) for r in rows if key in r]  # type: ignore[arg-type]
        return f"{statistics.median(values):,.2f}" if values else "-"

    header = ("RF", "acks", "rate/s", "p50 ms", "p99 ms", "p99.9 ms", "received/s", "broker CPU",
              "CPU wait s/s", "runs")
    table = [header] + [
        (str(rf), acks, f"{rate:,}", med(rows, "p50_ms"), med(rows, "p99_ms"), med(rows, "p999_ms"),
         med(rows, "received_per_s"), med(rows, "brokers_cpu_cores"), med(rows, "broker_cpu_wait_s_per_s"),
         f"{sum(1 for r in rows if 'p50_ms' in r)}/{len(rows)}")
        for (rf, acks, rate), rows in runs.items()]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    print(f"\nmedians of {args.repeats} alternated runs, {args.producers} producers, "
          f"{args.partitions} partitions, {args.size} B records; broker CPU: cores the brokers "
          f"used together; CPU wait: seconds per second each broker was runnable but waiting "
          f"for a CPU (schedstat)")
    for line in table:
        print("  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)))
    for rf, trip_rows in trips.items():
        print(f"one record at a time, acks=all, RF={rf}: p50 {med(trip_rows, 'p50_ms')} ms, "
              f"p99 {med(trip_rows, 'p99_ms')} ms")
    print("peak RSS: " + ", ".join(f"{name} {mb:.0f} MiB" for name, mb in peaks.items() if mb is not None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
