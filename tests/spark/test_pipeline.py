"""The access-log pipeline end to end: generator -> dmq -> Spark streaming -> Parquet and dmq."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

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


def _pipeline(bootstrap: str, out: Path, *extra: str, topic: str = "cli-logs") -> Any:
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "dmq", "pipeline", "run", "access-logs", "-b", bootstrap,
                           "--topic", topic, "--lines", "2000", "--minutes", "3", "--rate", "0",
                           "--output", str(out), "--timeout", "240", *extra],
                          capture_output=True, timeout=300, text=True, env={**os.environ, "COLUMNS": "120"})


def test_pipeline_command(broker: BrokerProcess, tmp_path: Path) -> None:
    """`dmq pipeline run access-logs` against a running broker, as the README shows it; run
    again, it refuses the earlier run's state (whose watermark would drop every new line as
    late data, which it once reported as success), or with --reset counts exactly its own
    lines; its progress is committed to its group after a one-batch job."""
    out = tmp_path / "cli-out"
    res = _pipeline(broker.bootstrap, out)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "all 2,000 delivered lines counted, checked window by window" in res.stdout
    assert "2,000 / 2,000" in res.stdout
    assert (out / "by_status").is_dir() and (out / "by_path").is_dir()

    again = _pipeline(broker.bootstrap, out)
    assert again.returncode == 1
    assert again.stderr.splitlines() == [
        f"error: {out} holds an earlier run's results or checkpoint (whose watermark would drop "
        "this run's lines as late data); pass a new --output or add --reset"]

    reset = _pipeline(broker.bootstrap, out, "--reset")
    assert reset.returncode == 0, reset.stderr[-2000:]
    assert "all 2,000 delivered lines counted" in reset.stdout  # its own lines, not 4,000

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cli-logs-pipeline"})
    try:
        end = c.get_watermark_offsets(TopicPartition("cli-logs", 0), timeout=10)[1]
        committed = c.committed([TopicPartition("cli-logs", 0)], 10)[0].offset
    finally:
        c.close()
    assert end == 2 * 2001 and committed == end, "the group is committed up to the last line read"


def test_pipeline_with_an_unreachable_broker_fails_before_spark_starts(tmp_path: Path) -> None:
    from support.cli import closed_port

    started = time.monotonic()
    res = _pipeline(f"127.0.0.1:{closed_port()}", tmp_path / "out")
    assert res.returncode == 1
    assert len(res.stderr.splitlines()) == 1 and "cannot reach" in res.stderr, res.stderr[-2000:]
    assert "Starting Spark" not in res.stdout
    assert time.monotonic() - started < 15
