#!/usr/bin/env python3
"""Spark read throughput from dmq next to Parquet, in one run (local[2]).

Starts a fresh ``dmq server``, produces N records of S bytes into a topic with
P partitions, writes the same records to Parquet once, then alternates:
read all records through ``spark.read.format("dmq")`` and through
``spark.read.parquet``, each forced to materialise every value
(``sum(length(value))``). Prints the medians as Markdown and one JSON line.

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    # SIGTERM ends the run like Ctrl-C: through the finally below, which stops the broker.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import SparkSession

    from dmq.spark import register

    tmp = tempfile.mkdtemp(prefix="dmq-spark-bench-")
    port = free_port()
    broker = subprocess.Popen([sys.executable, "-m", "dmq", "server", "--listen", f"127.0.0.1:{port}",
                               "--data-dir", os.path.join(tmp, "data"), "--log-level", "WARNING"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    bootstrap = f"127.0.0.1:{port}"
    try:
        assert broker.stdout is not None
        if not broker.stdout.readline():
            print(f"error: dmq server did not start (exit {broker.wait(10)})", file=sys.stderr)
            return 1
        a = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        a.create_topics([NewTopic("bench", args.partitions, 1)])["bench"].result(30)
        p = Producer({"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 5, "batch.size": 1_000_000,
                      "queue.buffering.max.messages": 1_000_000})
        payload = os.urandom(args.size)
        for _ in range(args.records):
            while True:
                try:
                    p.produce("bench", payload)
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(120) == 0
        print(f"produced {args.records:,} records of {args.size} B", file=sys.stderr)

        os.environ["PYSPARK_PYTHON"] = sys.executable
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        def dmq_df():  # noqa: ANN202
            return (spark.read.format("dmq").option("bootstrap.servers", bootstrap)
                    .option("subscribe", "bench").load())

        parquet = os.path.join(tmp, "parquet")
        dmq_df().write.parquet(parquet)

        def timed(df) -> tuple[float, int]:  # noqa: ANN001
            t0 = time.perf_counter()
            row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
            return time.perf_counter() - t0, row.n

        rates: dict[str, list[float]] = {"dmq": [], "parquet": []}
        for rep in range(args.repeats):
            order = ["dmq", "parquet"] if rep % 2 == 0 else ["parquet", "dmq"]
            for name in order:
                df = dmq_df() if name == "dmq" else spark.read.parquet(parquet)
                seconds, n = timed(df)
                assert n == args.records, f"{name} read {n} records"
                rates[name].append(n / seconds)
                print(f"[{rep + 1}/{args.repeats}] {name}: {n / seconds:,.0f} records/s ({seconds:.2f} s)",
                      file=sys.stderr)
        spark.stop()
    finally:
        if broker.poll() is None:
            broker.send_signal(signal.SIGTERM)
            try:
                broker.wait(30)
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print("| source | records/s (median) | MB/s |\n| --- | --- | --- |")
    for k in ("dmq", "parquet"):
        print(f"| {k} | {med[k]:,.0f} | {med[k] * args.size / 1e6:,.1f} |")
    print(f"\ndmq / parquet = {med['dmq'] / med['parquet']:.2f}")
    print(json.dumps({"spark_read": 1, "records": args.records, "size": args.size, "partitions": args.partitions,
                      "rates": rates, "median": med}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
