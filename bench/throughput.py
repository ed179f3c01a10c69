#!/usr/bin/env python3
"""Produce N records to a fresh topic, then consume them back; one JSON line of results.

    python bench/throughput.py 127.0.0.1:9092 -p 6 -s 100 --acks all -n 1000000

The topic (``bench-<random>``) is created with the given partition count and
replication factor 1. Produce: librdkafka (confluent-kafka) as fast as it
accepts records, ``linger.ms=5``; every delivery report is counted, and the
phase is ``ok`` only when every record was delivered. The partitions' high
watermarks (ListOffsets latest) are recorded next to the delivered count; a
difference is reported (``hwm_matches``), not failed: the reference broker's
stays a few % short of what it acknowledged, for good. Consume: a consumer
assigned to every partition from the beginning reads until it has every
delivered record, which is the check that they are all there. Rates are records/s and MB/s of
values over the phase's wall time. With ``--broker-pid`` the broker's resident
memory after the produce phase and the CPU it used during it are reported too, and
always the memory the whole machine allocated during it (``machine_allocated_mb``,
/proc/vmstat). Every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from procs import sched_seconds  # noqa: E402


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def pages_allocated() -> int | None:
    """Pages the kernel has allocated since boot, machine-wide (/proc/vmstat pgalloc_*)."""
    try:
        with open("/proc/vmstat") as f:
            return sum(int(line.split()[1]) for line in f if line.startswith("pgalloc_"))
    except OSError:
        return None


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until every partition has a leader
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions \
                and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {topic} has no leader for every partition after 30 s")


def produce(bootstrap: str, topic: str, records: int, size: int, acks: str,
            timeout: float) -> dict[str, Any]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576, "log_level": 0})
    value = os.urandom(size)
    delivered = [0, 0]  # ok, failed

    def report(err: Any, _msg: Any) -> None:
        delivered[1 if err is not None else 0] += 1

    pages = pages_allocated()
    started = time.monotonic()
    deadline = started + timeout
    sent = 0
    while sent < records and time.monotonic() < deadline:
        try:
            producer.produce(topic, value, on_delivery=report)
            sent += 1
        except BufferError:
            producer.poll(0.01)
    left = producer.flush(max(0.0, deadline - time.monotonic()))
    seconds = time.monotonic() - started
    ok = delivered[0] == records and left == 0
    after = pages_allocated()
    # Memory the machine handed out while producing (the client's, and the broker's page
    # cache or heap). In a VM whose host backs guest memory on first touch, fresh pages
    # cost (docs/benchmarks.md).
    allocated = None if pages is None or after is None else round((after - pages) * 4096 / 1e6)
    return {"ok": ok, "records": records, "delivered_ok": delivered[0], "failed": delivered[1],
            "seconds": round(seconds, 3), "records_per_s": round(delivered[0] / seconds, 1),
            "mb_per_s": round(delivered[0] * size / 1e6 / seconds, 3),
            "machine_allocated_mb": allocated}


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-hwm", "log_level": 0})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))
    finally:
        c.close()


def consume(bootstrap: str, topic: str, partitions: int, records: int, size: int,
            timeout: float) -> dict[str, Any]:
    # fetch.queue.backoff.ms=0: with librdkafka's default (1 s), a consumer whose local queue
    # passes queued.min.messages postpones its next fetch by a whole second. Six partitions of
    # 1 MB per fetch (what Kafka, dmq and the reference all send) pass it after two fetches, so
    # a 1 M-record read took 1-2 s or 4-7 s depending on how many such seconds it hit, on
    # either broker (150-280 k records/s against 590-690 k with 0, measured 2026-11-27).
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100, "log_level": 0,
                  "fetch.queue.backoff.ms": 0})
    started = time.monotonic()
    deadline = started + timeout
    count = errors = 0
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while count < records and time.monotonic() < deadline:
            for msg in c.consume(10_000, 0.5):
                if msg.error():
                    errors += 1
                else:
                    count += 1
    finally:
        c.close()
    seconds = time.monotonic() - started
    return {"ok": count == records, "records": count, "errors": errors, "seconds": round(seconds, 3),
            "records_per_s": round(count / seconds, 1),
            "mb_per_s": round(count * size / 1e6 / seconds, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bootstrap")
    ap.add_argument("-p", "--partitions", type=int, default=1)
    ap.add_argument("-s", "--size", type=int, default=100, help="bytes per record value")
    ap.add_argument("--acks", default="1")
    ap.add_argument("-n", "--records", type=int, default=1_000_000)
    ap.add_argument("--label", default="")
    ap.add_argument("--broker-pid", type=int, help="report this process's RSS after producing")
    ap.add_argument("--timeout", type=float, default=240, help="seconds per phase")
    ap.add_argument("--delete-topic", action="store_true",
                    help="delete the topic at the end, so the broker gives back its memory or page cache")
    args = ap.parse_args()
    topic = f"bench-{uuid.uuid4().hex[:10]}"
    result: dict[str, Any] = {"label": args.label, "topic": topic}
    try:
        create_topic(args.bootstrap, topic, args.partitions)
        cpu = sched_seconds(args.broker_pid) if args.broker_pid is not None else None
        result["produce"] = produce(args.bootstrap, topic, args.records, args.size, args.acks, args.timeout)
        after = sched_seconds(args.broker_pid) if args.broker_pid is not None else None
        result["produce"]["broker_cpu_s"] = None if cpu is None or after is None else round(after[0] - cpu[0], 2)
        result["produce"]["broker_rss_mb"] = rss_mb(args.broker_pid)
        hwm = high_watermarks(args.bootstrap, topic, args.partitions)
        result["produce"]["broker_hwm_total"] = hwm
        result["produce"]["hwm_matches"] = hwm == result["produce"]["delivered_ok"]
        result["consume"] = consume(args.bootstrap, topic, args.partitions,
                                    result["produce"]["delivered_ok"], args.size, args.timeout)
    except (KafkaException, TimeoutError, OSError) as e:
        result["error"] = str(e)
    if args.delete_topic:
        try:
            admin = AdminClient({"bootstrap.servers": args.bootstrap, "log_level": 0})
            admin.delete_topics([topic])[topic].result(30)
            result["deleted"] = True
        except (KafkaException, TimeoutError, OSError) as e:
            result["deleted"] = str(e)
    print(json.dumps(result), flush=True)
    ok = "error" not in result and all(result.get(k, {}).get("ok") for k in ("produce", "consume"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
