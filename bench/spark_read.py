#!/usr/bin/env python3
"""Spark read throughput from dmq next to Parquet, in one run (local[2]).

Starts a fresh ``dmq server``, produces N records of S bytes into a topic with
P partitions, writes the same records to Parquet once, then alternates:
read all records through ``spark.read.format("dmq")`` and through
``spark.read.parquet``, each forced to materialise every value
(``sum(length(value))``), after one untimed read of each (``--warmup``: the
JVM's JIT and the Python workers' start-up are not throughput). Prints the medians as Markdown and one JSON line.
For each read it also prints the CPU seconds used meanwhile by Spark's JVM,
its Python workers and the broker (from /proc, this run's processes only):
where a read's time goes.

    .venv/bin/python bench/spark_read.py --records 1000000 --size 100 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    """User+system CPU of a process plus that of its children it has reaped (exited Python
    workers are counted in their daemon), 0 for a process that is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def cpu_by_role(root: int, broker: int) -> dict[str, float]:
    """CPU seconds so far of this run's JVM, Spark's Python workers and the broker."""
    parent: dict[int, int] = {}
    cmd: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue

    def under(pid: int, ancestor: int) -> bool:
        while pid > 1:
            if pid == ancestor:
                return True
            pid = parent.get(pid, 0)
        return False

    out = {"jvm": 0.0, "python_workers": 0.0, "broker": _cpu_seconds(broker)}
    for pid, line in cmd.items():
        if pid == root or not under(pid, root) or under(pid, broker):
            continue
        if "pyspark.daemon" in line:  # a daemon and its forked workers (exited ones: in its own)
            out["python_workers"] += _cpu_seconds(pid)
        elif "java" in line.split(" ")[0]:
            out["jvm"] += _cpu_seconds(pid)
    return out


def start_broker(tmp: str) -> tuple[subprocess.Popen[str], str] | None:
    """A fresh ``dmq server`` on a free loopback port, its data under ``tmp``, once it
    listens: (process, bootstrap), or None (with an error line) when it did not start."""
    port = free_port()
    broker = subprocess.Popen([sys.executable, "-m", "dmq", "server", "--listen", f"127.0.0.1:{port}",
                               "--data-dir", os.path.join(tmp, "data"), "--log-level", "WARNING"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, text=True)
    assert broker.stdout is not None
    if not broker.stdout.readline():
        print(f"error: dmq server did not start (exit {broker.wait(10)})", file=sys.stderr)
        return None
    return broker, f"127.0.0.1:{port}"


def stop_broker(broker: subprocess.Popen[str]) -> None:
    """SIGTERM (a clean shutdown), SIGKILL after 30 s."""
    if broker.poll() is None:
        broker.send_signal(signal.SIGTERM)
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait(10)


def fill_topic(bootstrap: str, topic: str, partitions: int, records: int, size: int) -> None:
    """Create ``topic`` and produce ``records`` random records of ``size`` bytes to it."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})  # kept until the answer
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 5, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 1_000_000})
    payload = os.urandom(size)
    for _ in range(records):
        while True:
            try:
                p.produce(topic, payload)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def local_spark() -> Any:
    """A ``local[2]`` SparkSession (no UI, quiet) with dmq's source and sink registered; its
    Python workers run this interpreter."""
    from pyspark.sql import SparkSession

    from dmq.spark import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def print_medians(what: str, rates: dict[str, list[float]], size: int) -> dict[str, float]:
    """The median rate of dmq and of Parquet as a Markdown table, and their ratio."""
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"| {what} | records/s (median) | MB/s |\n| --- | --- | --- |")
    for k in ("dmq", "parquet"):
        print(f"| {k} | {med[k]:,.0f} | {med[k] * size / 1e6:,.1f} |")
    print(f"\ndmq / parquet = {med['dmq'] / med['parquet']:.2f}")
    return med


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed reads of each source first (JIT, Python worker start-up)")
    args = ap.parse_args()
    # SIGTERM ends the run like Ctrl-C: through the finally below, which stops the broker.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    tmp = tempfile.mkdtemp(prefix="dmq-spark-bench-")
    started = start_broker(tmp)
    if started is None:
        shutil.rmtree(tmp, ignore_errors=True)
        return 1
    broker, bootstrap = started
    try:
        fill_topic(bootstrap, "bench", args.partitions, args.records, args.size)
        print(f"produced {args.records:,} records of {args.size} B", file=sys.stderr)

        spark = local_spark()

        def dmq_df():  # noqa: ANN202
            return (spark.read.format("dmq").option("bootstrap.servers", bootstrap)
                    .option("subscribe", "bench").load())

        parquet = os.path.join(tmp, "parquet")
        dmq_df().write.parquet(parquet)

        def timed(df) -> tuple[float, int]:  # noqa: ANN001
            t0 = time.perf_counter()
            row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
            return time.perf_counter() - t0, row.n

        for _ in range(args.warmup):
            for df in (dmq_df(), spark.read.parquet(parquet)):
                timed(df)
        rates: dict[str, list[float]] = {"dmq": [], "parquet": []}
        cpu: dict[str, list[dict[str, float]]] = {"dmq": [], "parquet": []}
        for rep in range(args.repeats):
            order = ["dmq", "parquet"] if rep % 2 == 0 else ["parquet", "dmq"]
            for name in order:
                df = dmq_df() if name == "dmq" else spark.read.parquet(parquet)
                before = cpu_by_role(os.getpid(), broker.pid)
                seconds, n = timed(df)
                after = cpu_by_role(os.getpid(), broker.pid)
                used = {k: round(after[k] - before[k], 2) for k in after}
                cpu[name].append(used)
                assert n == args.records, f"{name} read {n} records"
                rates[name].append(n / seconds)
                print(f"[{rep + 1}/{args.repeats}] {name}: {n / seconds:,.0f} records/s ({seconds:.2f} s); "
                      f"CPU s: {', '.join(f'{k} {v:.2f}' for k, v in used.items())}", file=sys.stderr)
        spark.stop()
    finally:
        stop_broker(broker)
        shutil.rmtree(tmp, ignore_errors=True)
    med = print_medians("source", rates, args.size)
    print(json.dumps({"spark_read": 1, "records": args.records, "size": args.size, "partitions": args.partitions,
                      "warmup": args.warmup, "rates": rates, "median": med, "cpu_seconds": cpu}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
