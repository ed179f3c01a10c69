"""``dmq pipeline run access-logs``: the log-analytics pipeline against a running broker."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from typing import Annotated

import typer
from rich.live import Live
from rich.table import Table

from dmq.cli.common import Bootstrap, ensure_reachable, fail, make_console

app = typer.Typer(help="Run data pipelines on Spark.", no_args_is_help=True)
console = make_console()


def _status(produced: int, total: int, consumed: int, windows: dict[str, int], counted: dict[str, int],
            elapsed: float) -> Table:
    table = Table(title="access-logs pipeline", title_justify="left", show_header=False)
    table.add_column("stage")
    table.add_column("progress", justify="right")
    table.add_row("log lines delivered to dmq", f"{produced:,} / {total:,}")
    table.add_row("read by Spark", f"{consumed:,}")
    for name in ("by_status", "by_path"):
        table.add_row(f"windows written ({name})", f"{windows.get(name, 0):,} covering {counted.get(name, 0):,} lines")
    table.add_row("elapsed", f"{elapsed:,.1f} s")
    return table


JAVA_HINT = "Spark needs Java 17 or newer: apt-get install openjdk-17-jre-headless"


def check_java() -> None:
    """Fail with one line unless a Java 17+ runtime is on PATH (or in JAVA_HOME)."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        fail(f"no java found; {JAVA_HINT}")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        fail(f"cannot run {java}: {e}; {JAVA_HINT}")
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = 0 if m is None else int(m.group(2) if m.group(1) == "1" and m.group(2) else m.group(1))
    if major < 17:
        fail(f"{java} is Java {major or 'of an unknown version'}; {JAVA_HINT}")


def _holds_state(path: str) -> bool:
    return os.path.isdir(path) and any(os.scandir(path))


@app.command("run")
def run(
    name: Annotated[str, typer.Argument(help="pipeline to run: access-logs")] = "access-logs",
    topic: Annotated[str, typer.Option("--topic", help="topic the generated access-log lines go to")] = "access-logs",
    lines: Annotated[int, typer.Option("--lines", "-n", help="log lines to generate")] = 20_000,
    minutes: Annotated[int, typer.Option("--minutes", help="event-time span of the lines")] = 10,
    rate: Annotated[float, typer.Option("--rate", help="lines per second, 0 for as fast as possible")] = 2000,
    output: Annotated[str, typer.Option("--output", help="Parquet output directory")] = "./pipeline-output",
    checkpoint: Annotated[str | None, typer.Option("--checkpoint", help="Spark checkpoint directory [default: OUTPUT/_checkpoint]")] = None,
    reset: Annotated[bool, typer.Option("--reset", help="delete the results and checkpoint of an earlier run first")] = False,
    timeout_s: Annotated[float, typer.Option("--timeout", help="give up after this many seconds")] = 900,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
) -> None:
    """Generate access-log lines into a topic and count them per minute with Spark Structured Streaming.

    Each run reads only the lines it writes (from the topic's end offsets at its start)
    and succeeds only when its windowed counts equal the counts of the delivered lines."""
    if name != "access-logs":
        fail(f"unknown pipeline {name!r}; available: access-logs", 2)
    if lines <= 0 or minutes <= 0:
        fail("--lines and --minutes must be positive", 2)
    checkpoint = checkpoint or os.path.join(output, "_checkpoint")
    if reset:
        for path in (output, checkpoint):
            shutil.rmtree(path, ignore_errors=True)
    for path in (output, checkpoint):
        if _holds_state(path):
            fail(f"{path} holds an earlier run's results or checkpoint (whose watermark would drop "
                 f"this run's lines as late data); pass a new --output or add --reset")
    ensure_reachable(bootstrap_server)
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        fail("PySpark is not installed: pip install -e '.[spark]' (from the dmq checkout)")
    check_java()
    from dmq.spark import pipeline

    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need this venv (pyarrow, dmq)
    starting = pipeline.end_offsets(bootstrap_server, topic)
    console.print(f"Starting Spark (local[2]); results go to {output} and topic {topic}-counts")
    spark = (SparkSession.builder.master("local[2]").appName("dmq-access-logs")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.pyspark.python", sys.executable).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    generated = pipeline.make_lines(lines, minutes)
    delivered = [0]
    generator_done = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            pipeline.generate(bootstrap_server, topic, generated, rate,
                              on_progress=lambda n: delivered.__setitem__(0, n))
        except BaseException as e:  # noqa: BLE001 - reported on the main thread
            errors.append(e)
        finally:
            generator_done.set()

    generator = threading.Thread(target=produce, daemon=True)
    generator.start()
    queries = pipeline.start_queries(spark, bootstrap_server, topic, output, checkpoint,
                                     starting_offsets=starting)
    started = time.monotonic()
    finished = False
    try:
        with Live(console=console, refresh_per_second=2) as live:
            while time.monotonic() - started < timeout_s:
                if errors:
                    fail(f"the generator failed: {errors[0]}")
                for q in queries:
                    if q.exception() is not None:
                        fail(f"Spark query {q.name} failed: {q.exception()}")
                counts = {n: pipeline.read_counts(spark, output, n) for n in ("by_status", "by_path")}
                counted = {n: sum(c.values()) for n, c in counts.items()}
                consumed = sum(p["numInputRows"] for p in queries[0].recentProgress)
                live.update(_status(delivered[0], lines, consumed, {n: len(c) for n, c in counts.items()},
                                    counted, time.monotonic() - started))
                if generator_done.is_set() and all(v >= delivered[0] for v in counted.values()):
                    finished = True
                    break
                time.sleep(1)
    finally:
        pipeline.stop_queries(queries)
    if not finished:
        fail(f"the pipeline did not catch up within {timeout_s:.0f} s")
    pipeline.commit_progress(bootstrap_server, pipeline.group_for(topic), queries)
    want_status, want_path = pipeline.expected_counts(generated)
    got_status = pipeline.read_counts(spark, output, "by_status")
    got_path = pipeline.read_counts(spark, output, "by_path")
    if (got_status != {(w, str(k)): c for (w, k), c in want_status.items()}
            or got_path != dict(want_path)):
        fail(f"the counts differ from the {delivered[0]:,} delivered lines: "
             f"{sum(got_status.values()):,} counted by status, {sum(got_path.values()):,} by path")
    top = sorted(got_status.items())[:5]
    console.print()
    console.print(f"Done: all {delivered[0]:,} delivered lines counted, checked window by window. "
                  f"Parquet: {output}/by_status, {output}/by_path; topic {topic}-counts. "
                  "First windows by status:")
    for (window, status), count in top:
        console.print(f"  {window:%Y-%m-%d %H:%M}  status {status}: {count}")
    console.print(f"Read them with Spark: spark.read.parquet('{output}/by_path')"
                  ".groupBy('key').sum('count').show()")
    spark.stop()
