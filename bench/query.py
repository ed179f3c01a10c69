#!/usr/bin/env python3
"""Message query on a large topic: key lookup latency, the key index's size and build time.

One ``dmq server`` (data on disk under ``--work``, default a temporary directory);
a topic of ``--partitions`` partitions filled with ``--records`` records by
confluent-kafka (large batches: linger.ms 50, batch.size 1 MB, ``--compression``),
keys ``order-<n>`` for n drawn uniformly from ``--keys`` distinct keys, JSON values of
about ``--value-size`` bytes (with one of 4096 random pads, so they compress as
real ones do, not to nothing). Then:

1. online build: the time from the last acknowledgement until the broker's key
   indexer has caught up (a key query reads no log byte without an index), at
   the broker's default share of its event loop (log.key.index.max.loop.share);
2. lookup latency: ``--lookups`` random keys, each one QueryRecords request for
   every partition (newest 100 records of the key) on an open connection, as
   ``dmq messages query`` sends it; and the whole ``query_records()`` call
   (metadata, connections) for a few keys; every answer checked against the
   records the producer wrote for that key;
3. index size on disk (the .keyindex files of sealed segments) and in memory
   (the runs of the active segments: 8 bytes an entry), next to the log's size;
4. offline rebuild: the broker stopped, every .keyindex deleted, the same
   KeyIndexer run in this process over the logs with no pause: CPU time per record;
5. with ``--without-index N``: the .keyindex files deleted, the broker restarted with
   log.key.index.enable=false and N lookups timed, each scanning the whole topic;
6. with ``--impact N``: what the background indexer costs produce and consume:
   ``bench/throughput.py`` (N records of 100 B, 6 partitions, acks=1) against a fresh
   broker with the key index on and one with it off, alternating, three times each.

Prints a JSON line of results (and progress to stderr). Every child is stopped in
a finally block.

    python bench/query.py --records 10000000 --lookups 1000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import Processes, broker, stop_on_sigterm  # noqa: E402

from dmq.client.query import query_records  # noqa: E402
from dmq.client.wire import WireClient  # noqa: E402
from dmq.config import BrokerConfig, LogConfig  # noqa: E402
from dmq.protocol.extensions import QueryPartition, QueryRecordsRequest, QueryTopic  # noqa: E402
from dmq.storage.key_indexer import KeyIndexer  # noqa: E402
from dmq.storage.log import Log  # noqa: E402

TOPIC = "query-bench"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def produce(bootstrap: str, args: argparse.Namespace, rng: random.Random) -> tuple[float, dict[int, int]]:
    """Fill the topic; returns (seconds, records written per key number)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                  "batch.num.messages": 100_000, "queue.buffering.max.messages": 1_000_000,
                  "queue.buffering.max.kbytes": 1_048_576, "compression.type": args.compression,
                  "acks": "1", "log_level": 0})
    counts: dict[int, int] = {}
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    pads = [bytes(rng.choice(alphabet) for _ in range(max(0, args.value_size - 40))) for _ in range(4096)]
    started = time.monotonic()
    for i in range(args.records):
        n = rng.randrange(args.keys)
        counts[n] = counts.get(n, 0) + 1
        value = b'{"order": %d, "seq": %d, "pad": "%s"}' % (n, i, pads[i & 4095])
        while True:
            try:
                p.produce(TOPIC, key=b"order-%d" % n, value=value)
                break
            except BufferError:
                p.poll(0.05)
        if i % 100_000 == 0:
            p.poll(0)
            if i % 1_000_000 == 0 and i:
                log(f"produced {i:,} records")
    assert p.flush(600) == 0, "records left undelivered"
    return time.monotonic() - started, counts


def probe(bootstrap: str) -> int:
    """Log bytes a key query over every partition scans without an index right now."""
    return query_records(bootstrap, TOPIC, key=b"order-0", max_records=1, timeout=120).unindexed_bytes


def lookups(port: int, partitions: int, keys: list[int], counts: dict[int, int]) -> list[float]:
    """Milliseconds of each key's QueryRecords request (every partition) on one connection."""
    out = []
    with WireClient("127.0.0.1", port, client_id="bench-query", timeout=300) as c:
        for n in keys:
            request = QueryRecordsRequest(key=b"order-%d" % n, max_records=100, max_bytes=4 << 20, topics=(
                QueryTopic(name=TOPIC, partitions=tuple(QueryPartition(partition_index=p)
                                                        for p in range(partitions))),))
            started = time.perf_counter()
            response = c.request(request)
            out.append((time.perf_counter() - started) * 1000)
            parts = response.topics[0].partitions
            found = sum(len(p.records) for p in parts)
            assert found == min(counts.get(n, 0), 100), (n, found, counts.get(n, 0))  # a key is in one partition
            assert all(p.error_code == ErrorCode.none and p.unindexed_bytes == 0 for p in parts), parts
    return out


def sizes(data: Path) -> dict[str, int]:
    out = {"log_bytes": 0, "keyindex_bytes": 0, "keyindex_files": 0, "segments": 0}
    for d in data.glob(f"{TOPIC}-*"):
        for f in d.iterdir():
            if f.suffix == ".log":
                out["log_bytes"] += f.stat().st_size
                out["segments"] += 1
            elif f.suffix == ".keyindex":
                out["keyindex_bytes"] += f.stat().st_size
                out["keyindex_files"] += 1
    return out


def offline_rebuild(data: Path, segment_bytes: int) -> dict[str, Any]:
    """Every .keyindex deleted, then the KeyIndexer in this process with no pause."""
    for f in data.glob(f"{TOPIC}-*/*.keyindex"):
        f.unlink()
    config = LogConfig(BrokerConfig(), {"segment.bytes": str(segment_bytes)})
    logs = [Log(str(d), TOPIC, int(d.name.rsplit("-", 1)[1]), config, clean_shutdown=True)
            for d in sorted(data.glob(f"{TOPIC}-*"))]
    indexer = KeyIndexer()
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    while indexer.run(logs, time.monotonic() + 1.0):
        pass
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    in_memory = sum(8 * sum(len(r) for r in s.key_index.runs) for lg in logs for s in lg.segments)
    for lg in logs:
        lg.close()
    cpu_s = (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)
    return {"rebuild_wall_s": round(wall, 2), "rebuild_cpu_s": round(cpu_s, 2),
            "records_indexed": indexer.records_indexed, "files_written": indexer.files_written,
            "rebuild_us_per_record": round(cpu_s * 1e6 / max(indexer.records_indexed, 1), 3),
            "active_runs_bytes": in_memory}


def impact(work: Path, records: int) -> dict[str, Any]:
    """Median produce and consume rec/s of bench/throughput.py with the key index on and off."""
    rates: dict[str, dict[str, list[float]]] = {"on": {"produce": [], "consume": []},
                                                "off": {"produce": [], "consume": []}}
    for repeat in range(3):
        for enabled in (["true", "false"] if repeat % 2 == 0 else ["false", "true"]):
            procs = Processes()
            (work / f"impact-{repeat}-{enabled}").mkdir(parents=True, exist_ok=True)
            try:
                b = procs.start(broker(work / f"impact-{repeat}-{enabled}", 0, None,
                                       [f"log.key.index.enable={enabled}"]))
                out = subprocess.run([sys.executable, str(Path(__file__).parent / "throughput.py"),
                                      f"127.0.0.1:{b.port}", "-p", "6", "-s", "100", "--acks", "1",
                                      "-n", str(records)], capture_output=True, text=True, timeout=900)
                run = json.loads(out.stdout.strip().splitlines()[-1])
                assert "error" not in run, run
                label = "on" if enabled == "true" else "off"
                rates[label]["produce"].append(run["produce"]["records_per_s"])
                rates[label]["consume"].append(run["consume"]["records_per_s"])
                log(f"impact repeat {repeat} index {label}: produce {run['produce']['records_per_s']:,.0f} "
                    f"consume {run['consume']['records_per_s']:,.0f} rec/s")
            finally:
                procs.stop_all()
                shutil.rmtree(work / f"impact-{repeat}-{enabled}", ignore_errors=True)
    return {f"{phase}_rec_per_s_index_{label}": {"runs": [round(r) for r in values[phase]],
                                                  "median": round(statistics.median(values[phase]))}
            for label, values in rates.items() for phase in ("produce", "consume")}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000, help="distinct keys")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--compression", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--segment-bytes", type=int, default=32 << 20)
    ap.add_argument("--lookups", type=int, default=1000)
    ap.add_argument("--without-index", type=int, default=0, metavar="N",
                    help="also time N lookups with the key index off")
    ap.add_argument("--impact", type=int, default=0, metavar="N",
                    help="also measure produce/consume throughput with the index on and off, N records")
    ap.add_argument("--work", type=Path, default=None, help="directory for the data (default: a temporary one)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    stop_on_sigterm()
    rng = random.Random(args.seed)
    work = args.work or Path(tempfile.mkdtemp(prefix="dmq-bench-query-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "broker-0"
    procs = Processes()
    result: dict[str, Any] = {"records": args.records, "keys": args.keys, "partitions": args.partitions,
                              "value_size": args.value_size, "compression": args.compression,
                              "segment_bytes": args.segment_bytes}
    try:
        overrides = [f"log.segment.bytes={args.segment_bytes}"]
        b = procs.start(broker(work, 0, None, overrides))
        bootstrap = f"127.0.0.1:{b.port}"
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        admin.create_topics([NewTopic(TOPIC, args.partitions, 1)])[TOPIC].result(30)
        del admin
        log(f"producing {args.records:,} records to {args.partitions} partitions in {work}")
        produce_s, counts = produce(bootstrap, args, rng)
        result["produce_s"] = round(produce_s, 1)
        result["produce_rec_per_s"] = round(args.records / produce_s)
        log(f"produced in {produce_s:.1f} s; waiting for the key indexer")
        acked = time.monotonic()
        while probe(bootstrap):
            time.sleep(1)
        result["online_catch_up_s"] = round(time.monotonic() - acked, 1)
        log(f"indexer caught up {result['online_catch_up_s']} s after the last ack")
        time.sleep(3)  # the last sealed segments' files written
        result.update(sizes(data))

        keys = [rng.randrange(args.keys) for _ in range(args.lookups)]
        lookups(b.port, args.partitions, keys[:20], counts)  # warm-up: connections, page cache
        latencies = lookups(b.port, args.partitions, keys, counts)
        result["lookup_ms"] = {"median": round(statistics.median(latencies), 2),
                               "p90": round(percentile(latencies, 0.90), 2),
                               "p99": round(percentile(latencies, 0.99), 2),
                               "max": round(max(latencies), 2), "n": len(latencies)}
        log(f"lookup latency {result['lookup_ms']}")
        whole = []
        for n in keys[:50]:
            started = time.perf_counter()
            found = query_records(bootstrap, TOPIC, key=b"order-%d" % n, max_records=100)
            whole.append((time.perf_counter() - started) * 1000)
            assert len(found.records) == min(counts.get(n, 0), 100)
        result["query_records_call_ms_median"] = round(statistics.median(whole), 2)

        if args.without_index:
            procs.stop_all()
            for f in data.glob(f"{TOPIC}-*/*.keyindex"):  # a broker without them and not building them
                f.unlink()
            procs = Processes()
            b = procs.start(broker(work, 0, None, [*overrides, "log.key.index.enable=false"]))
            bootstrap = f"127.0.0.1:{b.port}"
            scans = []
            for n in keys[: args.without_index]:
                started = time.perf_counter()
                found = query_records(bootstrap, TOPIC, key=b"order-%d" % n, max_records=100, timeout=600)
                scans.append((time.perf_counter() - started) * 1000)
                assert len(found.records) == min(counts.get(n, 0), 100) and found.unindexed_bytes > 0
            result["without_index_ms"] = [round(s) for s in scans]
            log(f"without the index: {result['without_index_ms']} ms")
        procs.stop_all()
        log("offline rebuild of every key index")
        result.update(offline_rebuild(data, args.segment_bytes))
        if args.impact:
            result["impact"] = impact(work, args.impact)
    finally:
        procs.stop_all()
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    result["machine"] = f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
