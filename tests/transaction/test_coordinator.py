"""The TransactionCoordinator on the coordinator runtime, over an in-memory log."""

from __future__ import annotations

import asyncio
import itertools

from kio.schema.errors import ErrorCode
from support.coordinator import MemoryWriter

from dmq.transaction.coordinator import TransactionCoordinator
from dmq.transaction.shard import TransactionConfig

CONFIG = TransactionConfig(num_partitions=1)


def coordinator(w: MemoryWriter, leader_epoch: int) -> TransactionCoordinator:
    ids = itertools.count(1000)

    async def new_id() -> int:
        return next(ids)

    c = TransactionCoordinator(CONFIG, w, new_id)
    c.set_led({0: leader_epoch})
    return c


def test_a_new_coordinator_confirms_nothing_from_a_log_tail_that_is_not_committed() -> None:
    """Chaos seed 403: the coordinator wrote a transaction's partitions (Ongoing) and lost
    leadership before they were committed; the next leader had the record, loaded it,
    and answered the producer's retried AddPartitionsToTxn at once from it ("already in
    the transaction"). The leader after that did not have it: the producer's records were
    never in any transaction the coordinator knew, its commit was taken for a retry of the
    previous one, and they never got markers."""
    async def scenario() -> None:
        w = MemoryWriter()
        old = coordinator(w, 1)
        init = await old.init_producer_id("tx", 60_000)
        assert init.error == ErrorCode.none
        w.hold()
        adding = asyncio.create_task(old.add_partitions("tx", init.producer_id, init.producer_epoch,
                                                        [("t", 0)]))
        await asyncio.sleep(0.01)
        assert not adding.done()  # written, not committed
        old.set_led({})  # leadership moved (the old write's wait is left hanging)
        new = coordinator(w, 2)  # a new leader whose log has the record
        w.fail_commit = ErrorCode.request_timed_out  # ...which it cannot commit
        retried = await new.add_partitions("tx", init.producer_id, init.producer_epoch, [("t", 0)])
        assert retried == ErrorCode.coordinator_not_available  # retriable; never "none"
        w.fail_commit = None
        w.release()  # once it is committed, the retry is confirmed
        assert await new.add_partitions("tx", init.producer_id, init.producer_epoch,
                                        [("t", 0)]) == ErrorCode.none
        adding.cancel()
        await new.close()
        await old.close()

    asyncio.run(scenario())
