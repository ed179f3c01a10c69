"""Helpers for tests that read dmq topics with Spark, and a Spark standalone cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from support.broker import BrokerProcess, free_port


def reader(spark: Any, b: BrokerProcess, topic: str, **options: str) -> Any:
    """A batch DataFrame of a topic through the dmq source."""
    r = spark.read.format("dmq").option("bootstrap.servers", b.bootstrap).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def copy_query(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: str, *,
               delay_ms: int = 0, exactly_once: bool = False, same_partitions: bool = False) -> Any:
    """Start an ``availableNow`` streaming query copying ``source`` (key, value) to ``sink``
    with the dmq source and sink. ``delay_ms`` slows every row down in the JVM
    (``java.lang.Thread.sleep`` through ``reflect``, its result cut to ''), so a test can
    kill the query while it writes; the output is the input whatever the delay. With
    ``same_partitions`` each row goes to the sink partition numbered as its source
    partition (else the sink partitions by key)."""
    slow = f"left(reflect('java.lang.Thread', 'sleep', CAST({int(delay_ms)} AS BIGINT)), 0)"
    columns = ["key", f"concat(CAST(value AS STRING), {slow}) AS value"]
    if same_partitions:
        columns.append("partition")
    df = (spark.readStream.format("dmq").option("bootstrap.servers", bootstrap).option("subscribe", source)
          .option("startingOffsets", "earliest").load()
          .selectExpr(*columns))
    w = (df.writeStream.format("dmq").option("bootstrap.servers", bootstrap).option("topic", sink)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True))
    if exactly_once:
        w = w.option("exactlyOnce", "true")
    return w.start()


class StandaloneCluster:
    """A Spark standalone cluster from the pyspark package on loopback: a master and
    ``workers`` workers (each with ``cores`` cores), started with pyspark's own
    ``bin/spark-class``. Executors are processes the workers start; their Python
    workers run this interpreter (PYSPARK_PYTHON), so dmq is importable there.

    Every wait is bounded; ``close()`` stops every process it started (with their
    executors: each runs in a process group of its own)."""

    MASTER = "org.apache.spark.deploy.master.Master"
    WORKER = "org.apache.spark.deploy.worker.Worker"

    def __init__(self, base: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        import pyspark

        self.base = base
        self.spark_home = os.path.dirname(pyspark.__file__)
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port = free_port()
        self.procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        base.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "SPARK_HOME": self.spark_home, "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_LOG_DIR": str(base / "logs"), "SPARK_WORKER_DIR": str(base / "work"),
                    "PYSPARK_PYTHON": sys.executable, "SPARK_DAEMON_MEMORY": "256m",
                    "SPARK_NO_DAEMONIZE": "1"}

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def driver_env(self) -> dict[str, str]:
        """The environment for a driver process of this cluster: on loopback, this interpreter."""
        return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.base / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen([os.path.join(self.spark_home, "bin", "spark-class"), *args],
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self.env, start_new_session=True)
        self.procs.append((name, proc, log))
        return proc, log

    def _wait_for(self, name: str, proc: subprocess.Popen[bytes], log: Path, text: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            if text in log.read_text(errors="replace"):
                return
            if proc.poll() is not None:
                raise RuntimeError(f"spark {name} exited ({proc.returncode}):\n{self.log_tail(log)}")
            time.sleep(0.2)
        raise RuntimeError(f"spark {name} did not log {text!r} in time:\n{self.log_tail(log)}")

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        deadline = time.monotonic() + timeout
        try:
            master, log = self._spawn("master", self.MASTER, "--host", "127.0.0.1", "--port", str(self.port),
                                      "--webui-port", str(free_port()))
            self._wait_for("master", master, log, "I have been elected leader", deadline)
            started = [self._spawn(f"worker-{i}", self.WORKER, self.master_url, "--host", "127.0.0.1",
                                   "--cores", str(self.cores), "--memory", self.memory,
                                   "--webui-port", str(free_port()), "--work-dir", str(self.base / f"work-{i}"))
                       for i in range(self.workers)]
            for i, (proc, wlog) in enumerate(started):
                self._wait_for(f"worker-{i}", proc, wlog, "Successfully registered with master", deadline)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """SIGTERM to each process group (workers stop their executors), SIGKILL what is left."""
        for _name, proc, _log in reversed(self.procs):
            _signal_group(proc, signal.SIGTERM)
        for _name, proc, _log in reversed(self.procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)  # executors and Python workers left in the group
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()

    def log_tail(self, log: Path | None = None, chars: int = 3000) -> str:
        logs = [log] if log is not None else [p for _n, _proc, p in self.procs]
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in logs if p.exists())


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
