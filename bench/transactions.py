#!/usr/bin/env python3
"""Transactional produce next to idempotent produce, against one dmq broker it starts.

After a warm-up of each, every repeat sends --records records of --size bytes to a
fresh 6-partition topic twice, in an order that flips every repeat: with an
idempotent producer (acks=all), and with a transactional producer
that commits every --commit-ms milliseconds (issue 11: transactional throughput
>= 0.8x idempotent in the same run). Reports the median records/s of each and
their ratio, and checks that a read_committed consumer reads every record the
transactional producer committed.

    .venv/bin/python bench/transactions.py --records 200000 --repeats 3

With --unverified, a second broker runs with transaction.partition.verification.enable
=false and every repeat also runs the transactional phase against it ("transactional
(unverified)"), in the flipped order: what KIP-890 verification costs, in the same run.

Prints a table and, as the last line, one JSON object. Bounded: each phase stops
after --timeout seconds; the broker is stopped on every way out (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from procs import Processes, broker, stop_on_sigterm  # noqa: E402

PARTITIONS = 6


def create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a collected client cancels its futures
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)


def idempotent(bootstrap: str, topic: str, records: int, payload: bytes, timeout: float) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "log_level": 0})
    p.produce(topic, payload, partition=0)  # its producer id and metadata, as init_transactions does
    p.flush(timeout)
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, payload, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(timeout) != 0:
        raise RuntimeError("the idempotent producer did not deliver everything in time")
    return records / (time.perf_counter() - start)


def transactional(bootstrap: str, topic: str, records: int, payload: bytes, commit_ms: int,
                  timeout: float) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 5, "log_level": 0})
    p.init_transactions(30)
    start = time.perf_counter()
    p.begin_transaction()
    last_commit = start
    for i in range(records):
        while True:
            try:
                p.produce(topic, payload, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
        if (time.perf_counter() - last_commit) * 1000 >= commit_ms:
            p.commit_transaction(timeout)
            p.begin_transaction()
            last_commit = time.perf_counter()
    p.commit_transaction(timeout)
    return records / (time.perf_counter() - start)


def read_committed_count(bootstrap: str, topic: str, expect: int, timeout: float) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-rc-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 0})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen = 0
    deadline = time.monotonic() + timeout
    while seen < expect and time.monotonic() < deadline:
        seen += sum(1 for m in c.consume(10_000, 0.5) if not m.error())
    c.close()
    return seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--commit-ms", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--unverified", action="store_true",
                    help="also a transactional phase against a broker without transaction verification")
    args = ap.parse_args()
    stop_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="dmq-bench-txn-"))
    procs = Processes()
    payload = b"x" * args.size
    kinds = ["idempotent", "transactional"] + (["unverified"] if args.unverified else [])
    runs: dict[str, list[float]] = {kind: [] for kind in kinds}
    try:
        b = procs.start(broker(work, 0, None, []))
        servers = dict.fromkeys(("idempotent", "transactional"), f"127.0.0.1:{b.port}")
        if args.unverified:
            u = procs.start(broker(work, 1, None, ["transaction.partition.verification.enable=false"]))
            servers["unverified"] = f"127.0.0.1:{u.port}"
        # A warm-up of each kind first, then the order flips every repeat, so that neither
        # always runs on a broker the other has just warmed (as bench/compare.py does).
        for kind in kinds:
            bootstrap = servers[kind]
            create(bootstrap, f"warm-{kind}")
            if kind == "idempotent":
                idempotent(bootstrap, f"warm-{kind}", min(args.records, 20_000), payload, args.timeout)
            else:
                transactional(bootstrap, f"warm-{kind}", min(args.records, 20_000), payload, args.commit_ms,
                              args.timeout)
        for r in range(args.repeats):
            order = kinds if r % 2 == 0 else kinds[::-1]
            for kind in order:
                bootstrap = servers[kind]
                topic = f"bench-{kind}-{r}"
                create(bootstrap, topic)
                if kind == "idempotent":
                    rate = idempotent(bootstrap, topic, args.records, payload, args.timeout)
                else:
                    rate = transactional(bootstrap, topic, args.records, payload, args.commit_ms, args.timeout)
                    read = read_committed_count(bootstrap, topic, args.records, 60)
                    if read != args.records:
                        raise RuntimeError(f"read_committed read {read} of {args.records} committed records")
                runs[kind].append(rate)
                print(f"repeat {r + 1}/{args.repeats}: {kind:<13} {rate:>12,.0f} rec/s", flush=True)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (RuntimeError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    idem = statistics.median(runs["idempotent"])
    txn = statistics.median(runs["transactional"])
    print(f"\n{'producer':<15}{'median rec/s':>14}")
    print(f"{'idempotent':<15}{idem:>14,.0f}")
    print(f"{'transactional':<15}{txn:>14,.0f}")
    summary = {"records": args.records, "size": args.size, "commit_ms": args.commit_ms,
               "repeats": args.repeats, "idempotent": runs["idempotent"],
               "transactional": runs["transactional"], "median_idempotent": idem,
               "median_transactional": txn, "ratio": txn / idem}
    if args.unverified:
        unverified = statistics.median(runs["unverified"])
        print(f"{'unverified':<15}{unverified:>14,.0f}")
        summary |= {"unverified": runs["unverified"], "median_unverified": unverified,
                    "ratio_verified": txn / unverified}
    print(f"ratio transactional / idempotent: {txn / idem:.2f}")
    if args.unverified:
        print(f"ratio transactional verified / unverified: {txn / summary['median_unverified']:.2f}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
