"""ReplicaManager with a real LogManager: the high-watermark checkpoint across restarts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from support.transactions import data_batch

from dmq.config import BrokerConfig, LogConfig
from dmq.record.records import encode_batch
from dmq.replication.partition import PartitionError
from dmq.replication.replica_manager import (
    HIGH_WATERMARK_FILE,
    FetchRequestPartition,
    ReplicaManager,
)
from dmq.storage.log_manager import LogManager, read_checkpoint


def _open(path: Path) -> tuple[LogManager, ReplicaManager]:
    lm = LogManager(str(path), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, p: "id")
    return lm, ReplicaManager(1, lm)


def _produce(rm: ReplicaManager, n: int) -> None:
    result = rm.append_to_local_log("t", 0, encode_batch([(None, b"v", [])] * n, timestamp=1), 1)
    assert result.error == 0


def test_replicated_partition_restarts_from_its_checkpointed_high_watermark(tmp_path: Path) -> None:
    lm, rm = _open(tmp_path)
    p = rm.become_leader("t", 0, "id", 0, replicas=[1, 2], isr=[1])  # follower 2 out of the ISR
    _produce(rm, 10)
    assert p.high_watermark == 10  # the ISR is this broker alone
    rm.checkpoint_high_watermarks()
    _produce(rm, 5)  # appended after the checkpoint: not known to be committed after a restart
    assert read_checkpoint(str(tmp_path / HIGH_WATERMARK_FILE)) == {("t", 0): 10}
    lm.shutdown()

    lm, rm = _open(tmp_path)
    again = rm.become_follower("t", 0, "id", 2, 1, replicas=[1, 2], isr=[1, 2])[0]
    assert again.log.log_end_offset == 15
    assert again.high_watermark == 10  # readable at once, and nothing beyond what was committed
    lm.shutdown()


def test_checkpoint_is_clamped_into_the_log(tmp_path: Path) -> None:
    lm, rm = _open(tmp_path)
    rm.become_leader("t", 0, "id", 0, replicas=[1, 2], isr=[1])
    _produce(rm, 4)
    rm.checkpoint_high_watermarks()
    lm.shutdown()
    # A checkpoint beyond the log (say the tail was lost in a crash) is cut to the log end;
    # without a checkpoint entry a replicated partition starts at the log start.
    (tmp_path / HIGH_WATERMARK_FILE).write_text("0\n2\nt 0 99\nother 0 7\n")
    lm, rm = _open(tmp_path)
    assert rm.become_follower("t", 0, "id", 2, 1, replicas=[1, 2], isr=[1, 2])[0].high_watermark == 4
    lm.shutdown()
    (tmp_path / HIGH_WATERMARK_FILE).unlink()
    lm, rm = _open(tmp_path)
    assert rm.become_follower("t", 0, "id", 2, 1, replicas=[1, 2], isr=[1, 2])[0].high_watermark == 0
    lm.shutdown()


def test_a_recreated_partition_does_not_take_the_deleted_ones_high_watermark(tmp_path: Path) -> None:
    """A partition deleted and created again starts at offset 0 with nothing committed. A
    crash before the next periodic checkpoint must not give the new log the deleted one's
    high watermark (its uncommitted records would become readable, and later be cut by
    the leader's log)."""
    lm, rm = _open(tmp_path)
    p = rm.become_leader("t", 0, "id", 0, replicas=[1, 2], isr=[1])
    _produce(rm, 10)
    assert p.high_watermark == 10
    rm.checkpoint_high_watermarks()
    rm.remove_partition("t", 0, delete=True)
    again = rm.become_leader("t", 0, "id", 1, replicas=[1, 2], isr=[1, 2])  # follower 2 in the ISR
    _produce(rm, 3)
    assert again.high_watermark == 0  # follower 2 has not fetched them
    # killed here: no shutdown, no later periodic checkpoint
    lm, rm = _open(tmp_path)
    restarted = rm.become_follower("t", 0, "id", 2, 2, replicas=[1, 2], isr=[1, 2])[0]
    assert restarted.log.log_end_offset == 3
    assert restarted.high_watermark == 0
    lm.shutdown()


def test_a_partition_removed_at_start_leaves_the_high_watermark_file(tmp_path: Path) -> None:
    """A log removed while loading (its topic deleted, or its replica moved away, while
    this broker was down) takes its high watermark out of the file when the
    ReplicaManager starts, as load_logs takes it out of its own files; otherwise a log
    of the partition made later would start from it after a crash."""
    lm, rm = _open(tmp_path)
    rm.become_leader("t", 0, "id", 0, replicas=[1, 2], isr=[1])
    _produce(rm, 10)
    rm.checkpoint_high_watermarks()
    lm.shutdown()
    lm = LogManager(str(tmp_path), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, p: None)  # the cluster no longer has t-0 here
    ReplicaManager(1, lm)
    assert read_checkpoint(str(tmp_path / HIGH_WATERMARK_FILE)) == {}
    lm.shutdown()
    lm, rm = _open(tmp_path)
    rm.become_leader("t", 0, "id", 1, replicas=[1, 2], isr=[1, 2])  # moved back: a new log
    _produce(rm, 3)
    # killed here
    lm, rm = _open(tmp_path)
    assert rm.become_follower("t", 0, "id", 2, 2, replicas=[1, 2], isr=[1, 2])[0].high_watermark == 0
    lm.shutdown()


def _follower_fetch(rm: ReplicaManager, replica: int, offset: int, epoch: int) -> list[Any]:
    return asyncio.run(rm.fetch_messages(
        [FetchRequestPartition("t", 0, offset, 1 << 20, current_leader_epoch=epoch)],
        max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, replica_id=replica))


def test_a_refused_follower_fetch_does_not_move_the_high_watermark(tmp_path: Path) -> None:
    """A follower's fetch offset counts as its log end only from a fetch the leader serves:
    not one in an older epoch (a follower that has not truncated against this leadership:
    what it holds below that offset may differ) nor one beyond the log end (a diverged log:
    counted, every later append would be committed the moment it is written). Kafka checks
    both before updateFollowerFetchState."""
    lm, rm = _open(tmp_path)
    p = rm.become_leader("t", 0, "id", 3, replicas=[1, 2], isr=[1, 2])
    _produce(rm, 10)
    assert _follower_fetch(rm, 2, 10, epoch=0)[0].error == ErrorCode.fenced_leader_epoch
    assert p.high_watermark == 0
    assert _follower_fetch(rm, 2, 1000, epoch=3)[0].error == ErrorCode.offset_out_of_range
    _produce(rm, 10)
    assert p.high_watermark == 0
    assert _follower_fetch(rm, 2, 15, epoch=-1)[0].error == ErrorCode.none  # no epoch given: counts
    assert p.high_watermark == 15
    assert _follower_fetch(rm, 2, 20, epoch=3)[0].error == ErrorCode.none
    assert p.high_watermark == 20
    assert p.delete_records(20) == 20
    _produce(rm, 5)
    assert _follower_fetch(rm, 2, 10, epoch=3)[0].error == ErrorCode.offset_out_of_range  # below the start
    assert p.followers[2].log_end_offset == 20
    lm.shutdown()


def test_retention_never_deletes_what_the_high_watermark_has_not_passed(tmp_path: Path) -> None:
    """Kafka's deletableSegments: a segment goes only once the high watermark passed it. An
    acks=all batch retention deleted before any follower fetched it was answered as written
    once the follower restarted at the leader's new log start."""
    lm, rm = _open(tmp_path)
    p = rm.become_leader("t", 0, "id", 0, replicas=[1, 2], isr=[1, 2])
    _produce(rm, 10)  # record timestamps are 1 (1970): long expired
    assert p.high_watermark == 0
    rm.log_manager.run_retention()
    assert p.log.log_start_offset == 0 and p.log.log_end_offset == 10
    assert _follower_fetch(rm, 2, 10, epoch=0)[0].error == ErrorCode.none  # replicated now
    assert p.high_watermark == 10
    rm.log_manager.run_retention()
    assert p.log.log_start_offset == 10  # deleted once committed
    lm.shutdown()


class _Coordinator:
    """A transaction coordinator's verify-only answers, as the broker's
    AddPartitionsToTxnManager gives them: the refused partitions with their Produce errors.
    ``hold`` keeps the answer back until ``release``, as a remote coordinator's round trip."""

    def __init__(self) -> None:
        self.in_transaction: set[tuple[str, int]] = set()
        self.calls: list[tuple[str, int, int, list[tuple[str, int]]]] = []
        self.held: asyncio.Event | None = None
        self.answer = ErrorCode.invalid_txn_state  # for a partition not in the transaction

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        self.calls.append((transactional_id, producer_id, producer_epoch, partitions))
        if self.held is not None:
            await self.held.wait()
        return {tp: self.answer for tp in partitions if tp not in self.in_transaction}


def _verified(path: Path) -> tuple[LogManager, ReplicaManager, _Coordinator]:
    lm, rm = _open(path)
    rm.become_leader("t", 0, "id", 0, replicas=[1], isr=[1])
    rm.become_leader("t", 1, "id", 0, replicas=[1], isr=[1])
    coordinator = _Coordinator()
    rm.txn_verifier = coordinator
    return lm, rm, coordinator


def _txn_batch(pid: int, seq: int, epoch: int = 0) -> bytes:
    return bytes(data_batch(pid, epoch, seq, [b"v"]))


def test_a_transactional_produce_is_verified_before_it_opens_a_transaction(tmp_path: Path) -> None:
    """KIP-890: a late batch of an ended transaction (the coordinator no longer has the
    partition in it) is refused, not appended where it would open a transaction no
    coordinator ends; a batch of a transaction the coordinator confirms is appended, and
    the transaction's later batches are not verified again."""
    lm, rm, coordinator = _verified(tmp_path)

    async def main() -> None:
        late = await rm.append_records({("t", 0): _txn_batch(7, 0)}, 1, 5, transactional_id="app")
        assert late[("t", 0)].error == ErrorCode.invalid_txn_state
        assert coordinator.calls == [("app", 7, 0, [("t", 0)])]
        log = rm.partitions[("t", 0)].log
        assert log.log_end_offset == 0 and log.last_stable_offset() == 0
        coordinator.in_transaction.add(("t", 0))
        ok = await rm.append_records({("t", 0): _txn_batch(7, 0), ("t", 1): _txn_batch(7, 0)}, 1, 5,
                                     transactional_id="app")
        assert ok[("t", 0)].error == ErrorCode.none and ok[("t", 1)].error == ErrorCode.invalid_txn_state
        assert coordinator.calls[1] == ("app", 7, 0, [("t", 0), ("t", 1)])
        await rm.append_records({("t", 0): _txn_batch(7, 1)}, 1, 5, transactional_id="app")
        assert len(coordinator.calls) == 2 and log.log_end_offset == 2
        # Without a transactional id there is nothing to verify with: refused by the log.
        none = await rm.append_records({("t", 1): _txn_batch(8, 0)}, 1, 5)
        assert none[("t", 1)].error == ErrorCode.invalid_txn_state
        mixed = await rm.append_records({("t", 0): _txn_batch(7, 2), ("t", 1): _txn_batch(9, 0)}, 1, 5,
                                        transactional_id="app")
        assert {r.error for r in mixed.values()} == {ErrorCode.invalid_producer_id_mapping}
        # A coordinator that cannot answer now: NOT_ENOUGH_REPLICAS, which producers retry.
        coordinator.answer = ErrorCode.coordinator_load_in_progress
        retry = await rm.append_records({("t", 1): _txn_batch(7, 0)}, 1, 5, transactional_id="app")
        assert retry[("t", 1)].error == ErrorCode.not_enough_replicas

    asyncio.run(main())
    lm.shutdown()


def test_a_verified_batch_overtaken_by_its_transactions_marker_is_refused(tmp_path: Path) -> None:
    """The coordinator confirms the partition, then aborts the transaction (its marker is
    written) before the confirmed batch is appended: the batch is refused."""
    lm, rm, coordinator = _verified(tmp_path)
    coordinator.in_transaction.add(("t", 0))

    async def main() -> None:
        coordinator.held = asyncio.Event()
        produce = asyncio.create_task(rm.append_records({("t", 0): _txn_batch(7, 0)}, 1, 5,
                                                        transactional_id="app"))
        while not coordinator.calls:
            await asyncio.sleep(0)
        assert rm.append_end_txn_marker("t", 0, 7, 0, 0, commit=False).error == ErrorCode.none
        coordinator.held.set()
        assert (await produce)[("t", 0)].error == ErrorCode.invalid_txn_state
        log = rm.partitions[("t", 0)].log
        assert log.log_end_offset == 1 and not log.producer_state.producers[7].has_ongoing_txn

    asyncio.run(main())
    lm.shutdown()


def test_a_partition_not_led_when_its_verification_starts_is_refused_as_not_led(tmp_path: Path) -> None:
    """A partition this broker comes to lead while the request waits for the coordinator
    would be appended without a guard and refused INVALID_TXN_STATE, which librdkafka
    takes as fatal; as Kafka, it is NOT_LEADER_OR_FOLLOWER from the start."""
    lm, rm, coordinator = _verified(tmp_path)
    coordinator.in_transaction |= {("t", 0), ("t", 2)}
    rm.become_follower("t", 2, "id", 2, 1, replicas=[1, 2], isr=[1, 2])

    async def main() -> None:
        coordinator.held = asyncio.Event()
        produce = asyncio.create_task(rm.append_records({("t", 0): _txn_batch(7, 0), ("t", 2): _txn_batch(7, 0)},
                                                        1, 5, transactional_id="app"))
        while not coordinator.calls:
            await asyncio.sleep(0)
        assert coordinator.calls == [("app", 7, 0, [("t", 0)])]
        rm.become_leader("t", 2, "id", 2, replicas=[1, 2], isr=[1])
        coordinator.held.set()
        results = await produce
        assert results[("t", 0)].error == ErrorCode.none
        assert results[("t", 2)].error == ErrorCode.not_leader_or_follower

    asyncio.run(main())
    lm.shutdown()


def test_a_waiting_fetch_is_answered_when_its_leader_epoch_is_replaced_here(tmp_path: Path) -> None:
    """A consumer's fetch waits at the log end in epoch 3; this broker stays leader under
    epoch 4: the fetch is answered FENCED_LEADER_EPOCH at once, as Kafka's DelayedFetch
    completes on a fenced epoch (before, it waited its whole max wait)."""
    lm, rm = _open(tmp_path)
    rm.become_leader("t", 0, "id", 3, replicas=[1], isr=[1])
    _produce(rm, 2)

    async def scenario() -> tuple[float, ErrorCode]:
        started = asyncio.get_running_loop().time()
        fetch = asyncio.ensure_future(rm.fetch_messages(
            [FetchRequestPartition("t", 0, 2, 1 << 20, current_leader_epoch=3)],
            max_wait_ms=5000, min_bytes=1, max_bytes=1 << 20))
        await asyncio.sleep(0.1)
        rm.become_leader("t", 0, "id", 4, replicas=[1], isr=[1])
        results = await asyncio.wait_for(fetch, 10)
        return asyncio.get_running_loop().time() - started, results[0].error

    took, error = asyncio.run(scenario())
    assert error == ErrorCode.fenced_leader_epoch and took < 2, (took, error)
    lm.shutdown()


def test_min_bytes_above_max_bytes_does_not_wait_for_what_cannot_fit(tmp_path: Path) -> None:
    """Kafka's handleFetchRequest takes min(min_bytes, max_bytes): a fetch asking at least
    5000 bytes of an answer of at most 300 is answered at once when 300 are there."""
    lm, rm = _open(tmp_path)
    rm.become_leader("t", 0, "id", 0, replicas=[1], isr=[1])
    _produce(rm, 100)  # one batch of about 900 bytes

    async def scenario() -> float:
        started = asyncio.get_running_loop().time()
        await rm.fetch_messages([FetchRequestPartition("t", 0, 0, 1 << 20)], max_wait_ms=5000,
                                min_bytes=5000, max_bytes=300)
        return asyncio.get_running_loop().time() - started

    assert asyncio.run(scenario()) < 2
    lm.shutdown()


def test_a_read_committed_fetch_waits_on_the_last_stable_offset(tmp_path: Path) -> None:
    """A read_committed fetch can read only below the last stable offset, and Kafka's
    DelayedFetch measures it there: more records of an open transaction do not answer it
    (before, the high watermark's growth did, with nothing to read), and the commit does at
    once even when the marker alone is fewer bytes than min_bytes (before, it waited its
    whole max wait)."""
    lm, rm = _open(tmp_path)
    rm.become_leader("t", 0, "id", 0, replicas=[1], isr=[1])

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first = await rm.append_records({("t", 0): bytes(data_batch(7, 0, 0, [b"x" * 3000]))}, 1, 5,
                                        transactional_id="app")
        assert first[("t", 0)].error == ErrorCode.none
        assert rm.partitions[("t", 0)].log.last_stable_offset() == 0
        started = loop.time()
        fetch = asyncio.ensure_future(rm.fetch_messages(
            [FetchRequestPartition("t", 0, 0, 1 << 20)], max_wait_ms=4000, min_bytes=1024, max_bytes=1 << 20,
            read_committed=True))
        await asyncio.sleep(0.1)
        more = await rm.append_records({("t", 0): bytes(data_batch(7, 0, 1, [b"y" * 3000]))}, 1, 5,
                                       transactional_id="app")
        assert more[("t", 0)].error == ErrorCode.none
        await asyncio.sleep(0.2)
        assert not fetch.done()  # the transaction is still open: nothing to read yet
        assert rm.append_end_txn_marker("t", 0, 7, 0, 0, commit=True).error == ErrorCode.none
        results = await asyncio.wait_for(fetch, 10)
        assert loop.time() - started < 2
        assert results[0].data is not None and results[0].data.length > 6000

    asyncio.run(scenario())
    lm.shutdown()


def test_a_fetch_on_an_older_segment_than_the_high_watermark_is_answered_at_once(tmp_path: Path) -> None:
    """A read stops at its segment's end. A consumer whose fetch offset lies in an older
    segment than the high watermark's (or the last stable offset's) gets only that segment's
    rest, however many records the later ones hold; Kafka's DelayedFetch answers it at once
    ("fetching older segments"), at the start of the wait or once the high watermark moves
    into a later segment. Before, it waited its whole max wait at every segment boundary
    when min_bytes was above what was left of the segment."""
    lm, rm = _open(tmp_path)
    p = rm.become_leader("t", 0, "id", 0, replicas=[1], isr=[1])
    _produce(rm, 5)
    p.log.roll()
    _produce(rm, 200)
    assert p.high_watermark == 205

    async def fetch(offset: int, read_committed: bool = False) -> tuple[float, Any]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        results = await rm.fetch_messages([FetchRequestPartition("t", 0, offset, 1 << 20)], max_wait_ms=5000,
                                          min_bytes=10_000, max_bytes=1 << 20, read_committed=read_committed)
        return loop.time() - started, results[0]

    for read_committed in (False, True):
        took, result = asyncio.run(fetch(0, read_committed))
        assert took < 2 and result.error == ErrorCode.none, (read_committed, took)
        assert result.data is not None and 0 < result.data.length < 10_000  # the first segment's rest
    lm.shutdown()

    # With a follower in the ISR: the high watermark on the fetch offset's segment, a later
    # one holding records not committed yet. The fetch waits; the follower's fetch moves the
    # high watermark into the later segment and answers it.
    lm, rm = _open(tmp_path / "isr")
    p = rm.become_leader("t", 0, "id", 0, replicas=[1, 2], isr=[1, 2])
    _produce(rm, 5)
    assert _follower_fetch(rm, 2, 5, epoch=0)[0].error == ErrorCode.none
    assert p.high_watermark == 5
    p.log.roll()
    _produce(rm, 200)

    # Not answered within 0.2 s: nothing beyond the high watermark's segment to wait for.
    took, _, high_watermark = _answer_after_a_follower_fetch(rm, 3, 10_000, 5000, 205, 0, settle_s=0.2)
    assert high_watermark == 205
    assert took < 2
    lm.shutdown()


def test_a_waiting_fetch_is_answered_when_the_high_watermark_passes_records_from_before_a_restart(
        tmp_path: Path) -> None:
    """Records above the high watermark when the Partition is created (a restart's tail
    above the checkpointed high watermark) or left by a truncation were never counted as
    they moved below it: a consumer waiting with min_bytes=1 was answered only at its
    max wait when a follower's fetch committed them. Kafka's DelayedFetch measures the
    log between the fetch offset and the high watermark."""
    lm, rm = _open(tmp_path)
    rm.become_leader("t", 0, "id", 0, replicas=[1, 2], isr=[1, 2])
    _produce(rm, 10)
    p = rm.partitions[("t", 0)]
    assert p.high_watermark == 0  # follower 2 has not fetched them
    rm.checkpoint_high_watermarks()
    lm.shutdown()

    lm, rm = _open(tmp_path)
    p = rm.become_leader("t", 0, "id", 1, replicas=[1, 2], isr=[1, 2])
    assert (p.high_watermark, p.log.log_end_offset) == (0, 10)

    took, result, high_watermark = _answer_after_a_follower_fetch(rm, 0, 1, 1500, 10, 1)
    assert high_watermark == 10
    assert took < 1 and result.data is not None and result.data.length > 0, took
    lm.shutdown()


def test_a_waiting_fetch_counts_records_left_above_the_high_watermark_by_a_truncation(tmp_path: Path) -> None:
    """As above, for records a follower kept through a truncation and then leads with: a
    follower fetch committing half of them answers a consumer's min_bytes=1 at once."""
    lm, rm = _open(tmp_path)
    p = rm.become_follower("t", 0, "id", 2, 0, replicas=[1, 2], isr=[1, 2])[0]
    for _ in range(4):
        p.append_as_follower(encode_batch([(None, b"v" * 50, [])] * 5, timestamp=1, base_offset=p.log.log_end_offset),
                             0)
    p.truncate_to(15)  # the last batch diverged
    assert (p.high_watermark, p.log.log_end_offset) == (0, 15)
    rm.become_leader("t", 0, "id", 1, replicas=[1, 2], isr=[1, 2])

    took, _, high_watermark = _answer_after_a_follower_fetch(rm, 0, 1, 1500, 5, 1)
    assert high_watermark == 5
    assert took < 1
    lm.shutdown()


def _answer_after_a_follower_fetch(rm: ReplicaManager, offset: int, min_bytes: int, max_wait_ms: int,
                                   follower_offset: int, follower_epoch: int,
                                   settle_s: float = 0.1) -> tuple[float, Any, int]:
    """A consumer's fetch at ``offset`` waits (not answered within ``settle_s``); follower 2
    then fetches at ``follower_offset``. Returns how long the consumer's answer took, the
    answer, and the high watermark right after the follower's fetch."""
    async def scenario() -> tuple[float, Any, int]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiting = asyncio.ensure_future(rm.fetch_messages(
            [FetchRequestPartition("t", 0, offset, 1 << 20)], max_wait_ms=max_wait_ms, min_bytes=min_bytes,
            max_bytes=1 << 20))
        await asyncio.sleep(settle_s)
        assert not waiting.done()
        followed = await rm.fetch_messages([FetchRequestPartition("t", 0, follower_offset, 1 << 20, follower_epoch)],
                                           0, 1, 1 << 20, replica_id=2)
        assert followed[0].error == ErrorCode.none
        high_watermark = rm.partitions[("t", 0)].high_watermark
        results = await asyncio.wait_for(waiting, 10)
        return loop.time() - started, results[0], high_watermark
    return asyncio.run(scenario())


def _follower_fetch_from(rm: ReplicaManager, replica: int, offset: int, log_start: int) -> None:
    results = asyncio.run(rm.fetch_messages(
        [FetchRequestPartition("t", 0, offset, 1 << 20, current_leader_epoch=0, log_start_offset=log_start)],
        max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, replica_id=replica))
    assert results[0].error == ErrorCode.none


def test_delete_records_waits_for_the_followers_log_starts(tmp_path: Path) -> None:
    """Kafka's DelayedDeleteRecords: DeleteRecords is answered once the low watermark (the
    smallest log start among the leader and its registered followers, from their fetches)
    reaches the offset, else REQUEST_TIMED_OUT after the request's timeout. Before, the
    leader answered at once with its own log start: a leader lost then left a new leader
    whose log start was 0, serving the deleted records again."""
    lm, rm = _open(tmp_path)
    p = rm.become_leader("t", 0, "id", 0, replicas=[1, 2], isr=[1, 2])
    _produce(rm, 10)
    _follower_fetch_from(rm, 2, 10, 0)
    assert p.high_watermark == 10

    async def delete(offset: int, timeout_ms: int) -> tuple[float, tuple[int, ErrorCode]]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        done = await rm.delete_records({("t", 0): offset}, timeout_ms)
        return loop.time() - started, done[("t", 0)]

    took, done = asyncio.run(delete(5, 300))
    assert done == (0, ErrorCode.request_timed_out) and took >= 0.25, (took, done)
    assert p.log.log_start_offset == 5  # the leader's moved

    async def follower_catches_up() -> tuple[float, tuple[int, ErrorCode]]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiting = asyncio.ensure_future(rm.delete_records({("t", 0): 7}, 5000))
        await asyncio.sleep(0.1)
        await rm.fetch_messages([FetchRequestPartition("t", 0, 10, 1 << 20, 0, log_start_offset=5)], 0, 1, 1 << 20,
                                replica_id=2)
        await asyncio.sleep(0.05)
        assert not waiting.done()  # 5: not 7 yet
        await rm.fetch_messages([FetchRequestPartition("t", 0, 10, 1 << 20, 0, log_start_offset=7)], 0, 1, 1 << 20,
                                replica_id=2)
        done = await asyncio.wait_for(waiting, 10)
        return loop.time() - started, done[("t", 0)]

    took, done = asyncio.run(follower_catches_up())
    assert done == (7, ErrorCode.none) and took < 2, (took, done)

    async def leadership_goes() -> tuple[int, ErrorCode]:
        waiting = asyncio.ensure_future(rm.delete_records({("t", 0): 9}, 5000))
        await asyncio.sleep(0.1)
        rm.become_follower("t", 0, "id", 2, 1, replicas=[1, 2], isr=[1, 2])
        return (await asyncio.wait_for(waiting, 2))[("t", 0)]

    assert asyncio.run(leadership_goes()) == (-1, ErrorCode.not_leader_or_follower)
    lm.shutdown()


def test_delete_records_counts_only_registered_followers_and_answers_a_single_replica_at_once(
        tmp_path: Path) -> None:
    """A follower that has not fetched in this leader epoch holds the low watermark at -1
    (Kafka's unknown log start), one no longer registered does not (Kafka counts the alive
    brokers); a partition without followers is answered at once with its log start."""
    lm = LogManager(str(tmp_path), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, p: "id")
    alive = {1, 2, 3}
    rm = ReplicaManager(1, lm, replica_alive=alive.__contains__)
    rm.become_leader("t", 0, "id", 0, replicas=[1, 2, 3], isr=[1, 2, 3])
    _produce(rm, 10)
    _follower_fetch_from(rm, 2, 10, 0)
    _follower_fetch_from(rm, 3, 10, 6)
    assert rm.partitions[("t", 0)].high_watermark == 10
    rm.become_leader("t", 0, "id", 1, replicas=[1, 2, 3], isr=[1, 2, 3])  # a new epoch: starts unknown
    done = asyncio.run(rm.delete_records({("t", 0): 5}, 0))
    assert done[("t", 0)] == (-1, ErrorCode.request_timed_out)
    alive.discard(2)
    alive.discard(3)
    assert asyncio.run(rm.delete_records({("t", 0): 6}, 0))[("t", 0)] == (6, ErrorCode.none)
    rm.become_leader("u", 0, "id", 0, replicas=[1], isr=[1])
    rm.append_to_local_log("u", 0, encode_batch([(None, b"v", [])] * 10, timestamp=1), 1)
    assert asyncio.run(rm.delete_records({("u", 0): 4, ("v", 0): 1}, 5000)) == {
        ("u", 0): (4, ErrorCode.none), ("v", 0): (-1, ErrorCode.unknown_topic_or_partition)}
    lm.shutdown()


def test_a_client_leader_epoch_is_checked_before_leadership(tmp_path: Path) -> None:
    """As Kafka's Partition.getLocalLog: a follower here in epoch 3 answers a client's
    epoch 4 (a leadership it has not applied yet) UNKNOWN_LEADER_EPOCH, so the client
    retries rather than refreshing metadata that already names this broker, and epoch 2
    FENCED_LEADER_EPOCH; only epoch 3, or none, is NOT_LEADER_OR_FOLLOWER. Fetch,
    ListOffsets and OffsetForLeaderEpoch go through leader_partition. Before, all three
    were NOT_LEADER_OR_FOLLOWER."""
    lm, rm = _open(tmp_path)
    rm.become_follower("t", 0, "id", 2, 3, replicas=[1, 2], isr=[1, 2])

    def fetched(epoch: int) -> ErrorCode:
        return asyncio.run(rm.fetch_messages([FetchRequestPartition("t", 0, 0, 1 << 20, epoch)], 0, 1,
                                             1 << 20))[0].error

    def led(epoch: int) -> ErrorCode:
        try:
            rm.leader_partition("t", 0, epoch)
        except PartitionError as e:
            return e.error
        return ErrorCode.none

    for check in (fetched, led):
        assert check(4) == ErrorCode.unknown_leader_epoch
        assert check(2) == ErrorCode.fenced_leader_epoch
        assert check(3) == check(-1) == ErrorCode.not_leader_or_follower
    rm.become_leader("t", 0, "id", 4, replicas=[1, 2], isr=[1, 2])
    assert fetched(4) == led(4) == ErrorCode.none
    lm.shutdown()
