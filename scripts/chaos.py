#!/usr/bin/env python3
"""Fault-injection runs against a 3-broker dmq cluster in network namespaces (root).

    sudo .venv/bin/python scripts/chaos.py --seed 1 --duration 300
    sudo .venv/bin/python scripts/chaos.py --runs 10 --duration 300 --first-seed 100
    sudo .venv/bin/python scripts/chaos.py --seed 1 --after-commit   # faults right after commits

Two transactional producers run beside the idempotent ones unless --transactions 0.

Each run is seeded and replayable (the same seed gives the same fault schedule);
it prints the faults as they happen, then the checks, and writes a JSON report
per run under --base. Exits 1 if any run failed a check. See tests/chaos/harness.py.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from chaos.harness import ChaosConfig, ChaosRun, after_commit_faults  # noqa: E402
from support.netns import available  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, help="one run with this seed")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--duration", type=float, default=300, help="seconds of faults per run")
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--max-zk-outage", type=float, default=60)
    ap.add_argument("--rate", type=float, default=200, help="records/s per producer")
    ap.add_argument("--transactions", type=int, default=2, metavar="N",
                    help="transactional producers (0: none), each 5 transactions/s of 4 records")
    ap.add_argument("--base", type=Path, default=Path("/tmp/dmq-chaos"))
    ap.add_argument("--after-commit", action="store_true",
                    help="instead of the seeded schedule, the scripted one of harness.after_commit_faults "
                         "(faults the moment a transaction committed; about 90 s; needs --transactions 2)")
    args = ap.parse_args()
    # SIGTERM ends a run like Ctrl-C: its namespaces and processes are torn down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    why = available()
    if why:
        print(f"error: {why}; run as root", file=sys.stderr)
        return 2
    seeds = [args.seed] if args.seed is not None else list(range(args.first_seed, args.first_seed + args.runs))
    rows = []
    for seed in seeds:
        what = "faults right after commits" if args.after_commit else f"{args.duration:.0f}s of faults"
        print(f"run seed {seed}: {what}, session timeout {args.session_timeout_ms} ms", flush=True)
        cfg = ChaosConfig(seed=seed, duration_s=args.duration, session_timeout_ms=args.session_timeout_ms,
                          max_zk_outage_s=args.max_zk_outage, rate=args.rate, base=args.base,
                          transactions=args.transactions)
        faults = after_commit_faults(args.session_timeout_ms / 1000) if args.after_commit else None
        report = ChaosRun(cfg).run(faults)
        failures = report.failures()
        rows.append((seed, report, failures))
        print(f"  acked {report.acknowledged}, lost {len(report.lost)}, duplicates {report.duplicates} "
              f"({report.duplicates_after_epoch_bump} re-sent after {report.epoch_bumps} producer epoch bumps), "
              f"reordered {len(report.reordered)}, divergent {len(report.divergent)}, recovery "
              f"{report.recovery_s:.1f}s, longest write gap with a majority up "
              f"{report.max_gap_with_majority_s:.1f}s (any: {report.max_ack_gap_s:.1f}s), crashes "
              f"{len(report.crashes)}: {'FAILED' if failures else 'ok'}", flush=True)
        if args.transactions:
            print(f"  transactions: committed {report.txn_committed}, aborted {report.txn_aborted}, "
                  f"unknown {report.txn_unknown} ({report.txn_unknown_committed} visible, "
                  f"{report.txn_unknown_aborted} not, {len(report.txn_partial)} partly), producers created "
                  f"{report.txn_producers_created}; read_committed {report.txn_records_read}: committed "
                  f"lost {len(report.txn_lost)}, duplicated {len(report.txn_duplicates)}, aborted visible "
                  f"{len(report.txn_aborted_visible)}, reordered {len(report.txn_reordered)}; longest "
                  f"without a transaction ended {report.max_txn_gap_s:.1f}s ({report.max_txn_gap_where}); "
                  f"LSO = high watermark {report.lso_wait_s:.1f}s after the producers stopped", flush=True)
        for f in failures:
            print(f"    {f}", flush=True)
    print()
    print(f"{'seed':>6} {'faults':>6} {'acked':>8} {'lost':>5} {'dup':>4} {'bump':>4} {'reord':>5} {'diverg':>6} "
          f"{'recov s':>7} {'gap s':>6} {'txns':>5} {'abort':>5} {'unkn':>4} {'txbad':>5} {'lso s':>5}  result"
          f"   (gap: longest without a write while a majority was up; txbad: committed lost, aborted "
          f"visible, partial or duplicated)")
    for seed, r, failures in rows:
        print(f"{seed:>6} {len(r.faults):>6} {r.acknowledged:>8} {len(r.lost):>5} {r.duplicates:>4} "
              f"{r.duplicates_after_epoch_bump:>4} "
              f"{len(r.reordered):>5} {len(r.divergent):>6} {r.recovery_s:>7.1f} "
              f"{r.max_gap_with_majority_s:>6.1f} {r.txn_committed:>5} {r.txn_aborted:>5} {r.txn_unknown:>4} "
              f"{len(r.txn_lost) + len(r.txn_aborted_visible) + len(r.txn_partial) + len(r.txn_duplicates):>5} "
              f"{r.lso_wait_s:>5.1f}  {'FAILED' if failures else 'ok'}")
    acked = sum(r.acknowledged for _, r, _ in rows)
    resent = sum(r.duplicates_after_epoch_bump for _, r, _ in rows)
    # The bound: duplicates only from epoch bumps, fewer than 1 per 100,000 acknowledged.
    rate_ok = resent * 100_000 < max(acked, 1) or resent == 0
    print(f"total: {acked} acknowledged, {resent} re-sent after epoch bumps "
          f"({resent * 100_000 / max(acked, 1):.2f} per 100,000; bound: under 1): "
          f"{'ok' if rate_ok else 'FAILED'}")
    print(f"reports: {args.base}/seed-*/report.json")
    return 1 if any(f for _, _, f in rows) or not rate_ok else 0


if __name__ == "__main__":
    sys.exit(main())
