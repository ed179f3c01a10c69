"""ShareCoordinator on the CoordinatorRuntime: a write is answered only once replicated,
a broker not leading the key's state partition answers NOT_COORDINATOR, and a new
leader loads the state by replaying the partition."""

from __future__ import annotations

import asyncio
import uuid

from kio.schema.errors import ErrorCode
from support.coordinator import MemoryWriter

from dmq.share.coordinator import ShareCoordinator, ShareCoordinatorConfig
from dmq.share.persister import ReadStateResult, SharePartitionKey, StateSummary
from dmq.share.records import StateBatch

KEY = SharePartitionKey("g", uuid.UUID(int=7), 3)
CONFIG = ShareCoordinatorConfig(num_partitions=4)


def coordinator(w: MemoryWriter) -> ShareCoordinator:
    c = ShareCoordinator(CONFIG, w, commit_timeout_ms=2000)
    c.set_led({c.partition_for(KEY): 1})
    return c


def test_a_write_is_answered_only_once_replicated() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        c = coordinator(w)
        assert await c.initialize_state(KEY, 0, 0) == ErrorCode.none
        w.hold()
        batches = (StateBatch(0, 4, 2, 1),)
        writing = asyncio.create_task(c.write_state(KEY, 0, 1, 0, batches))
        await asyncio.sleep(0.02)
        assert not writing.done()
        # A read meanwhile waits for the write before it and sees it.
        reading = asyncio.create_task(c.read_state(KEY, -1))
        await asyncio.sleep(0.02)
        assert not reading.done()
        w.release()
        assert await writing == ErrorCode.none
        assert (await reading).state_batches == batches
        assert await c.read_state(KEY, 1) == ReadStateResult(ErrorCode.none, 0, 0, batches)

    asyncio.run(scenario())


def test_a_write_that_cannot_be_appended_is_not_acknowledged() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        c = coordinator(w)
        await c.initialize_state(KEY, 0, 0)
        w.fail_append = ErrorCode.not_leader_or_follower
        assert await c.write_state(KEY, 0, 1, 0, (StateBatch(0, 0, 2, 1),)) == ErrorCode.not_coordinator
        w.fail_append = None
        assert (await c.read_state(KEY, 1)).state_batches == ()

    asyncio.run(scenario())


def test_a_broker_not_leading_the_state_partition_answers_not_coordinator() -> None:
    async def scenario() -> None:
        c = ShareCoordinator(CONFIG, MemoryWriter())
        assert not c.owns(KEY)
        assert await c.initialize_state(KEY, 0, 0) == ErrorCode.not_coordinator
        assert await c.write_state(KEY, 0, 1, 0, ()) == ErrorCode.not_coordinator
        assert (await c.read_state(KEY, 1)).error == ErrorCode.not_coordinator
        assert await c.delete_state(KEY) == ErrorCode.not_coordinator
        assert (await c.read_state_summary(KEY, 1)).error == ErrorCode.not_coordinator

    asyncio.run(scenario())


def test_a_new_leader_loads_the_state_from_the_partition() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        old = coordinator(w)
        await old.initialize_state(KEY, 1, 10)
        await old.write_state(KEY, 1, 4, 10, (StateBatch(10, 19, 0, 2),), 3)
        gone = SharePartitionKey("g", uuid.UUID(int=7), 1)
        old.set_led({old.partition_for(KEY): 1, old.partition_for(gone): 1})
        await old.initialize_state(gone, 0, 0)
        await old.delete_state(gone)
        old.set_led({})  # leadership moved away
        assert not old.owns(KEY)
        new = ShareCoordinator(CONFIG, w)  # the next leader, on the same log
        new.set_led({new.partition_for(KEY): 2, new.partition_for(gone): 2})
        assert await new.read_state(KEY, 4) == ReadStateResult(ErrorCode.none, 1, 10, (StateBatch(10, 19, 0, 2),))
        assert await new.read_state_summary(KEY, 4) == StateSummary(ErrorCode.none, 1, 4, 10, 3)
        assert await new.write_state(KEY, 1, 3, -1, ()) == ErrorCode.fenced_leader_epoch
        assert await new.read_state(gone, 0) == ReadStateResult(ErrorCode.none)  # deleted stays deleted

    asyncio.run(scenario())


async def led_by_epoch_5_with_0_to_9_in_flight() -> tuple[MemoryWriter, ShareCoordinator]:
    """A share-partition whose leader (epoch 5) has written offsets 0-9 as in flight; the
    writer then holds every later write uncommitted until ``release()``."""
    w = MemoryWriter()
    c = coordinator(w)
    assert await c.initialize_state(KEY, 0, 0) == ErrorCode.none
    assert await c.write_state(KEY, 0, 5, 0, (StateBatch(0, 9, 0, 1),)) == ErrorCode.none
    w.hold()
    return w, c


def test_a_new_leaders_read_keeps_an_old_leaders_acknowledged_write_before_it() -> None:
    """The old leader of a share-partition (epoch 5) writes an ACCEPT of 0-9; before it is
    committed, the new leader (epoch 6) reads the state. The read's leader-epoch bump (a
    whole snapshot) was built from the state without the ACCEPT and written after it: the
    ACCEPT, answered NONE, was gone, and 0-9 were delivered again."""
    async def scenario() -> None:
        w, c = await led_by_epoch_5_with_0_to_9_in_flight()
        accept = asyncio.create_task(c.write_state(KEY, 0, 5, 10, ()))
        await asyncio.sleep(0.01)
        read = asyncio.create_task(c.read_state(KEY, 6))
        await asyncio.sleep(0.01)
        w.release()
        assert await accept == ErrorCode.none
        assert (await read).start_offset == 10
        again = ShareCoordinator(CONFIG, w, commit_timeout_ms=2000)  # a new coordinator replays it
        again.set_led({again.partition_for(KEY): 2})
        await asyncio.sleep(0.01)
        replayed = await again.read_state(KEY, 6)
        assert (replayed.start_offset, replayed.state_batches) == (10, ())

    asyncio.run(scenario())


def test_an_old_leaders_write_after_a_new_leaders_read_is_fenced() -> None:
    async def scenario() -> None:
        w, c = await led_by_epoch_5_with_0_to_9_in_flight()
        read = asyncio.create_task(c.read_state(KEY, 6))
        await asyncio.sleep(0.01)
        stale = asyncio.create_task(c.write_state(KEY, 0, 5, 10, ()))
        await asyncio.sleep(0.01)
        w.release()
        assert (await read).start_offset == 0
        assert await stale == ErrorCode.fenced_leader_epoch
        summary = await c.read_state_summary(KEY, 6)
        assert (summary.leader_epoch, summary.start_offset) == (6, 0)

    asyncio.run(scenario())
