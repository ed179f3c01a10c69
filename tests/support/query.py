"""Message query in storage tests: run a query over a Log page by page as the client
does, index logs with the KeyIndexer, and the brute-force answer to compare with
(every batch decoded, aborted transactions found by walking the markers)."""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import TypeVar

from dmq.record.control import read_end_txn_marker
from dmq.record.records import Record, decode_batch
from dmq.storage.key_indexer import KeyIndexer
from dmq.storage.log import Log
from dmq.storage.query import Budget, LogSnapshot, QueryOutcome, QuerySpec, find_by_key, scan

T = TypeVar("T")
Found = tuple[int, bool]  # (offset, aborted)


def finish(steps: Generator[None, None, T]) -> T:
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def index_fully(indexer: KeyIndexer, *logs: Log) -> None:
    while indexer.run(list(logs), time.monotonic() + 60):
        pass


def window(log: Log, read_committed: bool) -> tuple[int, int]:
    return log.log_start_offset, log.last_stable_offset() if read_committed else log.high_watermark


def query_pages(log: Log, key: bytes | None, *, read_committed: bool = True, page: int = 1000,
                budget: int = 1 << 40, start: int | None = None, end: int | None = None,
                start_timestamp: int = -1, end_timestamp: int = -1,
                between: Generator[None, None, None] | None = None) -> tuple[list[Record], list[Found], int]:
    """Every record the query finds, asking again from ``resume_offset`` as the client does:
    (records, (offset, aborted) of each, unindexed bytes). ``between`` runs once
    between any two steps of a query (say retention or the indexer)."""
    lo, hi = window(log, read_committed)
    lo = lo if start is None else max(lo, start)
    hi = hi if end is None else min(hi, end)
    records: list[Record] = []
    found: list[Found] = []
    unindexed = 0
    while lo < hi:
        spec = QuerySpec(lo, hi, key, start_timestamp, end_timestamp, read_committed, page, 1 << 30)
        snap = LogSnapshot(log, lo, hi)
        try:
            steps = find_by_key(snap, spec, Budget(budget)) if key is not None else scan(snap, spec, Budget(budget))
            while True:
                try:
                    next(steps)
                except StopIteration as done:
                    outcome: QueryOutcome = done.value
                    break
                if between is not None:
                    next(between, None)
        finally:
            snap.close()
        records += [f.record for f in outcome.records]
        found += [(f.record.offset, f.aborted) for f in outcome.records]
        unindexed += outcome.unindexed_bytes
        if outcome.resume_offset < 0:
            break
        if key is not None:
            assert outcome.resume_offset < hi, (outcome.resume_offset, hi)
            hi = outcome.resume_offset
        else:
            assert outcome.resume_offset > lo, (outcome.resume_offset, lo)
            lo = outcome.resume_offset
    return records, found, unindexed


def every_record(log: Log) -> tuple[list[Record], set[int], set[int]]:
    """Every data record in the log's files (below the log start offset too), the offsets
    of transactional records whose transaction was aborted, and of those still open."""
    records: list[Record] = []
    pending: dict[int, list[int]] = {}
    aborted: set[int] = set()
    for segment in log.segments:
        for position, header in segment.batches():
            batch = segment.read_batch(position, header)
            if header.is_control:
                marker = read_end_txn_marker(batch)
                ended = pending.pop(header.producer_id, [])
                if marker is not None and marker.is_abort:
                    aborted.update(ended)
                continue
            _, decoded = decode_batch(batch)
            if header.is_transactional:
                pending.setdefault(header.producer_id, []).extend(r.offset for r in decoded)
            records += decoded
    return records, aborted, {o for offsets in pending.values() for o in offsets}


def brute_force(log: Log, key: bytes | None, *, read_committed: bool = True, start_timestamp: int = -1,
                end_timestamp: int = -1) -> list[Found]:
    """What a key query must find (newest first), or a scan (oldest first) when ``key`` is None."""
    lo, hi = window(log, read_committed)
    records, aborted, _ = every_record(log)
    out = [(r.offset, r.offset in aborted) for r in records
           if (key is None or r.key == key) and lo <= r.offset < hi
           and not (read_committed and r.offset in aborted)
           and (start_timestamp < 0 or r.timestamp >= start_timestamp)
           and (end_timestamp < 0 or r.timestamp < end_timestamp)]
    return sorted(out, reverse=key is not None)


def consume_everything(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed",
                       timeout: float = 60.0) -> list[tuple[int, int, int, bytes | None, bytes | None,
                                                            list[tuple[str, bytes | None]]]]:
    """The brute-force answer over the wire: every record a confluent-kafka consumer with
    ``isolation`` reads from the beginning of each partition to its end, as
    (partition, offset, timestamp, key, value, headers)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"brute-{topic}-{time.monotonic_ns()}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True, "log_level": 0})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"consumed {len(out)} records; partitions at their end: {at_end}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            out.append((msg.partition(), msg.offset(), msg.timestamp()[1], msg.key(), msg.value(),
                        list(msg.headers() or [])))
        return out
    finally:
        consumer.close()
