"""ListOffsets answers each offset with the leader epoch that wrote it (Kafka's
fetchOffsetForTimestamp): the earliest offset and offsets found by time with the epoch of
their record, the latest offset with the current epoch. It answered the current epoch for
all of them, so a consumer seeking to a time could not detect a truncation (KIP-320)."""

from __future__ import annotations

from pathlib import Path

from dmq.config import BrokerConfig, LogConfig
from dmq.handlers.list_offsets import EARLIEST, LATEST, MAX_TIMESTAMP, found_epoch, lookup
from dmq.record.batch import validate_batches
from dmq.record.records import encode_batch
from dmq.replication.partition import Partition
from dmq.storage.log import Log


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
