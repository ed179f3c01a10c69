"""GroupCoordinator: routing of the group APIs to their shards through the runtime."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode
from support.coordinator import MemoryWriter

from dmq.group.coordinator import GroupConfig, GroupCoordinator


def test_require_stable_sees_a_txn_offset_commit_appended_but_not_replicated() -> None:
    """KIP-447: a TxnOffsetCommit in the log but not yet on every in-sync replica already
    makes its partition unstable to OffsetFetch(require_stable), which answers once that
    write is committed (Kafka's fetchOffsets runs as a write operation then); a plain
    fetch answers at once, from the committed offset."""
    async def main() -> None:
        w = MemoryWriter()
        gc = GroupCoordinator(GroupConfig(num_partitions=1, initial_rebalance_delay_ms=0), w,
                              lambda t, p: True)
        gc.set_led({0: 0})
        assert await gc.commit_offsets("g", -1, "", None, [("t", 0, 10, -1, None)]) == [ErrorCode.none]
        w.hold()  # replication slow: the TxnOffsetCommit is in the log, not yet on every ISR
        txn = asyncio.ensure_future(gc.txn_offset_commit("tx", "g", 7, 0, -1, "", None,
                                                         [("t", 0, 20, -1, None)]))
        await asyncio.sleep(0.01)
        assert len(w.logs[0]) == 2  # appended
        stable = asyncio.ensure_future(gc.fetch_stable_offsets("g", [("t", 0), ("t", 1)]))
        await asyncio.sleep(0.01)
        assert not stable.done()
        error, committed = gc.fetch_offsets("g", [("t", 0)])
        assert error == ErrorCode.none and committed[("t", 0)] is not None and committed[("t", 0)].offset == 10
        w.release()
        assert await txn == [ErrorCode.none]
        error, committed, unstable = await stable
        assert error == ErrorCode.none and unstable == {("t", 0)}
        assert await gc.complete_transaction(0, 7, 0, True, 0) == ErrorCode.none
        error, committed, unstable = await gc.fetch_stable_offsets("g", [("t", 0)])
        assert unstable == set() and committed[("t", 0)] is not None and committed[("t", 0)].offset == 20
        await gc.close()
    asyncio.run(main())
