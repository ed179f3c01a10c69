#!/usr/bin/env python3
"""Spark write throughput into dmq next to Parquet, in one run (local[2]).

Starts a fresh ``dmq server``, caches a DataFrame of N rows (a string key and an S-byte
binary value, two partitions), then alternates: write it with ``df.write.format("dmq")``
into a new two-partition topic (deleted afterwards) and with ``df.write.parquet`` into a
new directory, after one untimed write of each (``--warmup``). Prints each write's rate
and the CPU seconds used meanwhile by Spark's JVM, its Python workers and the broker
(``spark_read.cpu_by_role``), the medians as Markdown and one JSON line.

    .venv/bin/python bench/spark_write.py --records 1000000 --size 100 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_read import cpu_by_role, local_spark, print_medians, start_broker, stop_broker  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed writes of each first")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from confluent_kafka.admin import AdminClient, NewTopic

    tmp = tempfile.mkdtemp(prefix="dmq-spark-write-")
    started = start_broker(tmp)
    if started is None:
        shutil.rmtree(tmp, ignore_errors=True)
        return 1
    broker, bootstrap = started
    rates: dict[str, list[float]] = {"dmq": [], "parquet": []}
    cpu: dict[str, list[dict[str, float]]] = {"dmq": [], "parquet": []}
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        spark = local_spark()
        df = spark.range(args.records, numPartitions=2).selectExpr(
            "cast(id as string) AS key", f"cast(repeat('x', {args.size}) AS binary) AS value").cache()
        assert df.count() == args.records
        runs = 0

        def write(name: str) -> float:
            nonlocal runs
            runs += 1
            target = f"bench-{runs}"
            if name == "dmq":
                admin.create_topics([NewTopic(target, 2, 1)])[target].result(30)
            t0 = time.perf_counter()
            if name == "dmq":
                (df.write.mode("append").format("dmq").option("bootstrap.servers", bootstrap)
                 .option("topic", target).save())
            else:
                df.write.parquet(os.path.join(tmp, target))
            seconds = time.perf_counter() - t0
            if name == "dmq":
                admin.delete_topics([target])[target].result(30)
            else:
                shutil.rmtree(os.path.join(tmp, target), ignore_errors=True)
            return seconds

        for _ in range(args.warmup):
            for name in ("dmq", "parquet"):
                write(name)
        for rep in range(args.repeats):
            for name in (["dmq", "parquet"] if rep % 2 == 0 else ["parquet", "dmq"]):
                before = cpu_by_role(os.getpid(), broker.pid)
                seconds = write(name)
                after = cpu_by_role(os.getpid(), broker.pid)
                used = {k: round(after[k] - before[k], 2) for k in after}
                cpu[name].append(used)
                rates[name].append(args.records / seconds)
                print(f"[{rep + 1}/{args.repeats}] {name}: {args.records / seconds:,.0f} records/s ({seconds:.2f} s); "
                      f"CPU s: {', '.join(f'{k} {v:.2f}' for k, v in used.items())}", file=sys.stderr)
        spark.stop()
    finally:
        stop_broker(broker)
        shutil.rmtree(tmp, ignore_errors=True)
    med = print_medians("sink", rates, args.size)
    print(json.dumps({"spark_write": 1, "records": args.records, "size": args.size, "warmup": args.warmup,
                      "rates": rates, "median": med, "cpu_seconds": cpu}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
