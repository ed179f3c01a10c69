"""The replica fetcher's loop against a stand-in leader: what one partition's failure
does to the connection and to the other partitions of the same answer."""

from __future__ import annotations

import asyncio
import errno
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from support.replication import open_log_manager, records

from dmq.config import BrokerConfig
from dmq.protocol.codec import decode_request
from dmq.record.batch import validate_batches
from dmq.replication.fetch_session import INVALID_SESSION_ID
from dmq.replication.fetcher import FETCH_VERSION, FetchState, ReplicaFetcher, ReplicaFetcherManager
from dmq.replication.replica_manager import ReplicaManager, TopicPartition
from dmq.storage.log import Log

A, B = ("t", 0), ("t", 1)
ADDRESS = ("127.0.0.1", 1)  # should the stand-in be closed, a real connection is refused at once


class _Leader:
    """Broker 1, leading ``t-0`` and ``t-1`` with ten records each: answers a follower's
    Fetch from its logs, sessionless, and OffsetForLeaderEpoch with 'no epoch information'
    (the follower keeps what it has committed). Counts whether it was closed."""

    host, port = ADDRESS
    client_id = "dmq-replica-2"

    def __init__(self, tmp_path: Path) -> None:
        self.lm = open_log_manager(tmp_path)
        self.logs: dict[TopicPartition, Log] = {}
        for tp in (A, B):
            lg = self.lm.get_or_create(*tp, "id")
            buf = bytearray(records(10))
            lg.append_as_leader(buf, validate_batches(buf, 1 << 20), 0)
            self.logs[tp] = lg
        self.fetched: list[dict[TopicPartition, int]] = []
        self.closed = 0

    async def request_frame(self, encode: Any, response_class: Any, timeout: float) -> Any:
        _, request = decode_request(encode(1)[4:], 1, FETCH_VERSION)
        asked = {(t.topic, p.partition): p.fetch_offset for t in request.topics for p in t.partitions}
        self.fetched.append(asked)
        await asyncio.sleep(0.01)  # a leader's max wait, shortened
        partitions = []
        for (topic, index), offset in asked.items():
            lg = self.logs[(topic, index)]
            data = lg.read(offset, 1 << 20, lg.log_end_offset)
            partitions.append(SimpleNamespace(
                partition_index=index, error_code=ErrorCode.none, high_watermark=lg.log_end_offset,
                log_start_offset=lg.log_start_offset, records=data.read() if data is not None else b""))
        return SimpleNamespace(error_code=ErrorCode.none, session_id=INVALID_SESSION_ID,
                               responses=[SimpleNamespace(topic="t", partitions=partitions)])

    async def request(self, request: Any, timeout: float) -> Any:
        return SimpleNamespace(topics=[SimpleNamespace(topic=t.topic, partitions=[SimpleNamespace(
            partition=p.partition, error_code=ErrorCode.none, leader_epoch=-1, end_offset=-1)
            for p in t.partitions]) for t in request.topics])

    def close(self) -> None:
        self.closed += 1


def _follow(tmp_path: Path, truncated: bool) -> tuple[ReplicaManager, ReplicaFetcherManager, ReplicaFetcher, _Leader]:
    """Broker 2 following broker 1 for A and B in epoch 0, with the stand-in as its connection."""
    rm = ReplicaManager(2, open_log_manager(tmp_path / "follower"))
    for tp in (A, B):
        rm.become_follower(*tp, "id", 1, 0, [1, 2], [1, 2])
    leader = _Leader(tmp_path / "leader")
    manager = ReplicaFetcherManager(2, rm, BrokerConfig(), lambda broker_id: ADDRESS)
    fetcher = ReplicaFetcher(1, client=leader)  # type: ignore[arg-type]
    fetcher.partitions = {tp: FetchState(0, needs_truncation=not truncated) for tp in (A, B)}
    manager.fetchers[1] = fetcher
    return rm, manager, fetcher, leader


async def _run_for(manager: ReplicaFetcherManager, fetcher: ReplicaFetcher, seconds: float) -> None:
    fetcher.task = asyncio.ensure_future(manager._run(fetcher))
    await asyncio.sleep(seconds)
    await manager.shutdown()


def _disk_full(*args: Any, **kwargs: Any) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_disk_error_appending_one_partition_fails_that_partition_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A's append raises ENOSPC. B, after A in the same answer, is appended all the same,
    the connection stays open, and A backs off (not fetched again within the backoff)
    with one error logged that names it (Kafka's markPartitionFailed on a
    KafkaStorageException). Before, the OSError ended the connection as if the leader
    had gone, and B was never appended, again and again."""
    rm, manager, fetcher, leader = _follow(tmp_path, truncated=True)
    pa, pb = rm.get_partition(*A), rm.get_partition(*B)
    assert pa is not None and pb is not None
    monkeypatch.setattr(pa.log, "append_as_follower", _disk_full)
    asyncio.run(_run_for(manager, fetcher, 0.3))
    assert pb.log.log_end_offset == 10 and pb.high_watermark == 10
    assert pa.log.log_end_offset == 0
    assert leader.closed == 1  # by the shutdown, not before
    assert fetcher.failing is False
    assert len(leader.fetched) > 1 and all(A not in asked for asked in leader.fetched[1:])
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "t-0" in errors[0].getMessage() and "No space left" in errors[0].getMessage()
    assert fetcher.partitions[A].storage_failed


def test_a_partition_whose_disk_failed_is_appended_once_writing_works_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    rm, manager, fetcher, leader = _follow(tmp_path, truncated=True)
    pa = rm.get_partition(*A)
    assert pa is not None
    monkeypatch.setattr(pa.log, "append_as_follower", _disk_full)
    manager.backoff = 0.05
    caplog.set_level(logging.INFO, "dmq.fetcher")

    async def scenario() -> None:
        fetcher.task = asyncio.ensure_future(manager._run(fetcher))
        await asyncio.sleep(0.3)  # fails at every retry
        monkeypatch.undo()  # space freed
        await asyncio.sleep(0.3)
        await manager.shutdown()

    asyncio.run(scenario())
    assert pa.log.log_end_offset == 10
    assert not fetcher.partitions[A].storage_failed
    assert len([r for r in caplog.records if r.levelname == "ERROR"]) == 1  # once, not at every retry
    assert any("works again" in r.getMessage() for r in caplog.records)


def test_a_disk_error_truncating_one_partition_fails_that_partition_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for the truncation before fetching (OffsetForLeaderEpoch): A's truncation
    raises EIO; B is truncated and then fetched over the same connection."""
    rm, manager, fetcher, leader = _follow(tmp_path, truncated=False)
    pa, pb = rm.get_partition(*A), rm.get_partition(*B)
    assert pa is not None and pb is not None
    monkeypatch.setattr(pa.log, "truncate_to", lambda offset: _disk_full())
    asyncio.run(_run_for(manager, fetcher, 0.3))
    assert pb.log.log_end_offset == 10
    assert fetcher.partitions[A].needs_truncation and pa.log.log_end_offset == 0
    assert leader.closed == 1
