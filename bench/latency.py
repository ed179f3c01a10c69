#!/usr/bin/env python3
"""End-to-end latency at a fixed rate, timestamping each record as poll() returns it.

kbench's latency phase reads with ``consume(num_messages=1000, timeout=0.05)``,
which librdkafka holds until 1000 records or 50 ms have gone by; at 1000
records/s that adds up to 50 ms of client-side batching to every record. This
measures the same path (produce with linger.ms=0 -> broker -> long-polling
consumer) with ``poll()``, which returns each record as soon as it arrives.

With ``--producers N`` the rate is split over N producer processes (each its
own librdkafka client, as several applications would be); send times are
CLOCK_MONOTONIC, shared by the processes of one machine. ``--partitions``
spreads the records over that many partitions.

Prints one JSON object as the last line. Bounded: --seconds of sending, then
at most 10 s of draining.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import threading
import time
import uuid

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

HDR = struct.Struct(">qI")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bootstrap")
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--fetch-wait-ms", type=int, default=500)
    ap.add_argument("--label", default="")
    ap.add_argument("--replication-factor", type=int, default=1)
    ap.add_argument("--producers", type=int, default=1)
    ap.add_argument("--max-in-flight", type=int, default=5,
                    help="requests in flight per connection (5: the Java client's default and "
                         "librdkafka's with idempotence; librdkafka's own default is 1000000)")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--produce-to", help=argparse.SUPPRESS)  # internal: run as one producer process
    args = ap.parse_args()
    if args.produce_to:
        return produce_at_rate(args.bootstrap, args.produce_to, args.rate, args.seconds, args.size, args.acks,
                               args.partitions, args.max_in_flight)

    topic = "lat-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": args.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, args.partitions, args.replication_factor)])[topic].result(30)
    time.sleep(0.5)
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "log_level": 0, "group.id": "lat-" + topic,
                         "enable.auto.commit": False, "fetch.wait.max.ms": args.fetch_wait_ms,
                         "fetch.queue.backoff.ms": 0, "socket.nagle.disable": True})
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(args.partitions)])
    latencies: list[float] = []
    stop = threading.Event()
    pad = b"\0" * max(0, args.size - HDR.size)

    def consume() -> None:
        while not stop.is_set():
            m = consumer.poll(0.1)
            if m is None or m.error():
                continue
            now = time.monotonic_ns()
            sent_ns, _seq = HDR.unpack_from(m.value())
            if sent_ns > 0:
                latencies.append((now - sent_ns) / 1e6)

    producer = Producer({"bootstrap.servers": args.bootstrap, "log_level": 0, "acks": args.acks, "linger.ms": 0,
                         "socket.nagle.disable": True, "enable.idempotence": False,
                         "max.in.flight.requests.per.connection": args.max_in_flight})
    t = threading.Thread(target=consume, daemon=True)
    t.start()
    # Warm up: the consumer must be fetching at the log end before measuring.
    for i in range(20):
        producer.produce(topic, HDR.pack(0, i) + pad)
        producer.poll(0)
        time.sleep(0.05)
    producer.flush(10)
    time.sleep(1.0)
    per = args.rate / args.producers
    n = int(per * args.seconds) * args.producers
    started = time.monotonic()
    if args.producers == 1:
        produce_at_rate(args.bootstrap, topic, per, args.seconds, args.size, args.acks, args.partitions,
                        args.max_in_flight, producer)
    else:
        children = [subprocess.Popen([sys.executable, __file__, args.bootstrap, "--produce-to", topic,
                                      "--rate", str(per), "--seconds", str(args.seconds), "--size",
                                      str(args.size), "--acks", args.acks, "--partitions", str(args.partitions),
                                      "--max-in-flight", str(args.max_in_flight)])
                    for _ in range(args.producers)]
        for child in children:
            try:
                child.wait(args.seconds + 60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    deadline = time.monotonic() + 10
    while len(latencies) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    stop.set()
    t.join(5)
    consumer.close()
    admin.delete_topics([topic])
    result = {
        "latency": 1, "label": args.label, "rate": args.rate, "sent": n, "received": len(latencies),
        "p50_ms": round(percentile(latencies, 0.5), 3), "p99_ms": round(percentile(latencies, 0.99), 3),
        "p999_ms": round(percentile(latencies, 0.999), 3),
        "max_ms": round(max(latencies) if latencies else float("nan"), 3),
        "producers": args.producers, "partitions": args.partitions, "acks": args.acks,
        "replication_factor": args.replication_factor, "received_per_s": round(len(latencies) / elapsed, 1),
    }
    print(json.dumps(result))
    return 0 if len(latencies) == n else 1


def produce_at_rate(bootstrap: str, topic: str, rate: float, seconds: float, size: int, acks: str,
                    partitions: int, max_in_flight: int, producer: Producer | None = None) -> int:
    """Send ``rate`` records/s for ``seconds``, each stamped with its send time."""
    if producer is None:
        producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0, "acks": acks, "linger.ms": 0,
                             "socket.nagle.disable": True, "enable.idempotence": False,
                             "max.in.flight.requests.per.connection": max_in_flight})
    pad = b"\0" * max(0, size - HDR.size)
    n = int(rate * seconds)
    interval = 1.0 / rate
    start = time.monotonic()
    for i in range(n):
        delay = start + i * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        while True:
            try:
                producer.produce(topic, HDR.pack(time.monotonic_ns(), i) + pad, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(30)
    return 0 if left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
