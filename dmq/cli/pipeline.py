"""``dmq pipeline run access-logs``: the log-analytics pipeline against a running broker.

Expected failures (a broker that cannot be reached or goes away, an earlier run's state in
``--output``, no Java 17, no PySpark, a query that fails, a timeout) are one ``error:`` line
and exit 1; bad usage is exit 2. Spark's JVM and its Python workers write their log lines
to a file (named when something fails) unless ``dmq --verbose`` or ``--debug`` is given.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, NoReturn

import typer
from rich.live import Live
from rich.table import Table

from dmq.cli.common import (
    VERBOSITY,
    Bootstrap,
    bootstrap_addresses,
    fail,
    kafka_error_text,
    make_console,
    reach_reason,
)
from dmq.cli.help import Typer

app = Typer(help="Run data pipelines on Spark.", no_args_is_help=True)
console = make_console()

JAVA_HINT = "Spark needs Java 17 or newer: apt-get install openjdk-17-jre-headless"
PYSPARK_HINT = "run .venv/bin/pip install -e '.[spark]' in the dmq checkout"
# Seconds a TCP connect to a bootstrap address may take; how long the broker may stay
# unreachable during a run before the run gives up.
PROBE_TIMEOUT = 3.0
LOST_GRACE = 10.0
SERIES = ("by_status", "by_path")


def _status(produced: int, total: int, consumed: int, windows: dict[str, int], counted: dict[str, int],
            elapsed: float) -> Table:
    table = Table(title="access-logs pipeline", title_justify="left", show_header=False)
    table.add_column("stage")
    table.add_column("progress", justify="right", overflow="fold")
    table.add_row("log lines delivered to dmq", f"{produced:,} / {total:,}")
    table.add_row("read by Spark", f"{consumed:,}")
    for name in SERIES:
        table.add_row(f"windows written ({name})", f"{windows.get(name, 0):,} covering {counted.get(name, 0):,} lines")
    table.add_row("elapsed", f"{elapsed:,.1f} s")
    return table


def check_java() -> None:
    """Fail with one line unless a Java 17+ runtime is on PATH (or in JAVA_HOME)."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH"
        fail(f"{where}; {JAVA_HINT}")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        fail(f"cannot run {java}: {e}; {JAVA_HINT}")
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = 0 if m is None else int(m.group(2) if m.group(1) == "1" and m.group(2) else m.group(1))
    if major < 17:
        fail(f"{java} is Java {major or 'of an unknown version'}; {JAVA_HINT}")


def _unreachable(bootstrap: str) -> str | None:
    """None if a bootstrap address accepts a TCP connection, else why none did.

    Private to the pipeline: it probes again during a run, where failing is its caller's
    decision (dmq.cli.common.ensure_reachable exits at once)."""
    reasons: list[str] = []
    for host, port in bootstrap_addresses(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=PROBE_TIMEOUT):
                return None
        except OSError as e:
            reason = reach_reason(e, host)
            if reason not in reasons:
                reasons.append(reason)
    return "; ".join(reasons)


def _state_paths(output: str, checkpoint: str) -> list[str]:
    """What a run leaves behind: its results and the checkpoints of its two queries."""
    return [os.path.join(d, name) for d in (output, checkpoint) for name in SERIES]


# A Python exception's last line in Spark's error text, e.g. "dmq.spark.sink.DmqSinkError: ...".
_PY_ERROR = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception): (.+)$")
_WRAPPERS = ("py4j.", "pyspark.", "org.apache.", "java.", "scala.")


def _cause(text: str) -> str:
    """One line out of a Spark exception's text (which holds Java and Python stack traces):
    the first Python exception raised by code other than Spark's own wrappers."""
    for raw in text.splitlines():
        line = raw.strip()
        m = _PY_ERROR.match(line)
        if m and not line.startswith(_WRAPPERS):
            return m.group(1).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), "") or "(no message)"
    return first if len(first) <= 300 else first[:297] + "..."


class _SparkReads:
    """Rows the streaming query has read, from its progress updates. Spark keeps only the
    last ``spark.sql.streaming.numRecentProgressUpdates`` (100) of them, fewer than a long
    run's batches, so each batch's rows are kept here by batch id as they are seen; an idle
    update repeats the last batch's id with 0 rows, hence the max."""

    def __init__(self) -> None:
        self._rows: dict[int, int] = {}

    def update(self, progress: Iterable[Mapping[str, Any]]) -> int:
        for p in progress:
            batch = int(p["batchId"])
            self._rows[batch] = max(self._rows.get(batch, 0), int(p["numInputRows"]))
        return sum(self._rows.values())


class _Run:
    """The state of one run, for its failure messages."""

    def __init__(self, bootstrap: str, lines: int, log_path: str | None) -> None:
        self.bootstrap = bootstrap
        self.lines = lines
        self.log_path = log_path
        self.delivered = 0
        self.counted = 0

    def where(self) -> str:
        return f"{self.delivered:,} of {self.lines:,} lines delivered, {self.counted:,} counted"

    def fail(self, message: str, detail: str | None = None) -> NoReturn:
        if VERBOSITY.debug and detail:
            print(detail, file=sys.stderr)
        why = _unreachable(self.bootstrap)
        if why is not None:
            message = f"lost {self.bootstrap} during the run: {why}; is `dmq server` still running?"
        log = f"; Spark's log: {self.log_path}" if self.log_path else ""
        fail(f"{message} ({self.where()}){log}")


def _master_address(master: str) -> tuple[str, int] | None:
    """(host, port) of a standalone master URL (spark://HOST:PORT), None for other masters;
    a malformed spark:// URL is a usage error."""
    if not master.startswith("spark://"):
        return None
    host, _, port = master[len("spark://"):].rpartition(":")
    if not host or not port.isdigit():
        fail(f"--master {master!r}: a standalone master is spark://HOST:PORT", 2)
    return host, int(port)


def _start_spark(quiet: bool, master: str = "local[2]") -> tuple[Any, str | None]:
    """A session on ``master`` whose Python workers run this interpreter (on a cluster, every
    worker needs it at the same path). Quiet: the JVM's stderr (its log, the Python workers'
    output and their Kafka clients' log lines) goes to a file."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need this venv (pyarrow, dmq)
    builder = (SparkSession.builder.master(master).appName("dmq-access-logs")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.streaming.stopTimeout", "15s")
               .config("spark.pyspark.python", sys.executable))
    if not quiet:
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        return spark, None
    fd, log_path = tempfile.mkstemp(prefix="dmq-pipeline-", suffix=".log")
    handler = logging.FileHandler(log_path)
    py4j = logging.getLogger("py4j")
    py4j.addHandler(handler)
    py4j.propagate = False
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)  # the JVM (and every process it starts) inherits this stderr
    try:
        spark = builder.getOrCreate()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)
    spark.sparkContext.setLogLevel("ERROR")
    return spark, log_path


@app.command("run")
def run(
    name: Annotated[str, typer.Argument(
        metavar="PIPELINE", help="pipeline to run: access-logs")] = "access-logs",
    topic: Annotated[str, typer.Option(
        "--topic", metavar="TOPIC", help="topic the generated access-log lines go to")] = "access-logs",
    lines: Annotated[int, typer.Option("--lines", "-n", metavar="N", help="log lines to generate")] = 20_000,
    minutes: Annotated[int, typer.Option(
        "--minutes", metavar="N", help="event-time span of the lines, in minutes")] = 10,
    rate: Annotated[float, typer.Option(
        "--rate", metavar="LINES_PER_S", help="lines per second, 0 for as fast as possible")] = 2000,
    output: Annotated[str, typer.Option(
        "--output", metavar="DIR", help="directory for the Parquet results")] = "./pipeline-output",
    checkpoint: Annotated[str | None, typer.Option(
        "--checkpoint", metavar="DIR", help="Spark checkpoint directory [default: OUTPUT/_checkpoint]")] = None,
    reset: Annotated[bool, typer.Option(
        "--reset", help="delete an earlier run's results and checkpoint (only those) first")] = False,
    timeout_s: Annotated[float, typer.Option(
        "--timeout", metavar="SECONDS", help="give up after this many seconds")] = 900,
    master: Annotated[str, typer.Option(
        "--master", metavar="URL",
        help="Spark master: local[N], or spark://HOST:PORT of a standalone cluster (its workers need "
             "this Python, with dmq, at the same path, and --output on storage they share)")] = "local[2]",
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
) -> None:
    """Generate access-log lines into a topic and count them per minute with Spark Structured Streaming.

    Each run reads only the lines it writes (from the topic's end offsets at its start)
    and succeeds only when its windowed counts, in Parquet and in the topic TOPIC-counts,
    equal the counts of the delivered lines. Spark's own log goes to a file unless
    `dmq --verbose` is given."""
    if name != "access-logs":
        fail(f"unknown pipeline {name!r}; available: access-logs", 2)
    if lines <= 0 or minutes <= 0:
        fail("--lines and --minutes must be positive", 2)
    if rate < 0:
        fail("--rate must be 0 (as fast as possible) or positive", 2)
    if timeout_s <= 0:
        fail("--timeout must be positive", 2)
    bootstrap_addresses(bootstrap_server)  # a malformed list is a usage error
    master_address = _master_address(master)
    if master_address is not None:  # executors resolve relative paths in their own directories
        output = os.path.abspath(output)
        checkpoint = None if checkpoint is None else os.path.abspath(checkpoint)
    checkpoint = checkpoint or os.path.join(output, "_checkpoint")
    for path in (output, checkpoint):
        if os.path.exists(path) and not os.path.isdir(path):
            fail(f"{path} is not a directory", 2)
    earlier = [p for p in _state_paths(output, checkpoint) if os.path.lexists(p)]
    if earlier and not reset:
        holder = output if any(os.path.lexists(os.path.join(output, n)) for n in SERIES) else checkpoint
        fail(f"{holder} holds an earlier run's results or checkpoint (whose watermark would drop "
             f"this run's lines as late data); pass a new --output or add --reset")
    why = _unreachable(bootstrap_server)
    if why is not None:
        fail(f"cannot reach {bootstrap_server}: {why}; is `dmq server` running? "
             "(pass --bootstrap-server HOST:PORT)")
    for module, label in (("pyspark", "PySpark"), ("pyarrow", "pyarrow")):  # the workers need pyarrow
        try:
            importlib.import_module(module)
        except ImportError:
            fail(f"{label} is not installed: {PYSPARK_HINT}")
    check_java()
    if master_address is not None:
        try:
            with socket.create_connection(master_address, timeout=PROBE_TIMEOUT):
                pass
        except OSError as e:
            fail(f"cannot reach the Spark master {master}: {reach_reason(e, master_address[0])}")
    try:
        for path in earlier:
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
        os.makedirs(output, exist_ok=True)
    except OSError as e:
        fail(f"cannot prepare {output}: {e.strerror or e}: {e.filename}")
    if earlier:
        console.print(f"Removed an earlier run's {', '.join(sorted({os.path.basename(p) for p in earlier}))} "
                      f"results and checkpoints from {output}"
                      + ("" if checkpoint.startswith(os.path.join(output, "")) else f" and {checkpoint}"))
    _run(topic, lines, minutes, rate, output, checkpoint, timeout_s, bootstrap_server, master)


def _run(topic: str, lines: int, minutes: int, rate: float, output: str, checkpoint: str,
         timeout_s: float, bootstrap: str, master: str = "local[2]") -> None:
    from dmq.spark import pipeline

    quiet = not (VERBOSITY.verbose or VERBOSITY.debug)
    client_conf: dict[str, Any] = {"log_level": 0} if quiet else {}
    probe = _Run(bootstrap, lines, None)
    try:
        starting = pipeline.end_offsets(bootstrap, topic, client_conf)
        counts_starting = pipeline.end_offsets(bootstrap, f"{topic}-counts", client_conf)
    except Exception as e:  # noqa: BLE001 - Kafka errors and timeouts
        probe.fail(f"cannot read the offsets of {topic} from {bootstrap}: {kafka_error_text(e)}")
    console.print(f"Starting Spark ({master}); results go to {output} and topic {topic}-counts")
    spark, log_path = _start_spark(quiet, master)
    state = _Run(bootstrap, lines, log_path)
    generated = pipeline.make_lines(lines, minutes)
    generator_done = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            pipeline.generate(bootstrap, topic, generated, rate, client_conf=client_conf,
                              on_progress=lambda n: setattr(state, "delivered", n))
        except BaseException as e:  # noqa: BLE001 - reported on the main thread
            errors.append(e)
        finally:
            generator_done.set()

    generator = threading.Thread(target=produce, daemon=True)
    started = time.monotonic()  # the generator's first line, not the queries' start, seconds later
    generator.start()
    queries = pipeline.start_queries(spark, bootstrap, topic, output, checkpoint,
                                     starting_offsets=starting, client_conf=client_conf)
    deadline = started + timeout_s
    try:
        _follow(spark, queries, state, errors, generator_done, output, deadline, started)
    except BaseException as e:
        pipeline.stop_queries(queries, wait_s=0)  # failed or interrupted: no waiting
        if isinstance(e, KeyboardInterrupt) and log_path is not None:
            os.remove(log_path)
        raise
    console.print("Every line is counted; letting Spark finish its last micro-batches, then "
                  "checking every window...")
    # What is left is the end marker's batch: seconds, unless the broker goes away.
    if not pipeline.stop_queries(queries, wait_s=min(120.0, max(30.0, deadline - time.monotonic()))):
        failed = next((q for q in queries if q.exception() is not None), None)
        if failed is not None:
            state.fail(f"Spark query {failed.name} failed: {_cause(str(failed.exception()))}",
                       str(failed.exception()))
        state.fail("Spark did not finish its last micro-batches in time")
    _verify(spark, state, pipeline.expected_counts(generated), output, topic, counts_starting, client_conf)
    top = sorted(pipeline.read_counts(spark, output, "by_status").items())[:5]
    console.print()
    console.print(f"Done: all {state.delivered:,} delivered lines counted, checked window by window "
                  f"in Parquet ({output}/by_status, {output}/by_path) and in topic {topic}-counts. "
                  "First windows by status:")
    for (window, status), count in top:
        console.print(f"  {window:%Y-%m-%d %H:%M}  status {status}: {count}")
    console.print("Read them with Spark:")
    # One line however narrow the terminal: wrapped, it broke inside the code ('.show' / '()').
    console.print(f"  spark.read.parquet('{output}/by_path').groupBy('key').sum('count').show()",
                  soft_wrap=True, markup=False, highlight=False)
    spark.stop()
    if log_path is not None:
        os.remove(log_path)


def _follow(spark: Any, queries: list[Any], state: _Run, errors: list[BaseException],
            generator_done: threading.Event, output: str, deadline: float, started: float) -> None:
    """Show progress until every delivered line is counted; fail on the first problem."""
    from dmq.spark import pipeline

    lost_since: float | None = None
    reads = _SparkReads()
    with Live(console=console, refresh_per_second=2) as live:
        while True:
            if errors:
                e = errors[0]
                state.fail(f"the generator failed: {_cause(str(e))}", repr(e))
            for q in queries:
                if q.exception() is not None:
                    state.fail(f"Spark query {q.name} failed: {_cause(str(q.exception()))}",
                               str(q.exception()))
            if _unreachable(state.bootstrap) is None:
                lost_since = None
            elif lost_since is None:
                lost_since = time.monotonic()
            elif time.monotonic() - lost_since >= LOST_GRACE:
                state.fail("the broker went away")  # _Run.fail names it and why
            counts = {n: pipeline.read_counts(spark, output, n) for n in SERIES}
            counted = {n: sum(c.values()) for n, c in counts.items()}
            state.counted = min(counted.values())
            # Every line read, without the end marker that follows them (the run's only other record).
            consumed = min(reads.update(queries[0].recentProgress), state.lines)
            live.update(_status(state.delivered, state.lines, consumed,
                                {n: len(c) for n, c in counts.items()}, counted, time.monotonic() - started))
            if generator_done.is_set() and not errors and state.counted >= state.delivered:
                return
            if time.monotonic() >= deadline:
                state.fail(f"the pipeline did not catch up within {deadline - started:.0f} s")
            time.sleep(1)


def _verify(spark: Any, state: _Run, expected: tuple[Any, Any], output: str, topic: str,
            counts_starting: str, client_conf: dict[str, Any]) -> None:
    """Success only if both sinks hold exactly the counts of the delivered lines."""
    from dmq.spark import pipeline

    want_status, want_path = expected
    want = {"by_status": {(w, str(k)): c for (w, k), c in want_status.items()},
            "by_path": {(w, str(k)): c for (w, k), c in want_path.items()}}
    for name in SERIES:
        got = pipeline.read_counts(spark, output, name)
        if got != want[name]:
            wrong = sum(1 for k in set(got) | set(want[name]) if got.get(k) != want[name].get(k))
            state.fail(f"the counts in {output}/{name} differ from those of the delivered lines in "
                       f"{wrong:,} of {len(want[name]):,} windows and keys: "
                       f"{sum(got.values()):,} lines counted")
    try:
        records = pipeline.read_counts_topic(state.bootstrap, f"{topic}-counts", counts_starting, client_conf)
    except Exception as e:  # noqa: BLE001 - Kafka errors and timeouts
        state.fail(f"cannot read {topic}-counts back: {kafka_error_text(e)}")
    for name in SERIES:
        got_topic = {k: c for (series, k), c in records.items() if series == name}
        if got_topic != want[name]:
            state.fail(f"the counts in topic {topic}-counts differ from those of the delivered lines "
                       f"for {name}: {len(got_topic):,} windows and keys, {len(want[name]):,} expected")
