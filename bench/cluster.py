#!/usr/bin/env python3
"""Replicated throughput, latency and failover time: 3 brokers with RF=3 next to one broker.

In one run, on loopback: Debian's ZooKeeper plus three ``dmq server
--zookeeper`` brokers (default timeouts unless --override), and one
single-node ``dmq server``. For each it measures

- produce throughput with acks=all (confluent-kafka, linger.ms=5), a
  6-partition topic, RF=3 on the cluster and RF=1 on the single broker,
  ``--repeats`` times alternated (the order flips every repeat), each run's
  topic deleted once measured (``--keep-topics`` keeps them), reporting
  medians and the cluster/single ratio;
- end-to-end latency at 1000 records/s with acks=all (bench/latency.py);
- failover time on the cluster: a producer sends one acks=all record at a
  time to a RF=3 partition; its leader is SIGKILLed; the time from the kill
  to the first acknowledged record sent after it. Repeated ``--failovers``
  times, the killed broker restarting in between.

Prints a JSON line per measurement and a summary table. Every loop is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import cast

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from procs import ZK_JAR, Proc, Processes, broker, start_cluster, stop_on_sigterm  # noqa: E402

QUIET = {"log_level": 0}  # librdkafka's own log lines stay off the terminal


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds a process has used so far; its own when ``pid`` is ours."""
    if pid == os.getpid():
        t = os.times()
        return t.user, t.system
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def produce_throughput(bootstrap: str, rf: int, records: int, size: int, delete: bool = True,
                       brokers: tuple[int, ...] = ()) -> tuple[float, dict[str, float]]:
    """Records/s of one acks=all produce run, and the CPU seconds (user and system) the
    ``brokers`` (pids) together and this process (the client) used during it."""
    topic = "tp-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, 6, rf)])[topic].result(30)
    time.sleep(1.0)
    p = Producer({"bootstrap.servers": bootstrap, **QUIET, "acks": "all", "linger.ms": 5,
                  "batch.size": 262144, "queue.buffering.max.messages": 1000000})
    payload = b"x" * size
    p.produce(topic, payload)
    p.flush(30)
    before = {pid: cpu_seconds(pid) for pid in (os.getpid(), *brokers)}
    start = time.monotonic()
    for i in range(records):
        while True:
            try:
                p.produce(topic, payload, partition=i % 6)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    rate = records / (time.monotonic() - start)
    used = {pid: [a - b for a, b in zip(cpu_seconds(pid), was, strict=True)] for pid, was in before.items()}
    me = used.pop(os.getpid())
    cpu = {"brokers_user": sum(u for u, _s in used.values()), "brokers_sys": sum(s for _u, s in used.values()),
           "client_user": me[0], "client_sys": me[1]}
    if delete:  # the brokers give back the page cache the topic took before the next run
        admin.delete_topics([topic])[topic].result(30)
    return rate, cpu


def latency(bootstrap: str, rf: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, str(HERE / "latency.py"), bootstrap, "--acks", "all",
                          "--seconds", "8", "--replication-factor", str(rf)],
                         capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def leader_of(admin: AdminClient, topic: str) -> int:
    return int(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader)


def failover_once(brokers: dict[int, Proc], topic: str) -> float:
    live = ",".join(f"127.0.0.1:{b.port}" for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": live, **QUIET})
    leader = leader_of(admin, topic)
    p = Producer({"bootstrap.servers": live, **QUIET, "acks": "all", "linger.ms": 0, "enable.idempotence": True,
                  "topic.metadata.refresh.interval.ms": 250, "retry.backoff.ms": 50,
                  "retry.backoff.max.ms": 200, "message.timeout.ms": 60000})
    for _ in range(20):
        p.produce(topic, b"warm", partition=0)
    p.flush(20)
    acked_after: list[float] = []
    killed_at = time.monotonic()

    def delivered(err: object, msg: object) -> None:
        if err is None and not acked_after:
            acked_after.append(time.monotonic())

    brokers[leader].kill()
    killed_at = time.monotonic()
    deadline = killed_at + 60
    while not acked_after and time.monotonic() < deadline:
        p.produce(topic, b"after-kill", partition=0, on_delivery=delivered)
        p.poll(0.05)
    p.flush(60)
    took = (acked_after[0] if acked_after else float("nan")) - killed_at
    brokers[leader].spawn()
    brokers[leader].wait_listening()
    survivors = ",".join(f"127.0.0.1:{b.port}" for i, b in brokers.items() if i != leader)
    admin = AdminClient({"bootstrap.servers": survivors, **QUIET})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
            if len(md.isrs) == 3:
                break
        except KafkaException:
            pass
        time.sleep(0.5)
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--failovers", type=int, default=3)
    ap.add_argument("--override", action="append", default=[], help="key=value for every broker")
    ap.add_argument("--keep-topics", action="store_true",
                    help="keep each run's topic (by default deleted once measured, so that the page cache "
                         "earlier runs took is given back before the next one)")
    args = ap.parse_args()
    if not os.path.exists(ZK_JAR):
        print("ZooKeeper is not installed: apt-get install -y zookeeper", file=sys.stderr)
        return 2
    stop_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="dmq-bench-cluster-"))
    procs = Processes()
    results: list[dict[str, object]] = []
    try:
        brokers = start_cluster(procs, work, args.override)
        single = procs.start(broker(work, 0, None, args.override))
        single_port = single.port
        cluster_bs = ",".join(f"127.0.0.1:{b.port}" for b in brokers.values())
        single_bs = f"127.0.0.1:{single_port}"
        time.sleep(2)
        targets = (("single", single_bs, 1), ("cluster-rf3", cluster_bs, 3))
        pids = {"single": (single.pid,), "cluster-rf3": tuple(b.pid for b in brokers.values())}
        for size in (int(s) for s in args.sizes.split(",")):
            runs: dict[str, list[float]] = {label: [] for label, _bs, _rf in targets}
            cpus: dict[str, list[dict[str, float]]] = {label: [] for label, _bs, _rf in targets}
            for rep in range(args.repeats):  # alternated, the order flipping every repeat
                for label, bs, rf in targets if rep % 2 == 0 else reversed(targets):
                    rate, cpu = produce_throughput(bs, rf, args.records, size, not args.keep_topics,
                                                   pids[label])
                    runs[label].append(rate)
                    cpus[label].append(cpu)
            for label, _bs, _rf in targets:
                per_m = {k: round(statistics.median(c[k] for c in cpus[label]) * 1e6 / args.records, 3)
                         for k in cpus[label][0]}
                row = {"metric": "produce_acks_all", "target": label, "size": size,
                       "records_per_s_median": statistics.median(runs[label]), "runs": runs[label],
                       "cpu_s_per_million_records_median": per_m}
                print(json.dumps(row), flush=True)
                results.append(row)
        for label, bs, rf in (("single", single_bs, 1), ("cluster-rf3", cluster_bs, 3)):
            lat = latency(bs, rf)
            row = {"metric": "latency_acks_all_1000rps", "target": label, **lat}
            print(json.dumps(row), flush=True)
            results.append(row)
        if args.failovers > 0:
            admin = AdminClient({"bootstrap.servers": cluster_bs, **QUIET})
            admin.create_topics([NewTopic("failover", 1, 3)])["failover"].result(30)
            time.sleep(2)
            times = [failover_once(brokers, "failover") for _ in range(args.failovers)]
            row = {"metric": "failover_s", "target": "cluster-rf3", "median": statistics.median(times),
                   "runs": times}
            print(json.dumps(row), flush=True)
            results.append(row)
    except (RuntimeError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    print("\nsummary")
    for size in (int(s) for s in args.sizes.split(",")):
        s = next(r for r in results if r["metric"] == "produce_acks_all" and r["size"] == size and r["target"] == "single")
        c = next(r for r in results if r["metric"] == "produce_acks_all" and r["size"] == size and r["target"] == "cluster-rf3")
        sv, cv = float(s["records_per_s_median"]), float(c["records_per_s_median"])  # type: ignore[arg-type]
        print(f"  produce acks=all {size:>5} B  single {sv:>10,.0f}/s  RF=3 {cv:>10,.0f}/s  ratio {cv / sv:5.2f}")
        for r in (s, c):
            cpu = cast("dict[str, float]", r["cpu_s_per_million_records_median"])
            print(f"    CPU s per 1 M records, {r['target']:>11}: brokers user {cpu['brokers_user']:6.2f}"
                  f"  sys {cpu['brokers_sys']:6.2f}   client user {cpu['client_user']:6.2f}"
                  f"  sys {cpu['client_sys']:6.2f}")
    for r in results:
        if r["metric"] == "latency_acks_all_1000rps":
            print(f"  latency acks=all {r['target']:>12}  p50 {r.get('p50_ms')} ms  p99 {r.get('p99_ms')} ms")
        if r["metric"] == "failover_s":
            print(f"  failover (leader SIGKILL -> first acks=all ack)  median {r['median']:.2f} s  runs {r['runs']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
