"""ListOffsets answers each offset with the leader epoch that wrote it (Kafka's
fetchOffsetForTimestamp): the earliest offset and offsets found by time with the epoch of
their record, the latest offset with the current epoch. It answered the current epoch for
all of them, so a consumer seeking to a time could not detect a truncation (KIP-320)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from kio.index import load_entity_module
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.static.constants import EntityType

from dmq.config import BrokerConfig, LogConfig
from dmq.handlers import list_offsets
from dmq.handlers.context import RequestContext
from dmq.handlers.list_offsets import EARLIEST, LATEST, MAX_TIMESTAMP, found_epoch, lookup
from dmq.record.batch import validate_batches
from dmq.record.records import encode_batch
from dmq.replication.partition import Partition, PartitionError
from dmq.replication.replica_manager import ReplicaManager
from dmq.storage.log import Log
from dmq.storage.log_manager import LogManager


def test_offsets_come_with_the_epoch_that_wrote_them(tmp_path: Path) -> None:
    log = Log(str(tmp_path / "t-0"), "t", 0, LogConfig(BrokerConfig()), clean_shutdown=True)
    partition = Partition("t", 0, "id", log, 1)
    for epoch, ts in ((1, 1000), (1, 2000), (4, 3000), (7, 9000)):
        partition.make_leader(epoch, [1], [1])
        data = bytearray(encode_batch([(None, b"v", [])], timestamp=ts))
        log.append_as_leader(data, validate_batches(data, 10**6), epoch, timestamp=ts)
    log.update_high_watermark(log.log_end_offset)
    partition.high_watermark = log.log_end_offset

    def answer(timestamp: int) -> tuple[int, int, int]:
        offset, ts = lookup(partition, timestamp)
        return offset, ts, found_epoch(partition, timestamp, offset)

    assert answer(EARLIEST) == (0, -1, 1)
    assert answer(2500) == (2, 3000, 4)
    assert answer(1500) == (1, 2000, 1)
    assert answer(MAX_TIMESTAMP) == (3, 9000, 7)
    assert answer(LATEST) == (4, -1, 7)
    assert answer(99_000) == (-1, -1, -1)


def test_a_new_leader_lagging_behind_its_epoch_start_answers_offset_not_available(tmp_path: Path) -> None:
    """A follower with records to offset 10 that knew the high watermark 5 becomes leader:
    until the high watermark reaches 10 (the start of its epoch) the latest offset, and a
    time lookup past what is fetchable or finding nothing at all, are OFFSET_NOT_AVAILABLE
    (retriable), as Kafka's fetchOffsetForTimestamp and ReplicaManager.fetchOffset. Before,
    the latest offset went back from 10 to 5, and a lookup past every record answered -1
    (none), though the old leader may have committed later ones."""
    log = Log(str(tmp_path / "t-0"), "t", 0, LogConfig(BrokerConfig()), clean_shutdown=True)
    partition = Partition("t", 0, "id", log, 1)
    partition.make_leader(0, [1, 2], [1, 2])
    for i in range(10):
        data = bytearray(encode_batch([(None, b"v", [])], timestamp=1000 + i))
        log.append_as_leader(data, validate_batches(data, 10**6), 0, timestamp=1000 + i)
    partition.high_watermark = 5
    partition.make_leader(1, [1, 2], [1, 2])  # the new epoch starts at 10
    assert partition.leader_epoch_start_offset == 10 and partition.high_watermark == 5
    for timestamp in (LATEST, 1007, 99_000):
        with pytest.raises(PartitionError) as refused:
            lookup(partition, timestamp)
        assert refused.value.error == ErrorCode.offset_not_available
    assert lookup(partition, 1002) == (2, 1002)  # below the high watermark: answered
    assert lookup(partition, EARLIEST) == (0, -1)
    partition.high_watermark = 10
    assert lookup(partition, LATEST) == (10, -1)
    assert lookup(partition, 99_000) == (-1, -1)  # caught up: none there


def test_a_partition_asked_twice_is_answered_once_invalid_request(tmp_path: Path) -> None:
    """As Kafka's ListOffsetsRequest.duplicatePartitions: a partition named more than once
    in a request is answered once, INVALID_REQUEST, the others as usual. Before, each
    query was answered."""
    lm = LogManager(str(tmp_path), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, p: "id")
    rm = ReplicaManager(1, lm)
    for index in (0, 1):
        rm.become_leader("t", index, "id", 0, replicas=[1], isr=[1])
        rm.append_to_local_log("t", index, encode_batch([(None, b"v", [])] * 3, timestamp=1), 1)
    services = SimpleNamespace(authorizer=None, replica_manager=rm)
    ctx = RequestContext(2, 7, 1, "c", "127.0.0.1", load_entity_module("list_offsets", 7, EntityType.response))

    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(  # type: ignore[arg-type]
        ListOffsetsTopic(name="t", partitions=tuple(  # type: ignore[arg-type]
            ListOffsetsPartition(partition_index=index, current_leader_epoch=-1, timestamp=ts)  # type: ignore[arg-type]
            for index, ts in ((0, LATEST), (1, LATEST), (0, EARLIEST)))),))
    response = asyncio.run(list_offsets.handle(services, ctx, request))  # type: ignore[arg-type]
    answered = [(p.partition_index, p.error_code, int(p.offset)) for p in response.topics[0].partitions]
    assert answered == [(0, ErrorCode.invalid_request, -1), (1, ErrorCode.none, 3)]
    lm.shutdown()
