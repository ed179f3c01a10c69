"""The dmq source, the sink and ``dmq pipeline run`` on a Spark standalone cluster.

A master and two workers from the pyspark package (``tests/support/spark.py``),
executors in their own processes: the same batch job (source and sink) gives the
same rows there as on local[2], and the access-log pipeline (streaming source
and sink) counts every line there as it does on local[2].
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from support.broker import BrokerProcess  # noqa: E402
from support.spark import StandaloneCluster  # noqa: E402

JOB = Path(__file__).parent.parent / "support" / "spark_job.py"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1) as c:
        yield c


def _fill(b: BrokerProcess, topic: str) -> int:
    """3 partitions: compressed batches, headers, null keys and values, and an aborted transaction
    (and the sink's topics, TOPIC-cluster and TOPIC-local)."""
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic(t, 3, 1) for t in (topic, f"{topic}-cluster", f"{topic}-local")]).values():
        f.result(10)
    p = Producer({"bootstrap.servers": b.bootstrap, "compression.type": "lz4", "linger.ms": 5})
    for i in range(3000):
        p.produce(topic, partition=i % 3, key=None if i % 4 == 0 else b"k%d" % i,
                  value=None if i % 50 == 7 else b"value %d " % i * (1 + i % 5),
                  headers=[("n", b"%d" % i)] if i % 2 else None)
    assert p.flush(30) == 0
    tx = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": f"{topic}-tx"})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(30):
        tx.produce(topic, partition=i % 3, value=b"aborted %d" % i)
    tx.abort_transaction(30)
    return 3000


def _run_job(master: str, b: BrokerProcess, topic: str, sink_topic: str, result: Path,
             cluster: StandaloneCluster) -> dict[str, Any]:
    res = subprocess.run([sys.executable, str(JOB), master, b.bootstrap, topic, sink_topic, str(result)],
                         capture_output=True, text=True, timeout=240, env=cluster.driver_env())
    assert res.returncode == 0, f"{master}: {res.stderr[-3000:]}\n{cluster.log_tail()}"
    return dict(json.loads(result.read_text()))


def _topic(b: BrokerProcess, topic: str) -> Counter[tuple[Any, ...]]:
    """A topic's records as a multiset of (partition, key, value, headers)."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "cluster-check", "enable.partition.eof": True})
    parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out: Counter[tuple[Any, ...]] = Counter()
    done: set[int] = set()
    while len(done) < len(parts):
        m: Any = c.poll(10)
        assert m is not None, f"{topic}: the consumer stalled"
        if m.error() is not None:
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            done.add(m.partition())
            continue
        out[(m.partition(), m.key(), m.value(), tuple(m.headers() or ()))] += 1
    c.close()
    return out


@pytest.mark.slow
def test_source_and_sink_on_a_standalone_cluster_as_on_local(spark, cluster: StandaloneCluster,  # noqa: ANN001
                                                             broker: BrokerProcess, tmp_path: Path) -> None:
    from support import spark_job

    topic = "cluster-src"
    n = _fill(broker, topic)
    on_cluster = _run_job(cluster.master_url, broker, topic, f"{topic}-cluster", tmp_path / "result.json", cluster)
    # The same job on the tests' local[2] session (this process's JVM).
    on_local = json.loads(json.dumps(spark_job.run(spark, broker.bootstrap, topic, f"{topic}-local")))

    print("seconds on the cluster:", on_cluster["seconds"], "on local[2]:", on_local["seconds"])
    # Tasks ran in the two workers' executors (their own JVMs), with this interpreter and this dmq.
    executors = {t["jvm_pid"]: t["jvm"] for t in on_cluster["tasks"]}
    assert len(executors) == 2 and all("CoarseGrainedExecutorBackend" in j for j in executors.values()), executors
    assert {t["python"] for t in on_cluster["tasks"]} == {sys.executable}
    import dmq

    assert {t["dmq"] for t in on_cluster["tasks"]} == {os.path.dirname(dmq.__file__)}
    assert len({t["jvm_pid"] for t in on_local["tasks"]}) == 1  # local[2]: the driver's JVM

    # The same rows, read by at least 4 tasks; the aborted transaction is not among them.
    assert on_cluster["read_tasks"] >= 4
    assert len(on_cluster["rows"]) == n and on_cluster["rows"] == on_local["rows"]
    assert not any(r[6] and bytes.fromhex(r[6]).startswith(b"aborted") for r in on_cluster["rows"])
    # The sink wrote the same records from the cluster's executors as from local[2].
    written = _topic(broker, f"{topic}-cluster")
    assert sum(written.values()) == n and written == _topic(broker, f"{topic}-local")


@pytest.mark.slow
def test_pipeline_command_on_a_standalone_cluster(cluster: StandaloneCluster, broker: BrokerProcess,
                                                  tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from dmq.spark import pipeline

    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "dmq", "pipeline", "run", "access-logs", "-b", broker.bootstrap,
                          "--topic", "cluster-logs", "--lines", "2000", "--minutes", "3", "--rate", "0",
                          "--output", str(out), "--timeout", "240", "--master", cluster.master_url],
                         capture_output=True, text=True, timeout=300, env={**cluster.driver_env(), "COLUMNS": "120"})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:] + cluster.log_tail()
    assert f"Starting Spark ({cluster.master_url})" in res.stdout
    assert "all 2,000 delivered lines counted, checked window by window" in res.stdout
    master_log = (cluster.base / "master.log").read_text()
    assert "Registering app dmq-access-logs" in master_log
    # The Parquet results are the counts computed in Python, as on local[2].
    want_status, want_path = pipeline.expected_counts(pipeline.make_lines(2000, 3))
    for name, want in (("by_status", {(w, str(s)): c for (w, s), c in want_status.items()}),
                       ("by_path", dict(want_path))):
        table = pq.read_table(out / name).to_pydict()
        got: Counter[tuple[Any, str]] = Counter()
        for w, k, c in zip(table["window_start"], table["key"], table["count"], strict=True):
            got[(w.replace(tzinfo=None), k)] += c
        assert got == Counter({(w.replace(tzinfo=None), k): c for (w, k), c in want.items()}), name
