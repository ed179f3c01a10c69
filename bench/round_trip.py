#!/usr/bin/env python3
"""One acks=all record at a time on an RF=3 partition, before and after ``__consumer_offsets``
exists: what idle followed partitions cost the replicated round trip, with and without
fetch sessions (KIP-227).

Starts two clusters side by side, each Debian's ZooKeeper and three ``dmq server
--zookeeper`` brokers on loopback: one as configured by default, one with
``max.incremental.fetch.session.cache.slots=0`` (every follower fetch a full one, as
before fetch sessions). Measures ``--round-trips`` single-record round trips
(``latency_sweep.round_trip``) ``--repeats`` times on each, alternating, makes a
consumer group commit an offset on each (which creates the 50 partitions of
``__consumer_offsets``, RF=3), measures again, and prints one JSON line per measurement,
the medians and their ratios. ``--only-sessions`` starts the first cluster only. Every
loop is bounded; the processes stop on every way out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from latency_sweep import round_trip  # noqa: E402
from procs import Processes, bootstrap_of, start_cluster, stop_on_sigterm  # noqa: E402


def create_offsets_topic(bootstrap: str) -> int:
    """Commit one offset with a consumer group; returns __consumer_offsets' partition count."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic("rt-commit", 1, 3)])["rt-commit"].result(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rt", "log_level": 0})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                consumer.commit(offsets=[TopicPartition("rt-commit", 0, 0)], asynchronous=False)
                break
            except KafkaException as e:
                # The new __consumer_offsets partition may still be loading
                # (COORDINATOR_LOAD_IN_PROGRESS): retriable, as a client's own commits retry.
                err = e.args[0]
                loading = err.code() in (KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                         KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR)
                if not (loading or err.retriable()) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topic = admin.list_topics(timeout=10).topics.get("__consumer_offsets")
        if topic is not None and all(p.leader >= 0 for p in topic.partitions.values()):
            return len(topic.partitions)
        time.sleep(0.5)
    raise TimeoutError("__consumer_offsets has no leader for every partition after 30 s")


CLUSTERS = {"fetch sessions": [], "no fetch sessions": ["max.incremental.fetch.session.cache.slots=0"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--round-trips", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only-sessions", action="store_true", help="start the default cluster only")
    args = ap.parse_args()
    stop_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="dmq-bench-rt-"))
    procs = Processes()
    clusters = dict(list(CLUSTERS.items())[:1]) if args.only_sessions else CLUSTERS
    medians: dict[tuple[str, str], float] = {}
    try:
        bootstraps = {}
        for name, overrides in clusters.items():
            sub = work / name.replace(" ", "-")
            sub.mkdir()
            bootstraps[name] = bootstrap_of(list(start_cluster(procs, sub, overrides).values()))
        time.sleep(2)
        for state in ("fresh", "with __consumer_offsets"):
            p50s: dict[str, list[float]] = {name: [] for name in clusters}
            for name in clusters:
                if state != "fresh":
                    print(json.dumps({"cluster": name, "offsets_partitions":
                                      create_offsets_topic(bootstraps[name])}), flush=True)
            for repeat in range(args.repeats):
                for name in clusters:
                    trip = round_trip(bootstraps[name], 3, args.round_trips)
                    print(json.dumps({"cluster": name, "state": state, "repeat": repeat, **trip}),
                          flush=True)
                    p50s[name].append(trip["p50_ms"])
            for name in clusters:
                medians[(name, state)] = statistics.median(p50s[name])
    except (RuntimeError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    for (name, state), p50 in medians.items():
        print(f"RF=3 acks=all round trip, {name}, {state}: p50 {p50:.3f} ms (median of {args.repeats})")
    if not args.only_sessions:
        for state in ("fresh", "with __consumer_offsets"):
            ratio = medians[("no fetch sessions", state)] / medians[("fetch sessions", state)]
            print(f"{state}: fetch sessions make the round trip {ratio:.2f}x as fast")
    return 0


if __name__ == "__main__":
    sys.exit(main())
