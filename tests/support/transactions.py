"""Helpers for tests of transactions: batches as producers and coordinators write them, a
read_committed consumer that reads a Log as Kafka's Java consumer does, and a transactional
producer's requests over the wire."""

from __future__ import annotations

import heapq
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.index import load_entity_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from dmq.client.wire import WireClient
from dmq.config import BrokerConfig, LogConfig
from dmq.protocol.codec import make, request_class
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


_COORDINATOR_NOT_READY = (ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                          ErrorCode.not_coordinator)


def _request(c: WireClient, api_key: int, version: int, **values: Any) -> Any:
    return c.request(make(request_class(api_key, version), **values))


def transactional_batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    return encode_batch([(None, value, [])], timestamp=int(time.time() * 1000), producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, attributes_extra=TRANSACTIONAL_MASK)


def produce_records(c: WireClient, txn_id: str | None, topic: str, records: bytes) -> ErrorCode:
    """``records`` as partition 0's record set of a Produce v9, acks=all: its error."""
    pmod = load_entity_module("produce", 9, EntityType.request)
    r = _request(c, 0, 9, transactional_id=txn_id, acks=-1, timeout=timedelta(seconds=10), topic_data=(make(
        pmod.TopicProduceData, name=topic, partition_data=(make(pmod.PartitionProduceData, index=0,
                                                                records=records),)),))
    return ErrorCode(r.responses[0].partition_responses[0].error_code)


def produce_transactional(c: WireClient, txn_id: str | None, topic: str, pid: int, epoch: int,
                          seq: int, value: bytes = b"late") -> ErrorCode:
    """One transactional record to partition 0, acks=all, as a client's Produce v9."""
    return produce_records(c, txn_id, topic, transactional_batch(pid, epoch, seq, value))


def init_transactional_id(c: WireClient, txn_id: str) -> tuple[int, int]:
    """FindCoordinator (which creates __transaction_state on a fresh broker) until the
    broker answers for ``txn_id``, then InitProducerId: (producer id, epoch)."""
    deadline = time.monotonic() + 30
    while True:
        found = _request(c, 10, 4, key_type=1, coordinator_keys=(txn_id,))
        if found.coordinators[0].error_code == ErrorCode.none or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    while True:  # the coordinator may still be loading the partition
        init = _request(c, 22, 4, transactional_id=txn_id, transaction_timeout=timedelta(seconds=60),
                        producer_id=-1, producer_epoch=-1)
        if init.error_code not in _COORDINATOR_NOT_READY or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert init.error_code == ErrorCode.none, init
    return init.producer_id, init.producer_epoch


def open_transaction(coordinator: WireClient, leader: WireClient, txn_id: str, topic: str,
                     value: bytes = b"first") -> tuple[int, int]:
    """A transaction with one record (sequence 0) on partition 0 of ``topic``, left open:
    (producer id, epoch)."""
    pid, epoch = init_transactional_id(coordinator, txn_id)
    amod = load_entity_module("add_partitions_to_txn", 3, EntityType.request)
    added = _request(coordinator, 24, 3, v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
                     v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
                         make(amod.AddPartitionsToTxnTopic, name=topic, partitions=(0,)),))
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert produce_transactional(leader, txn_id, topic, pid, epoch, 0, value) == ErrorCode.none
    return pid, epoch


def end_transaction(coordinator: WireClient, txn_id: str, pid: int, epoch: int, commit: bool) -> None:
    end = _request(coordinator, 26, 3, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                   committed=commit)
    assert end.error_code == ErrorCode.none


def stable_and_end(c: WireClient, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) of partition 0, as ListOffsets answers them."""
    lmod = load_entity_module("list_offsets", 4, EntityType.request)

    def latest(isolation: int) -> int:
        r = _request(c, 2, 4, replica_id=-1, isolation_level=isolation, topics=(make(
            lmod.ListOffsetsTopic, name=topic, partitions=(make(
                lmod.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
        return int(r.topics[0].partitions[0].offset)
    return latest(1), latest(0)


def abort_then_send_late_batch(coordinator: WireClient, leader: WireClient, txn_id: str,
                               topic: str) -> tuple[ErrorCode, tuple[int, int]]:
    """A transaction writes one record to partition 0 of an empty ``topic`` and is aborted
    (its ABORT marker written); then a batch the client had given up on arrives at the
    leader, with the next sequence. The late batch's error, and (producer id, epoch)."""
    pid, epoch = open_transaction(coordinator, leader, txn_id, topic, b"aborted")
    end_transaction(coordinator, txn_id, pid, epoch, commit=False)
    deadline = time.monotonic() + 30
    while stable_and_end(leader, topic) != (2, 2) and time.monotonic() < deadline:
        time.sleep(0.05)  # the ABORT marker is written just after EndTxn's answer
    assert stable_and_end(leader, topic) == (2, 2)
    # The coordinator writes the transaction's completion after the markers; until then it
    # answers the leader's verification CONCURRENT_TRANSACTIONS, and the produce gets the
    # retriable NOT_ENOUGH_REPLICAS, which a client retries (as here).
    deadline = time.monotonic() + 10
    while (late := produce_transactional(leader, txn_id, topic, pid, epoch, 1)) == ErrorCode.not_enough_replicas \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    return late, (pid, epoch)
