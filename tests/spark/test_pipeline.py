"""The access-log pipeline end to end: generator -> dmq -> Spark streaming -> Parquet and dmq."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from support.broker import BrokerProcess  # noqa: E402
from support.spark import reader  # noqa: E402

from dmq.spark import pipeline  # noqa: E402


def test_windowed_counts_equal_python_counts(spark, broker: BrokerProcess, tmp_path: Path) -> None:  # noqa: ANN001
    lines = pipeline.make_lines(3000, minutes=6, seed=11)
    topic = "access-logs-test"
    assert pipeline.generate(broker.bootstrap, topic, lines, rate=0) == 3000
    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    queries = pipeline.start_queries(spark, broker.bootstrap, topic, output, checkpoint, max_per_trigger=1000)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            done = [sum(pipeline.read_counts(spark, output, name).values()) for name in ("by_status", "by_path")]
            if done == [3000, 3000]:
                break
            for q in queries:
                assert q.exception() is None, q.exception()
            time.sleep(2)
    finally:
        pipeline.stop_queries(queries)
    want_status, want_path = pipeline.expected_counts(lines)
    got_status = pipeline.read_counts(spark, output, "by_status")
    got_path = pipeline.read_counts(spark, output, "by_path")
    assert got_status == {(w, str(s)): c for (w, s), c in want_status.items()}
    assert got_path == dict(want_path)
    # The same results went to a dmq topic as JSON, one record per window and key.
    counts = reader(spark, broker, f"{topic}-counts").collect()
    series = [json.loads(r.value) for r in counts]
    assert {(s["series"], s["key"], s["count"]) for s in series if s["series"] == "by_status"} == \
        {("by_status", str(k), c) for (_w, k), c in want_status.items()}
    assert len([s for s in series if s["series"] == "by_path"]) == len(want_path)
    # Progress is committed for the lag view of `dmq groups describe`.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-pipeline"})
    committed = c.committed([TopicPartition(topic, 0)], 10)[0].offset
    c.close()
    assert committed > 0


def test_pipeline_command(broker: BrokerProcess, tmp_path: Path) -> None:
    """`dmq pipeline run access-logs` against a running broker, as the README shows it."""
    import os
    import subprocess
    import sys

    out = tmp_path / "cli-out"
    res = subprocess.run([sys.executable, "-m", "dmq", "pipeline", "run", "access-logs", "-b", broker.bootstrap,
                          "--topic", "cli-logs", "--lines", "2000", "--minutes", "3", "--rate", "0",
                          "--output", str(out), "--timeout", "240"],
                         capture_output=True, timeout=300, env={**os.environ, "COLUMNS": "120"})
    text = res.stdout.decode()
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    assert "every line counted" in text and "2,000 / 2,000" in text
    assert (out / "by_status").is_dir() and (out / "by_path").is_dir()
