"""``dmq pipeline run access-logs``: the log-analytics pipeline against a running broker."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Annotated

import typer
from rich.live import Live
from rich.table import Table

from dmq.cli.common import Bootstrap, fail, make_console

app = typer.Typer(help="Run data pipelines on Spark.", no_args_is_help=True)
console = make_console()


def _status(produced: int, total: int, consumed: int, windows: dict[str, int], counted: dict[str, int],
            elapsed: float) -> Table:
    table = Table(title="access-logs pipeline", title_justify="left", show_header=False)
    table.add_column("stage")
    table.add_column("progress", justify="right")
    table.add_row("generated log lines", f"{produced:,} / {total:,}")
    table.add_row("read by Spark", f"{consumed:,}")
    for name in ("by_status", "by_path"):
        table.add_row(f"windows written ({name})", f"{windows.get(name, 0):,} covering {counted.get(name, 0):,} lines")
    table.add_row("elapsed", f"{elapsed:,.1f} s")
    return table


@app.command("run")
def run(
    name: Annotated[str, typer.Argument(help="pipeline to run: access-logs")] = "access-logs",
    topic: Annotated[str, typer.Option("--topic", help="topic the generated access-log lines go to")] = "access-logs",
    lines: Annotated[int, typer.Option("--lines", "-n", help="log lines to generate")] = 20_000,
    minutes: Annotated[int, typer.Option("--minutes", help="event-time span of the lines")] = 10,
    rate: Annotated[float, typer.Option("--rate", help="lines per second, 0 for as fast as possible")] = 2000,
    output: Annotated[str, typer.Option("--output", help="Parquet output directory")] = "./pipeline-output",
    checkpoint: Annotated[str | None, typer.Option("--checkpoint", help="Spark checkpoint directory")] = None,
    timeout_s: Annotated[float, typer.Option("--timeout", help="give up after this many seconds")] = 900,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
) -> None:
    """Generate access-log lines into a topic and count them per minute with Spark Structured Streaming."""
    if name != "access-logs":
        fail(f"unknown pipeline {name!r}; available: access-logs", 2)
    if lines <= 0 or minutes <= 0:
        fail("--lines and --minutes must be positive", 2)
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        fail("PySpark is not installed: pip install 'dmq[spark]'")
    from dmq.spark import pipeline

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    checkpoint = checkpoint or os.path.join(output, "_checkpoint")
    console.print(f"Starting Spark (local[2]); results go to {output} and topic {topic}-counts")
    spark = (SparkSession.builder.master("local[2]").appName("dmq-access-logs")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    generated = pipeline.make_lines(lines, minutes)
    produced = [0]
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            pipeline.generate(bootstrap_server, topic, generated, rate,
                              on_progress=lambda n: produced.__setitem__(0, n))
        except BaseException as e:  # noqa: BLE001 - reported on the main thread
            errors.append(e)

    generator = threading.Thread(target=produce, daemon=True)
    generator.start()
    queries = pipeline.start_queries(spark, bootstrap_server, topic, output, checkpoint)
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
                live.update(_status(produced[0], lines, consumed, {n: len(c) for n, c in counts.items()},
                                    counted, time.monotonic() - started))
                if counted["by_status"] >= lines and counted["by_path"] >= lines:
                    finished = True
                    break
                time.sleep(1)
    finally:
        pipeline.stop_queries(queries)
    if not finished:
        fail(f"the pipeline did not catch up within {timeout_s:.0f} s")
    top = sorted(pipeline.read_counts(spark, output, "by_status").items())[:5]
    console.print()
    console.print(f"Done: every line counted. Parquet: {output}/by_status, {output}/by_path; "
                  f"topic {topic}-counts. First windows by status:")
    for (window, status), count in top:
        console.print(f"  {window:%Y-%m-%d %H:%M}  status {status}: {count}")
    console.print(f"Read them with Spark: spark.read.parquet('{output}/by_path')"
                  ".groupBy('key').sum('count').show()")
    spark.stop()
