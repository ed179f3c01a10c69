"""A follower's truncation against its leader (OffsetForLeaderEpoch, KIP-101/279) and
what it appends next: on real logs, the leader's answers read from a real leader log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode
from support.replication import open_log_manager, records

from dmq.config import BrokerConfig
from dmq.record.batch import validate_batches
from dmq.replication.fetcher import FetchState, ReplicaFetcher, ReplicaFetcherManager
from dmq.replication.partition import Partition
from dmq.replication.replica_manager import ReplicaManager

TP = ("t", 0)


def _append(log: Any, n: int, epoch: int) -> None:
    buf = bytearray(records(n))
    log.append_as_leader(buf, validate_batches(buf, 1 << 20), epoch)


class _Leader:
    """Answers OffsetForLeaderEpoch from a leader partition's epoch cache, as its broker would."""

    def __init__(self, leader: Partition) -> None:
        self.leader = leader
        self.asked: list[int] = []

    async def request(self, request: Any, timeout: float) -> Any:
        p = request.topics[0].partitions[0]
        self.asked.append(p.leader_epoch)
        epoch, end = self.leader.log.leader_epochs.end_offset_for(p.leader_epoch, self.leader.log.log_end_offset)
        return SimpleNamespace(topics=[SimpleNamespace(topic="t", partitions=[SimpleNamespace(
            partition=0, error_code=ErrorCode.none, leader_epoch=epoch, end_offset=end)])])


def _truncate_until_done(rm: ReplicaManager, leader: Partition, epoch: int) -> _Leader:
    """Run the fetcher's truncation step as its loop does, until it says it is complete."""
    client = _Leader(leader)

    async def run() -> None:
        manager = ReplicaFetcherManager(rm.broker_id, rm, BrokerConfig(), lambda i: None)
        fetcher = ReplicaFetcher(leader.broker_id)
        state = FetchState(epoch)
        fetcher.partitions[TP] = state
        fetcher.client = client  # type: ignore[assignment]
        for _ in range(5):
            if not state.needs_truncation:
                return
            await manager._truncate(fetcher, {TP: state})
        raise AssertionError("truncation did not complete")

    asyncio.run(run())
    return client


def _epochs_by_offset(p: Partition) -> dict[int, int]:
    return {h.base_offset: h.partition_leader_epoch for s in p.log.segments for _, h in s.batches()}


def _diverged_at_epoch_1(tmp_path: Path) -> tuple[Partition, ReplicaManager, Partition]:
    """Leader A: epoch 0 at 0..9, epoch 2 at 10..14, leading epoch 4. Follower B (it led
    epochs 1 and 3): epoch 0 at 0..4, epoch 1 at 5..7, epoch 3 at 8..9. (A, B's manager, B)"""
    a = Partition("t", 0, "id", open_log_manager(tmp_path / "a").get_or_create("t", 0, "id"), 1)
    _append(a.log, 10, 0)
    _append(a.log, 5, 2)
    a.make_leader(4, [1, 2], [1])
    rm = ReplicaManager(2, open_log_manager(tmp_path / "b"))
    b = rm.become_follower(*TP, "id", 1, 4, [1, 2], [1])[0]
    _append(b.log, 5, 0)
    _append(b.log, 3, 1)
    _append(b.log, 2, 3)
    return a, rm, b


def test_a_follower_lacking_the_leaders_epoch_truncates_again_with_an_older_one(tmp_path: Path) -> None:
    """KIP-279. Leader A: epoch 0 at 0..9, epoch 2 at 10..14, now leading epoch 4. Follower B
    (it led epochs 1 and 3, unclean elections): epoch 0 at 0..4, epoch 1 at 5..7, epoch 3 at
    8..9. B asks for epoch 3, A answers (2, 15); B has no epoch 2, so it cuts to the end of
    its epoch below (8) and asks again, for epoch 1: (0, 10), and cuts to 5. Stopping at 8
    kept B's epoch-1 records 5..7 where A has epoch-0 ones."""
    a, rm, b = _diverged_at_epoch_1(tmp_path)
    client = _truncate_until_done(rm, a, 4)
    assert client.asked == [3, 1]
    assert b.log.log_end_offset == 5
    leaders = _epochs_by_offset(a)
    assert all(leaders.get(o) == e for o, e in _epochs_by_offset(b).items())


def test_an_epoch_a_leader_here_wrote_nothing_in_goes_before_the_leaders_records_come(tmp_path: Path) -> None:
    """C was elected in epoch 1 with log end 5 and wrote nothing (its epoch cache got (1, 5)),
    then follows B, whose log holds epoch-0 records up to 10. The truncation cuts nothing, but
    the entry (1, 5) must go: kept, it labels B's epoch-0 records 5..9 as epoch 1, and C,
    leading later, would answer OffsetForLeaderEpoch(0) with 5, making followers that hold
    0..9 cut committed records. (Kafka's truncateTo clears the cache at the log end even
    when it cuts nothing.)"""
    b = Partition("t", 0, "id", open_log_manager(tmp_path / "b").get_or_create("t", 0, "id"), 2)
    _append(b.log, 5, 0)
    _append(b.log, 5, 0)
    b.make_leader(2, [2, 3], [2])
    lm = open_log_manager(tmp_path / "c")
    _append(lm.get_or_create("t", 0, "id"), 5, 0)  # B's first five records, replicated earlier
    rm = ReplicaManager(3, lm)
    c = rm.become_leader(*TP, "id", 1, [2, 3], [2, 3])  # elected; writes nothing
    assert c.log.leader_epochs.entries == [(0, 0), (1, 5)]
    c = rm.become_follower(*TP, "id", 2, 2, [2, 3], [2, 3])[0]
    _truncate_until_done(rm, b, 2)
    assert c.log.log_end_offset == 5
    data = b.log.read(5, 1 << 20, b.log.log_end_offset)
    assert data is not None
    c.append_as_follower(data.read(), 10)
    assert c.log.leader_epochs.end_offset_for(0, c.log.log_end_offset) == (0, 10)
    assert c.log.leader_epochs.entries == [(0, 0)]


def test_a_follower_restarting_at_a_log_start_inside_a_batch_takes_the_whole_batch(tmp_path: Path) -> None:
    """DeleteRecords may put the leader's log start inside a batch. A follower whose log ends
    below it restarts there; the leader then sends that whole batch, which starts below. The
    follower starts its empty log at the batch's base (Kafka's UnexpectedAppendOffsetException)
    instead of refusing the batch as corrupt on every fetch (a replica that never catches up)."""
    a = Partition("t", 0, "id", open_log_manager(tmp_path / "a").get_or_create("t", 0, "id"), 1)
    a.make_leader(0, [1], [1])
    _append(a.log, 10, 0)
    a.high_watermark = 10
    assert a.delete_records(5) == 5
    f = Partition("t", 0, "id", open_log_manager(tmp_path / "f").get_or_create("t", 0, "id"), 2)
    f.make_follower(1, 0, [1, 2], [1])
    f.truncate_fully_and_start_at(a.log.log_start_offset)
    data = a.log.read(5, 1 << 20, a.log.log_end_offset)
    assert data is not None
    f.append_as_follower(data.read(), 10)
    assert f.log.log_end_offset == 10 and f.log.log_start_offset == 0


def test_a_follower_whose_epochs_are_all_newer_than_the_leaders_answer_keeps_none_of_them(tmp_path: Path) -> None:
    """Clean elections only: L leads epoch 1 and writes 0..9 (not committed). F, in the ISR
    with an empty log, is elected for epoch 2 and writes 0..4, then fails; L is elected again
    (epoch 3). F asks about epoch 2, L answers (1, 10): F has no epoch that old, so none of
    its records is L's. Cutting to the leader's end (5) kept F's epoch-2 records 0..4 where L
    has epoch-1 ones."""
    a = Partition("t", 0, "id", open_log_manager(tmp_path / "a").get_or_create("t", 0, "id"), 1)
    a.make_leader(1, [1, 2], [1, 2])
    _append(a.log, 10, 1)
    a.make_follower(2, 2, [1, 2], [1, 2])
    a.make_leader(3, [1, 2], [1, 2])
    rm = ReplicaManager(2, open_log_manager(tmp_path / "b"))
    f = rm.become_leader(*TP, "id", 2, [1, 2], [1, 2])
    _append(f.log, 5, 2)
    f = rm.become_follower(*TP, "id", 1, 3, [1, 2], [1, 2])[0]
    _truncate_until_done(rm, a, 3)
    assert f.log.log_end_offset == 0 and f.log.leader_epochs.entries == []


def test_a_divergence_below_the_followers_log_start_restarts_its_log(tmp_path: Path) -> None:
    """F: epoch 0 at 0..4, epoch 1 at 5..7, epoch 3 at 8..9, its log start moved to 9
    (DeleteRecords). The leader (epoch 0 at 0..9, epoch 2 at 10..14) answers (2, 15) for
    epoch 3, then (0, 10) for epoch 1: the logs part at 5, below F's start. F starts an
    empty log there (Kafka's truncateTo) instead of asking the same question forever."""
    a, rm, b = _diverged_at_epoch_1(tmp_path)
    b.log.delete_records_before(9)
    _truncate_until_done(rm, a, 4)
    assert (b.log.log_start_offset, b.log.log_end_offset) == (8, 8)
    assert b.log.leader_epochs.entries == []
