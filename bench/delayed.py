#!/usr/bin/env python3
"""Delayed delivery at scale: a million pending records, the broker's memory and the lateness.

Starts one ``dmq server``; produces ``--records`` records (``--size`` bytes) with a
``dmq-deliver-at`` header spread evenly over ``--window`` seconds that begin
``--lead`` seconds after the start; reads the broker's RSS and the pending count
(DescribeDelayedRecords) once everything is produced; then consumes the
deliveries, timing each record as ``poll()`` returns it against the deliver time
its value carries. Prints one JSON line: RSS before / with everything pending /
peak, the lateness percentiles (p50, p99, p99.9, max), records early (must be 0),
missing and duplicated, and the broker's CPU seconds while delivering.

Bounded: production must end before the first record is due; the consumer stops
``--drain`` seconds after the last deliver time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from procs import Processes, broker, stop_on_sigterm  # noqa: E402


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def pending(bootstrap: str, topic: str, partitions: int) -> int:
    from dmq.client.wire import WireClient
    from dmq.protocol.codec import make, request_class, request_module
    from dmq.protocol.extensions import DESCRIBE_DELAYED_KEY

    host, port = bootstrap.rsplit(":", 1)
    module = request_module(DESCRIBE_DELAYED_KEY, 0)
    with WireClient(host, int(port), client_id="bench-delayed") as c:
        resp = c.request(make(request_class(DESCRIBE_DELAYED_KEY, 0), topics=(
            make(module.DelayedTopicRequest, name=topic, partitions=tuple(range(partitions))),)))
    return sum(int(p.pending) for t in resp.topics for p in t.partitions)


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--lead", type=float, default=90.0, help="seconds from the start to the first deliver time")
    ap.add_argument("--window", type=float, default=60.0, help="seconds the deliver times spread over")
    ap.add_argument("--drain", type=float, default=30.0)
    args = ap.parse_args()
    stop_on_sigterm()
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    work = Path(tempfile.mkdtemp(prefix="dmq-bench-delayed-"))
    procs = Processes()
    try:
        b = procs.start(broker(work, 0, None, []))
        assert b.proc is not None
        pid = b.proc.pid
        bootstrap = f"127.0.0.1:{b.port}"
        topic = "delayed-bench"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
        time.sleep(1)
        rss_before = rss_mb(pid)
        start_ms = int(time.time() * 1000)
        first_due = start_ms + int(args.lead * 1000)
        step = args.window * 1000 / max(args.records, 1)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                             "queue.buffering.max.messages": 2_000_000, "compression.type": "lz4",
                             "log_level": 0})
        pad = b"x" * max(0, args.size - 8)
        for i in range(args.records):
            at = first_due + int(i * step)
            while True:
                try:
                    producer.produce(topic, value=struct.pack(">q", at) + pad, partition=i % args.partitions,
                                     headers=[("dmq-deliver-at", str(at).encode())])
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 10_000 == 0:
                producer.poll(0)
        if producer.flush(120):
            raise RuntimeError("not every record was acknowledged")
        produced_ms = int(time.time() * 1000)
        if produced_ms >= first_due:
            raise RuntimeError(f"producing took {(produced_ms - start_ms) / 1000:.0f} s, past --lead; raise it")
        held = pending(bootstrap, topic, args.partitions)
        rss_pending = rss_mb(pid)
        cpu0 = cpu_s(pid)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                             "fetch.wait.max.ms": 20, "log_level": 0})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(args.partitions)])
        lateness: list[float] = []
        early = 0
        seen: set[int] = set()
        duplicates = 0
        stop_at = first_due / 1000 + args.window + args.drain
        while len(lateness) < args.records and time.time() < stop_at:
            m = consumer.poll(0.1)
            if m is None or m.error():
                continue
            now = time.time() * 1000
            at = struct.unpack_from(">q", m.value())[0]
            key = m.partition() << 40 | m.offset()
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            lateness.append(now - at)
            if now < at:
                early += 1
        consumer.close()
        cpu = cpu_s(pid) - cpu0
        lateness.sort()
        print(json.dumps({
            "records": args.records, "produced_s": round((produced_ms - start_ms) / 1000, 1),
            "pending_reported": held, "rss_before_mb": round(rss_before, 1),
            "rss_with_pending_mb": round(rss_pending, 1), "rss_peak_mb": round(rss_mb(pid, "VmHWM"), 1),
            "delivered": len(lateness), "missing": args.records - len(lateness), "duplicates": duplicates,
            "early": early, "lateness_p50_ms": round(percentile(lateness, 0.5), 1),
            "lateness_p99_ms": round(percentile(lateness, 0.99), 1),
            "lateness_p999_ms": round(percentile(lateness, 0.999), 1),
            "lateness_max_ms": round(lateness[-1], 1) if lateness else None,
            "broker_cpu_s_delivering": round(cpu, 1)}), flush=True)
    finally:
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
