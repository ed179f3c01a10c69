"""The chaos harness's own parts: replayable schedules and the replica comparison."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from support.replication import records

from chaos.harness import (
    FAULT_KINDS,
    ChaosConfig,
    ChaosRun,
    Fault,
    Report,
    classify_duplicates,
    find_lost,
    longest_good_stretch,
    make_schedule,
    read_batches,
)


def test_a_seed_gives_the_same_schedule_and_covers_every_fault() -> None:
    a = make_schedule(7, 110, 4.0, 12)
    assert a == make_schedule(7, 110, 4.0, 12)
    assert a != make_schedule(8, 110, 4.0, 12)
    assert {f.kind for f in a} == set(FAULT_KINDS)
    assert all(f.duration > 4.0 for f in a if f.kind == "pause"), "pauses outlast the session"
    assert any(b.at < a.at + a.duration for a, b in zip(a, a[1:], strict=False)), "some faults overlap"


def test_read_batches_splits_a_log_into_batches_with_their_last_offsets(tmp_path: Path) -> None:
    from dmq.record.batch import validate_batches

    one, two = bytearray(records(3)), bytearray(records(2))
    validate_batches(one, 1 << 20)
    two[0:8] = (3).to_bytes(8, "big")  # base offset 3
    (tmp_path / "00000000000000000000.log").write_bytes(bytes(one) + bytes(two) + b"\x00" * 5)
    batches = read_batches(tmp_path)
    assert [last for last, _ in batches] == [2, 4]
    assert batches[0][1] == bytes(one)


def test_duplicates_are_the_brokers_unless_each_copy_has_its_own_producer_identity() -> None:
    # 0-5: re-sent under a new producer id; 0-6: one id and epoch twice; 0-7: a new epoch;
    # 0-8: on no disk at all (untraceable, so the broker's).
    copies = {
        "0-5": {1: [(10, 7, 0), (40, 9, 0)], 2: [(10, 7, 0), (40, 9, 0)]},
        "0-6": {1: [(11, 7, 0), (41, 7, 0)]},
        "0-7": {3: [(12, 7, 0), (42, 7, 1), (43, 7, 2)]},
    }
    assert classify_duplicates({"0-5": 1, "0-6": 1, "0-7": 2, "0-8": 1}, copies) == (3, 2)


def test_duplicates_fail_a_run_unless_few_and_all_from_epoch_bumps() -> None:
    r = Report(seed=1, acknowledged=50_000, recovery_s=1.0, duplicates=1, duplicates_after_epoch_bump=1)
    assert r.failures() == [], "one re-send after an epoch bump in a short run is allowed"
    r.duplicates, r.duplicates_after_epoch_bump = 2, 2
    assert "epoch bump" in "\n".join(r.failures())
    r = Report(seed=1, acknowledged=50_000, recovery_s=1.0, duplicates=1, duplicates_same_producer=1)
    assert "one producer id" in "\n".join(r.failures())
    r = Report(seed=1, acknowledged=50_000, recovery_s=1.0, duplicates=1)
    assert "not traced" in "\n".join(r.failures())


def test_report_failures_name_every_broken_check() -> None:
    r = Report(seed=1, acknowledged=10, recovery_s=1.0)
    assert r.failures() == []
    r.lost, r.duplicates, r.divergent, r.crashes = ["v@0:1"], 1, ["chaos-0"], ["broker 2"]
    r.recovery_s = 11.0
    text = "\n".join(r.failures())
    for word in ("lost", "duplicates", "divergent", "crashed", "full ISR"):
        assert word in text


def test_write_gaps_count_only_time_a_majority_was_up() -> None:
    assert longest_good_stretch(0, 10, []) == 10
    assert longest_good_stretch(0, 10, [(2, 5)]) == 5  # 5..10
    assert longest_good_stretch(0, 10, [(2, 5), (5, 9)]) == 2
    assert longest_good_stretch(3, 10, [(0, 4), (8, 20)]) == 4  # 4..8


def test_an_ack_without_an_offset_counts_if_its_value_is_in_its_partition() -> None:
    # librdkafka acknowledges a batch whose reply was lost without an offset when a later
    # batch of the same producer succeeded ("implicit ack"): it was persisted, offset unknown.
    records = {1: [(10, "0-1"), (11, "0-2")], 2: [(5, "0-3")]}
    acks = [{"p": 1, "o": 10, "v": "0-1"}, {"p": 1, "o": None, "v": "0-2"},
            {"p": 2, "o": 5, "v": "0-3"}]
    assert find_lost(acks, records) == []
    acks += [{"p": 2, "o": None, "v": "0-2"}, {"p": 1, "o": 12, "v": "0-4"}]
    assert find_lost(acks, records) == ["0-2@2:None (found nowhere in partition 2)",
                                        "0-4@1:12 (found None)"]


def test_a_zookeeper_restart_while_zookeeper_is_down_is_skipped() -> None:
    # Overlapping restarts stopped a stopped ZooKeeper and started it under the later one.
    run = ChaosRun.__new__(ChaosRun)
    run.zk_down = True
    fault = Fault(10.0, "zk_restart", 5.0)
    assert run._begin(fault, random.Random(1)) is None
    assert "already down" in fault.target


def test_transactions_are_checked_against_what_read_committed_reads(tmp_path: Path) -> None:
    run = ChaosRun.__new__(ChaosRun)
    run.c = ChaosConfig(seed=1, partitions=2, transactions=2, base=tmp_path)
    run.base, run.report, run.workload_started = tmp_path, Report(seed=1), 0.0

    def outcome(txn: int, kind: str, values: list[str]) -> str:
        return json.dumps({"txn": txn, "outcome": kind, "values": values, "t": 0.0})

    (tmp_path / "txns-0.jsonl").write_text("\n".join([
        json.dumps({"init": True}), outcome(0, "committed", ["0-t0-0", "0-t0-1"]),
        outcome(1, "aborted", ["0-t1-0", "0-t1-1"]), outcome(2, "unknown", ["0-t2-0", "0-t2-1"]),
        outcome(3, "unknown", ["0-t3-0", "0-t3-1"]), outcome(4, "unknown", ["0-t4-0", "0-t4-1"]),
        json.dumps({"exit": True, "last_unresolved": False})]) + "\n")
    # Producer 1 was killed: no exit line, and its last transaction (5) has no outcome.
    (tmp_path / "txns-1.jsonl").write_text("\n".join([
        json.dumps({"init": True}), outcome(0, "committed", ["1-t0-0", "1-t0-1"])]) + "\n")
    read = {"0": [[0, "0-t0-0"], [1, "0-t1-0"], [2, "0-t2-0"], [3, "0-t3-0"], [4, "1-t5-0"]],
            "1": [[0, "0-t2-1"], [1, "0-t0-1"], [2, "0-t0-1"], [3, "1-t0-1"], [4, "9-t0-0"]]}

    def ask(op: str, timeout: float = 30, **kw: Any) -> dict[str, Any]:
        if op == "end_offsets":
            return {"0": [5, 5], "1": [5, 5]}
        Path(kw["out"]).write_text(json.dumps({"records": read, "incomplete": []}))
        return {"count": 10, "incomplete": []}

    run.ask = ask  # type: ignore[method-assign]
    run._check_transactions()
    r = run.report
    assert (r.txn_committed, r.txn_aborted, r.txn_unknown) == (2, 1, 3)
    assert (r.txn_unknown_committed, r.txn_unknown_aborted) == (1, 1)
    assert r.txn_partial == ["producer 0 transaction 3: 1 of 2 records visible"]
    assert r.txn_lost == ["1-t0-0"]
    assert r.txn_aborted_visible == ["chaos_txn-0@1: 0-t1-0"]
    assert r.txn_duplicates == ["0-t0-1 x2"]
    assert r.txn_unexplained == ["chaos_txn-1@4: 9-t0-0"]  # 1-t5-0: producer 1 died in it
    assert r.txn_reordered == ["chaos_txn-1: 0-t0-1 at 1 after transaction 2 at 0",
                               "chaos_txn-1: 0-t0-1 at 2 after transaction 2 at 0"]
    assert r.txn_unclean == ["producer 1: no exit line"]
    assert r.txn_producers_created == 2 and r.lso_wait_s == 0 and not r.lso_stuck
    text = "\n".join(r.failures())
    for words in ("committed transactions not read", "read twice", "aborted transactions",
                  "partly visible", "no transaction", "reordered", "did not end cleanly"):
        assert words in text


def test_a_last_stable_offset_behind_the_high_watermark_fails_the_run(tmp_path: Path) -> None:
    run = ChaosRun.__new__(ChaosRun)
    run.c = ChaosConfig(seed=1, partitions=2, transactions=1, base=tmp_path, recovery_bound_s=1.0)
    run.report = Report(seed=1)
    run.ask = lambda op, timeout=30, **kw: {"0": [5, 5], "1": [7, 6]}  # type: ignore[method-assign]
    run._wait_stable()
    assert run.report.lso_stuck == ["chaos_txn-1: lso 6 < hw 7"]
    assert "last stable offset" in "\n".join(run.report.failures())
