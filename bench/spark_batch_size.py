"""Spark source read rate by fetch size (the Arrow batch each fetch brings).

One dmq broker with 1 M records of 100 B in two partitions; a ``local[2]`` SparkSession
reads them all (count and sum(length(value))) with ``kafka.max.partition.fetch.bytes`` at
each size given, alternated (in order, then reversed), after one untimed read of each.
Prints each read's rate and CPU seconds by role, then the median per size.

    python bench/spark_batch_size.py --sizes 8388608,1048576,262144 --repeats 4
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import spark_read as sr  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="8388608,1048576,262144")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]

    tmp = tempfile.mkdtemp(prefix="dmq-spark-batch-")
    started = sr.start_broker(tmp)
    if started is None:
        shutil.rmtree(tmp, ignore_errors=True)
        return 1
    broker, bootstrap = started
    try:
        sr.fill_topic(bootstrap, "bench", 2, args.records, 100)
        spark = sr.local_spark()

        def df(size: int) -> Any:
            return (spark.read.format("dmq").option("bootstrap.servers", bootstrap).option("subscribe", "bench")
                    .option("kafka.max.partition.fetch.bytes", str(size)).load())

        def timed(d: Any) -> tuple[float, int]:
            t0 = time.perf_counter()
            row = d.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
            return time.perf_counter() - t0, row.n

        for size in sizes:
            timed(df(size))
        rates: dict[int, list[float]] = {size: [] for size in sizes}
        for rep in range(args.repeats):
            for size in (sizes if rep % 2 == 0 else sizes[::-1]):
                before = sr.cpu_by_role(os.getpid(), broker.pid)
                seconds, n = timed(df(size))
                after = sr.cpu_by_role(os.getpid(), broker.pid)
                assert n == args.records, f"read {n} records"
                rates[size].append(n / seconds)
                used = {k: round(after[k] - before[k], 2) for k in after}
                print(size, f"{n / seconds:,.0f}", used, flush=True)
        for size in sizes:
            print(size, f"median {statistics.median(rates[size]):,.0f}")
        spark.stop()
    finally:
        sr.stop_broker(broker)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
