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
    lines, deleting that state and nothing else of --output; its progress is committed to
    its group after a one-batch job. Spark's own log lines stay off the terminal."""
    out = tmp_path / "cli-out"
    out.mkdir()
    (out / "notes.txt").write_text("the user's, not the pipeline's")
    res = _pipeline(broker.bootstrap, out)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "all 2,000 delivered lines counted, checked window by window" in res.stdout
    assert "in topic cli-logs-counts" in res.stdout
    assert "2,000 / 2,000" in res.stdout
    read = [line for line in res.stdout.splitlines() if "read by Spark" in line][-1]
    assert "2,001" not in read, read  # the end marker that follows the lines is not one of them
    hint = f"  spark.read.parquet('{out}/by_path').groupBy('key').sum('count').show()"
    assert hint in res.stdout.splitlines(), res.stdout  # one line, wider than the terminal or not
    assert (out / "by_status").is_dir() and (out / "by_path").is_dir()
    assert res.stderr == "", "Spark's log (WARN lines, stage progress bars) reached the terminal"

    again = _pipeline(broker.bootstrap, out)
    assert again.returncode == 1
    assert again.stderr.splitlines() == [
        f"error: {out} holds an earlier run's results or checkpoint (whose watermark would drop "
        "this run's lines as late data); pass a new --output or add --reset"]

    reset = _pipeline(broker.bootstrap, out, "--reset")
    assert reset.returncode == 0, reset.stderr[-2000:]
    assert "all 2,000 delivered lines counted" in reset.stdout  # its own lines, not 4,000
    assert (out / "notes.txt").read_text() == "the user's, not the pipeline's", "--reset deleted a user's file"

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
    bootstrap = f"127.0.0.1:{closed_port()}"
    res = _pipeline(bootstrap, tmp_path / "out")
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        f"error: cannot reach {bootstrap}: connection refused; is `dmq server` running? "
        "(pass --bootstrap-server HOST:PORT)"], res.stderr[-2000:]
    assert "Starting Spark" not in res.stdout
    assert time.monotonic() - started < 15


def test_pipeline_that_loses_its_broker_fails_with_one_line(fresh_broker: BrokerProcess, tmp_path: Path) -> None:
    """The broker goes away mid-run: one line naming it, exit 1, within seconds; no
    librdkafka lines, no Java or Python traceback (they went to Spark's log file)."""
    import subprocess
    import sys

    b = fresh_broker.start()
    args = [sys.executable, "-m", "dmq", "pipeline", "run", "access-logs", "-b", b.bootstrap, "--topic",
            "lost-logs", "--lines", "20000", "--minutes", "3", "--rate", "500",
            "--output", str(tmp_path / "out"), "--timeout", "240"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "lost-probe", "log_level": 0})
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                md = c.list_topics("lost-logs", timeout=5).topics.get("lost-logs")
                # The partition listed with its leader: a topic that has just been created
                # has none until its log exists, and librdkafka raises rather than waits.
                ready = md is not None and md.error is None and 0 in md.partitions and \
                    md.partitions[0].error is None and md.partitions[0].leader >= 0
                if ready and c.get_watermark_offsets(TopicPartition("lost-logs", 0), timeout=5)[1] > 2000:
                    break
                time.sleep(0.5)
        finally:
            c.close()
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        b.kill()
        killed = time.monotonic()
        stdout, stderr = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    took = time.monotonic() - killed
    assert proc.returncode == 1, stderr[-2000:]
    lines = stderr.splitlines()
    assert len(lines) == 1, f"{len(lines)} lines on stderr, the last ones:\n" + "\n".join(lines[-20:])
    assert lines[0].startswith(f"error: lost {b.bootstrap} during the run: connection refused; "
                               "is `dmq server` still running? ("), lines[0]
    assert "Done" not in stdout
    assert took < 60, f"it took {took:.0f} s to give up"
    log = lines[0].rsplit("Spark's log: ", 1)[-1]
    if Path(log).is_file():
        Path(log).unlink()


def test_pipeline_usage_errors_exit_2(tmp_path: Path) -> None:
    from support.cli import closed_port

    for extra, message in ((["--rate", "-1"], "error: --rate must be 0 (as fast as possible) or positive"),
                           (["--timeout", "0"], "error: --timeout must be positive")):
        res = _pipeline(f"127.0.0.1:{closed_port()}", tmp_path / "out", *extra)
        assert (res.returncode, res.stderr.splitlines()) == (2, [message])


def test_pipeline_without_java_says_how_to_install_java_17(tmp_path: Path) -> None:
    """No java on PATH (nor JAVA_HOME): one line naming Java 17 and its Debian package,
    before Spark starts (Spark's own launcher says only that the gateway exited)."""
    import os
    import socket
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java here
    with socket.socket() as listening:  # a broker address that accepts: the reachability check passes
        listening.bind(("127.0.0.1", 0))
        listening.listen(5)
        res = subprocess.run([sys.executable, "-m", "dmq", "pipeline", "run", "-b",
                              f"127.0.0.1:{listening.getsockname()[1]}", "--output", str(tmp_path / "out")],
                             capture_output=True, text=True, timeout=60, env=env)
    assert (res.returncode, res.stderr.splitlines()) == (1, [
        "error: no java on PATH; Spark needs Java 17 or newer: apt-get install openjdk-17-jre-headless"])


def test_generate_counts_only_lines_the_broker_acknowledged(broker: BrokerProcess) -> None:
    """Issue 10, bug 5: the "generated" counter counted lines handed to the client, delivered
    or not. A topic whose max.message.bytes refuses most batches: generate fails naming how
    many lines were not delivered, and every count it reported is a count of records the
    topic holds."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "gen-refused"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "300"})])[topic].result(30)
    lines = pipeline.make_lines(500, minutes=1, seed=3)
    progress: list[int] = []
    with pytest.raises(RuntimeError, match=r"of 500 log lines were not delivered"):
        pipeline.generate(broker.bootstrap, topic, lines, rate=0, on_progress=progress.append)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "gen-refused-probe", "log_level": 0})
    try:
        in_topic = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()
    assert progress and max(progress) == progress[-1] == in_topic < 500


def test_verify_refuses_success_when_a_sink_misses_a_line(spark, broker: BrokerProcess,  # noqa: ANN001
                                                         tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 10, bug 5: success is only reported after checking. Parquet counts one line short
    in one window: the run fails, naming the output and how many windows differ."""
    from datetime import timedelta

    with capsys.disabled():  # the module builds its console from the real stdout
        from dmq.cli.pipeline import _Run, _verify

    lines = pipeline.make_lines(200, minutes=2, seed=5)
    want_status, want_path = pipeline.expected_counts(lines)
    output = tmp_path / "out"
    for name, counts in (("by_status", want_status), ("by_path", want_path)):
        rows = [(w, w + timedelta(minutes=1), str(k), c, 0) for (w, k), c in counts.items()]
        if name == "by_path":
            w, w_end, k, c, b = rows[0]
            rows[0] = (w, w_end, k, c - 1, b)  # one line missing from one window
        spark.createDataFrame(rows, pipeline.COUNTS_SCHEMA).write.parquet(str(output / name))
    with pytest.raises(SystemExit) as exit_info:
        _verify(spark, _Run(broker.bootstrap, len(lines), None), (want_status, want_path),
                str(output), "verify-missing", "earliest", {})
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert f"the counts in {output}/by_path differ from those of the delivered lines in 1 of " in err, err
    assert "199 lines counted" in err, err
