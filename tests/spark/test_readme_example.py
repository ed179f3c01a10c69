"""The README's Spark example, run as the README says (a script, with the virtualenv's
python): it reads `orders`, writes `orders-upper` and commits its group. The block is read
from README.md; only the broker's address and the checkpoint directory are this test's.
As written before, a script ended right after ``start()``, having written nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.broker import BrokerProcess
from support.cli import run_dmq

pytest.importorskip("pyspark")

README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLE = re.compile(r"```python\n(from pyspark.sql import SparkSession\n.*?readStream.*?)```", re.DOTALL)


def test_the_readme_spark_example_runs_as_a_script(broker: BrokerProcess, tmp_path: Path) -> None:
    m = EXAMPLE.search(README.read_text())
    assert m, "the README shows a Spark streaming example"
    code = m.group(1).replace("127.0.0.1:9092", broker.bootstrap).replace("/tmp/ckpt", str(tmp_path / "ckpt"))
    assert code.count(broker.bootstrap) == 2 and str(tmp_path) in code
    run_dmq(broker.bootstrap, "topics", "create", "orders", "--partitions", "6")
    p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for key, value in (("a", "x"), ("b", "y"), ("c", "z")):
        p.produce("orders", key=key.encode(), value=value.encode())
    assert p.flush(30) == 0

    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "readme-check",
                  "auto.offset.reset": "earliest", "log_level": 0})
    c.subscribe(["orders-upper"])
    got: dict[str, str] = {}
    try:
        for _ in range(40):
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                got[msg.key().decode()] = msg.value().decode()
            if len(got) == 3:
                break
    finally:
        c.close()
    assert got == {"a": "X", "b": "Y", "c": "Z"}

    g = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "orders-etl", "log_level": 0})
    try:
        committed = g.committed([TopicPartition("orders", i) for i in range(6)], 10)
    finally:
        g.close()
    assert sum(max(tp.offset, 0) for tp in committed) == 3, committed  # lag 0 in `dmq groups describe`
