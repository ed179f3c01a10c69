"""A Spark job for tests, run on any session (``run``) or as a driver script on a given master:

    python tests/support/spark_job.py MASTER BOOTSTRAP TOPIC SINK_TOPIC RESULT_JSON

It records where its tasks ran (the Python worker's interpreter and the JVM that
started it), reads TOPIC through the dmq source (headers, 4 read tasks at
least), writes those rows to SINK_TOPIC through the dmq sink, and returns
(writes to RESULT_JSON) what it saw and how long each step took. (Streaming on
a cluster is what ``dmq pipeline run --master`` does.)
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _hex(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def run(spark: Any, bootstrap: str, topic: str, sink_topic: str) -> dict[str, Any]:
    def where_am_i(_: Any) -> dict[str, Any]:
        """The task's interpreter and the command line of the JVM above its Python daemon
        (defined here: shipped by value, the tests' modules are not on the executors)."""
        import os
        import sys

        daemon = os.getppid()
        with open(f"/proc/{daemon}/stat") as f:
            jvm = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{jvm}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        import dmq  # importable on the executors

        return {"python": sys.executable, "jvm_pid": jvm, "jvm": cmdline, "dmq": os.path.dirname(dmq.__file__)}

    import time

    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    tasks = spark.sparkContext.parallelize(range(8), 8).map(where_am_i).collect()
    seconds["probe"] = time.monotonic() - t0
    df = (spark.read.format("dmq").option("bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("includeHeaders", "true").option("minPartitions", "4").load())
    read_tasks = df.rdd.getNumPartitions()
    rows = sorted([r.topic, r.partition, r.offset, int(r.timestamp.timestamp() * 1000), r.timestampType,
                   _hex(r.key), _hex(r.value), [[h.key, _hex(h.value)] for h in r.headers]]
                  for r in df.collect())
    seconds["read"] = time.monotonic() - t0 - sum(seconds.values())
    (df.select("key", "value", "partition", "headers").write.format("dmq").mode("append")
     .option("bootstrap.servers", bootstrap).option("topic", sink_topic).save())
    seconds["write"] = time.monotonic() - t0 - sum(seconds.values())
    return {"tasks": tasks, "read_tasks": read_tasks, "rows": rows, "seconds": seconds}


def main(master: str, bootstrap: str, topic: str, sink_topic: str, result: str) -> None:
    import time

    started = time.monotonic()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from dmq.spark import register

    spark = (SparkSession.builder.master(master).appName("dmq-test-job")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.executor.memory", "512m").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").config("spark.pyspark.python", sys.executable)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    session = time.monotonic() - started
    try:
        out = run(spark, bootstrap, topic, sink_topic)
        out["seconds"]["session"] = session
    finally:
        spark.stop()
    with open(result, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(*sys.argv[1:6])
