#!/usr/bin/env python3
"""One acks=all record at a time on an RF=3 partition, before and after ``__consumer_offsets``
exists: what idle followed partitions cost the replicated round trip.

Starts Debian's ZooKeeper and three ``dmq server --zookeeper`` brokers on loopback,
measures ``--round-trips`` single-record round trips (``latency_sweep.round_trip``)
``--repeats`` times, makes a consumer group commit an offset (which creates the 50
partitions of ``__consumer_offsets``, RF=3), measures again, and prints one JSON line per
measurement and the medians. Every loop is bounded; the processes stop on every way out.
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
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic("rt-commit", 1, 3)])["rt-commit"].result(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rt", "log_level": 0})
    try:
        consumer.commit(offsets=[TopicPartition("rt-commit", 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topic = admin.list_topics(timeout=10).topics.get("__consumer_offsets")
        if topic is not None and all(p.leader >= 0 for p in topic.partitions.values()):
            return len(topic.partitions)
        time.sleep(0.5)
    raise TimeoutError("__consumer_offsets has no leader for every partition after 30 s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--round-trips", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    stop_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="dmq-bench-rt-"))
    procs = Processes()
    medians: dict[str, float] = {}
    try:
        bootstrap = bootstrap_of(list(start_cluster(procs, work, []).values()))
        time.sleep(2)
        for state in ("fresh", "with __consumer_offsets"):
            if state != "fresh":
                print(json.dumps({"offsets_partitions": create_offsets_topic(bootstrap)}), flush=True)
            p50s = []
            for repeat in range(args.repeats):
                trip = round_trip(bootstrap, 3, args.round_trips)
                print(json.dumps({"cluster": state, "repeat": repeat, **trip}), flush=True)
                p50s.append(trip["p50_ms"])
            medians[state] = statistics.median(p50s)
    except (RuntimeError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    for state, p50 in medians.items():
        print(f"RF=3 acks=all round trip, {state}: p50 {p50:.3f} ms (median of {args.repeats})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
