"""Helpers for storage tests of transactions: batches as producers and coordinators write them,
and a read_committed consumer that reads a Log as Kafka's Java consumer does."""

from __future__ import annotations

import heapq
from pathlib import Path

from dmq.config import BrokerConfig, LogConfig
from dmq.record.batch import TRANSACTIONAL_MASK, parse_header, validate_batches
from dmq.record.control import (
    ControlRecordType,
    EndTxnMarker,
    build_end_txn_marker_batch,
    read_end_txn_marker,
)
from dmq.record.records import decode_batch, encode_batch
from dmq.storage.log import AppendResult, Log
from dmq.storage.producer_state import AppendOrigin


def make_log(path: Path | str, clean_shutdown: bool = True, recovery_point: int = 0,
             **overrides: str) -> Log:
    return Log(str(path), "t", 0, LogConfig(BrokerConfig(), overrides), clean_shutdown=clean_shutdown,
               recovery_point=recovery_point)


def data_batch(pid: int, epoch: int, seq: int, values: list[bytes], *, transactional: bool = True,
               keys: list[bytes] | None = None, ts: int = 1000, codec: int = 0) -> bytearray:
    keys = keys if keys is not None else [b"k%d" % i for i in range(len(values))]
    return bytearray(encode_batch(
        [(k, v, []) for k, v in zip(keys, values, strict=True)], timestamp=ts, codec=codec,
        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
        attributes_extra=TRANSACTIONAL_MASK if transactional else 0))


def marker_batch(pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0, ts: int = 1000) -> bytearray:
    marker = EndTxnMarker(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT, coordinator_epoch)
    return bytearray(build_end_txn_marker_batch(marker, producer_id=pid, producer_epoch=epoch, timestamp=ts))


def append(log: Log, data: bytearray, origin: AppendOrigin = AppendOrigin.CLIENT, ts: int = 1000,
           leader_epoch: int = 0) -> AppendResult:
    return log.append_as_leader(data, validate_batches(data, 10**7), leader_epoch, timestamp=ts, origin=origin)


def send(log: Log, pid: int, epoch: int, seq: int, values: list[bytes], **kw: object) -> int:
    """Append a producer's batch; returns its first offset."""
    return append(log, data_batch(pid, epoch, seq, values, **kw)).first_offset  # type: ignore[arg-type]


def end_txn(log: Log, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0, ts: int = 1000) -> int:
    """Write a marker as WriteTxnMarkers does; returns its offset."""
    return log.append_end_txn_marker(pid, epoch, coordinator_epoch, commit, 0, timestamp=ts).first_offset


def raw_batches(log: Log, start: int = 0) -> list[bytes]:
    return [segment.read_batch(pos, header) for segment, pos, header in log.batches_from(start)]


def read_committed(log: Log, start: int | None = None, max_bytes: int = 10**9) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record a read_committed consumer sees from ``start`` to the LSO.

    Fetches of ``max_bytes`` each, every fetch with the aborted transactions
    ``Log.aborted_transactions_for_read`` returns for it, processed as Kafka's
    CompletedFetch does (its aborted-transaction state lives per fetch).
    """
    offset = log.log_start_offset if start is None else start
    lso = log.last_stable_offset()
    out: list[tuple[int, bytes | None]] = []
    while offset < lso:
        data = log.read(offset, max_bytes, lso)
        if data is None:
            break
        aborted = [(first, pid) for pid, first in log.aborted_transactions_for_read(offset, data, lso)]
        heapq.heapify(aborted)
        aborted_pids: set[int] = set()
        buf = data.read()
        pos = 0
        next_offset = offset
        while pos + 61 <= len(buf):
            header = parse_header(buf, pos)
            if pos + header.size > len(buf):
                break  # a partial batch at the end of the fetch
            batch = buf[pos: pos + header.size]
            pos += header.size
            next_offset = header.last_offset + 1
            if header.has_producer_id:
                while aborted and aborted[0][0] <= header.last_offset:
                    aborted_pids.add(heapq.heappop(aborted)[1])
                if header.is_control:
                    marker = read_end_txn_marker(batch)
                    if marker is not None and marker.is_abort:
                        aborted_pids.discard(header.producer_id)
                    continue
                if header.is_transactional and header.producer_id in aborted_pids:
                    continue
            if header.is_control:
                continue
            _, records = decode_batch(batch)
            out += [(r.offset, r.value) for r in records if offset <= r.offset < lso]
        if next_offset <= offset:
            break
        offset = next_offset
    return out
