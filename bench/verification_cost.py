#!/usr/bin/env python3
"""What transaction verification (KIP-890) adds to a Produce on the broker, in one process.

Appends one 10-record batch of 100 B through ReplicaManager.append_records (acks=1)
with and without a txn_verifier, alternating, for an idempotent producer (no
transactional id) and for a transactional one whose transaction is open on the
partition (nothing to ask the coordinator). The coroutine is driven by hand (it does not
suspend when there is nothing to ask), so the event loop's own cost is left out.

    .venv/bin/python bench/verification_cost.py
"""

from __future__ import annotations

import tempfile
import timeit
from collections.abc import Callable, Iterator

from kio.schema.errors import ErrorCode

from dmq.config import BrokerConfig, LogConfig
from dmq.record.batch import TRANSACTIONAL_MASK
from dmq.record.records import encode_batch
from dmq.replication.replica_manager import ReplicaManager
from dmq.storage.log_manager import LogManager


class Never:
    """A verifier that must not be asked: every batch here belongs to an open transaction
    or to no transaction."""

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        raise AssertionError("nothing to verify")


def _driver(rm: ReplicaManager, batches: list[dict[tuple[str, int], bytes | None]],
            tid: str | None) -> Callable[[], None]:
    it: Iterator[dict[tuple[str, int], bytes | None]] = iter(batches)

    def one() -> None:
        # Driven by hand: with nothing to ask the coordinator it never suspends.
        coro = rm.append_records(next(it), 1, 5, transactional_id=tid)
        try:
            coro.send(None)
        except StopIteration as done:
            assert done.value[("t", 0)].error == 0, done.value
        else:
            raise AssertionError("suspended")
    return one


def main() -> None:
    d = tempfile.mkdtemp()
    lm = LogManager(d, lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, p: "id")
    rm = ReplicaManager(1, lm)
    p = rm.become_leader("t", 0, "id", 0, replicas=[1], isr=[1])
    seqs = {5: 0, 9: 0}

    def batch(pid: int, txn: bool) -> bytes:
        seq = seqs[pid]
        seqs[pid] += 10
        return encode_batch([(None, b"x" * 100, [])] * 10, timestamp=1, producer_id=pid, producer_epoch=0,
                            base_sequence=seq, attributes_extra=TRANSACTIONAL_MASK if txn else 0)

    # open producer 9's transaction on the partition, verified
    guard = p.log.maybe_start_transaction_verification(9, 0, 0)
    rm.append_to_local_log("t", 0, batch(9, True), 1, verification=guard)
    n = 5000
    for name, pid, tid in (("idempotent, no transactional id", 5, None),
                           ("transactional, transaction open", 9, "app")):
        out: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(5):
            for mode in (("off", "on") if _ % 2 else ("on", "off")):
                rm.txn_verifier = Never() if mode == "on" else None
                batches: list[dict[tuple[str, int], bytes | None]] = [{("t", 0): batch(pid, pid == 9)} for _ in range(n)]

                one = _driver(rm, batches, tid)
                out[mode].append(timeit.timeit(one, number=n) / n * 1e6)
        off, on = sorted(out["off"])[2], sorted(out["on"])[2]
        print(f"{name}: verification off {off:.2f} µs, on {on:.2f} µs per request "
              f"(medians of 5 alternated runs of {n}; difference {1000 * (on - off):+.0f} ns)")
    lm.shutdown()


if __name__ == "__main__":
    main()
