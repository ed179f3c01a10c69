"""ReplicaManager: the partitions this broker hosts, appends and fetches across them.

Produce goes through ``append_records``; Fetch through ``fetch_messages``,
which long-polls in the fetch purgatory until ``min_bytes`` are visible or
``max_wait`` passes. Partitions become leaders through ``make_leader`` when the
metadata says so. Event-loop thread only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from dmq.record.batch import InvalidRecordError, validate_batches
from dmq.replication.partition import Partition, PartitionError, ReadResult
from dmq.replication.purgatory import DelayedOperationPurgatory
from dmq.storage.log_manager import LogManager

log = logging.getLogger("dmq.replication")

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


@dataclass(slots=True)
class FetchRequestPartition:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager: LogManager) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch")

    def make_leader(self, topic: str, index: int, topic_id: str, leader_epoch: int,
                    replicas: list[int], isr: list[int]) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is None:
            lg = self.log_manager.get_or_create(topic, index, topic_id)
            partition = Partition(topic, index, topic_id, lg, self.broker_id, leader_epoch,
                                  replicas, isr)
            self.partitions[(topic, index)] = partition
        else:
            partition.leader_epoch = leader_epoch
            partition.replicas = replicas
            partition.isr = isr
        return partition

    def remove_partition(self, topic: str, index: int, delete: bool) -> None:
        self.partitions.pop((topic, index), None)
        if delete:
            self.log_manager.delete(topic, index)
        self.fetch_purgatory.check_and_complete((topic, index))

    def get_partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    # ------------------------------------------------------------------ produce

    def append_records(self, topic: str, index: int, records: bytes | None,
                       required_acks: int) -> ProduceResult:
        partition = self.partitions.get((topic, index))
        if partition is None:
            return ProduceResult(ErrorCode.unknown_topic_or_partition,
                                 error_message="This server does not host this topic-partition.")
        if records is None:
            return ProduceResult(ErrorCode.invalid_record, error_message="null record set")
        buf = bytearray(records)
        try:
            batches = validate_batches(buf, partition.log.config.max_message_bytes)
            result = partition.append_records_to_leader(buf, batches, required_acks)
        except InvalidRecordError as e:
            log.info("rejected produce to %s-%d: %s", topic, index, e)
            return ProduceResult(ErrorCode[e.error], error_message=str(e),
                                 log_start_offset=partition.log.log_start_offset)
        except PartitionError as e:
            return ProduceResult(e.error, error_message=str(e))
        except OSError as e:
            log.error("write to %s-%d failed: %s", topic, index, e)
            return ProduceResult(ErrorCode.kafka_storage_error, error_message=str(e))
        if not result.duplicate:
            self.fetch_purgatory.check_and_complete((topic, index))
        return ProduceResult(ErrorCode.none, result.first_offset, result.log_append_time,
                             result.log_start_offset)

    # -------------------------------------------------------------------- fetch

    def read_from_local_log(self, requests: list[FetchRequestPartition], max_bytes: int
                            ) -> list[ReadResult]:
        results: list[ReadResult] = []
        remaining = max_bytes
        any_data = False
        for req in requests:
            partition = self.partitions.get((req.topic, req.partition))
            if partition is None:
                results.append(ReadResult(ErrorCode.unknown_topic_or_partition, -1, -1, -1, None))
                continue
            limit = max(0, min(req.max_bytes, remaining))
            res = partition.read(req.fetch_offset, limit, min_one_batch=not any_data)
            if res.data is not None and res.data.length:
                any_data = True
                remaining -= res.data.length
            results.append(res)
        return results

    async def fetch_messages(self, requests: list[FetchRequestPartition], max_wait_ms: int,
                             min_bytes: int, max_bytes: int) -> list[ReadResult]:
        results = self.read_from_local_log(requests, max_bytes)
        available = sum(r.data.length for r in results if r.data is not None)
        has_error = any(r.error != ErrorCode.none for r in results)
        if max_wait_ms <= 0 or not requests or available >= min_bytes or has_error:
            return results
        keys = [(r.topic, r.partition) for r in requests]
        start_bytes = {
            key: p.visible_bytes
            for key in keys
            if (p := self.partitions.get(key)) is not None
        }

        def enough() -> bool:
            grown = 0
            for key, before in start_bytes.items():
                p = self.partitions.get(key)
                if p is None:
                    return True  # deleted or moved: answer now
                grown += p.visible_bytes - before
            return available + grown >= min_bytes

        await self.fetch_purgatory.wait_until(keys, max_wait_ms / 1000.0, enough)
        return self.read_from_local_log(requests, max_bytes)
