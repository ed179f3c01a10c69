#!/usr/bin/env python3
"""What a waiting consumer fetch costs each append: the purgatory's check of it.

In one process, a ReplicaManager leads P partitions; one consumer fetch waits on all of
them with a min_bytes it never reaches, while N one-batch appends go round the partitions
(each append wakes the fetch, which checks every partition: leadership, leader epoch,
bytes grown, and for read_committed the last stable offset). Prints the microseconds per
append, wake included, medians of R runs, for read_uncommitted and read_committed.

Compare two versions by running each with its checkout on PYTHONPATH:

    PYTHONPATH=/path/to/old .venv/bin/python bench/fetch_wait.py
    .venv/bin/python bench/fetch_wait.py --partitions 10,200 --appends 2000 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time


def one_run(partitions: int, appends: int, read_committed: bool) -> float:
    from dmq.config import BrokerConfig, LogConfig
    from dmq.record.records import encode_batch
    from dmq.replication.replica_manager import FetchRequestPartition, ReplicaManager
    from dmq.storage.log_manager import LogManager

    directory = tempfile.mkdtemp(prefix="dmq-fetch-wait-")
    lm = LogManager(directory, lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, p: "id")
    rm = ReplicaManager(1, lm)
    try:
        for i in range(partitions):
            rm.become_leader("t", i, "id", 0, replicas=[1], isr=[1])
            for _ in range(50):
                rm.append_to_local_log("t", i, encode_batch([(None, b"v" * 100, [])] * 5, timestamp=1), 1)

        async def main() -> float:
            requests = [FetchRequestPartition("t", i, rm.partitions[("t", i)].log.log_end_offset, 1 << 20)
                        for i in range(partitions)]
            fetch = asyncio.ensure_future(rm.fetch_messages(
                requests, max_wait_ms=600_000, min_bytes=1 << 30, max_bytes=1 << 31, read_committed=read_committed))
            await asyncio.sleep(0.01)  # the fetch is waiting
            batch = encode_batch([(None, b"w" * 100, [])], timestamp=1)
            started = time.perf_counter()
            for k in range(appends):
                rm.append_to_local_log("t", k % partitions, batch, 1)
            took = time.perf_counter() - started
            assert not fetch.done(), "the fetch was answered: min_bytes was reached"
            fetch.cancel()
            return took * 1e6 / appends

        return asyncio.run(main())
    finally:
        lm.shutdown()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", default="10,200", help="comma-separated partition counts")
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import dmq

    print(f"dmq from {dmq.__file__}")
    print(f"{'partitions':>10}  {'read_uncommitted us':>20}  {'read_committed us':>18}")
    for partitions in (int(x) for x in args.partitions.split(",")):
        medians = []
        for read_committed in (False, True):
            runs = [one_run(partitions, args.appends, read_committed) for _ in range(args.repeats)]
            medians.append(statistics.median(runs))
        print(f"{partitions:>10}  {medians[0]:>20.1f}  {medians[1]:>18.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
