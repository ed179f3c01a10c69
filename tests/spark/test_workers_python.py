"""The README's Spark example works without an activated virtualenv (issue 10, bug 7):
Spark's Python workers ran ``python3`` from PATH, which lacks pyarrow and dmq."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from support.broker import BrokerProcess

pytest.importorskip("pyspark")

SCRIPT = """
import sys
from dmq.spark import register            # as the README's example: before the session
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
register(spark)
n = (spark.read.format("dmq").option("bootstrap.servers", sys.argv[1]).option("subscribe", sys.argv[2])
     .load().count())
print("rows", n)
spark.stop()
"""


# A notebook's order: the session first, dmq.spark imported afterwards.
SESSION_FIRST = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
from dmq.spark import register
register(spark)
n = (spark.read.format("dmq").option("bootstrap.servers", sys.argv[1]).option("subscribe", sys.argv[2])
     .load().count())
print("rows", n)
spark.stop()
"""


@pytest.mark.parametrize("order,script", [("import-first", SCRIPT), ("session-first", SESSION_FIRST)])
def test_spark_workers_use_this_interpreter_when_the_venv_is_not_activated(
        broker: BrokerProcess, order: str, script: str) -> None:
    topic = f"workers-py-{order}"
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0
    # PATH as in a shell that never activated the virtualenv: python3 is the system's.
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    res = subprocess.run([sys.executable, "-c", script, broker.bootstrap, topic], capture_output=True,
                         text=True, timeout=240, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "rows 5" in res.stdout
