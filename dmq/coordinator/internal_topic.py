"""Internal topics (``__consumer_offsets``, ``__transaction_state``) as coordinator logs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

from kio.schema.errors import ErrorCode

from dmq.cluster.admin_manager import AdminManager
from dmq.cluster.metadata import MetadataError
from dmq.coordinator.runtime import EndMarker, LogEntry
from dmq.record.batch import InvalidRecordError, iter_headers
from dmq.record.control import parse_end_txn_marker
from dmq.record.records import decode_batch, encode_batch
from dmq.replication.replica_manager import ReplicaManager
from dmq.storage.log import OffsetOutOfRangeError
from dmq.storage.producer_state import SKIP_VERIFICATION, AppendOrigin, VerificationGuard

log = logging.getLogger("dmq.coordinator")

TRANSACTIONAL = 0x10  # the transactional bit of a batch's attributes
LOAD_BUFFER_BYTES = 1 << 20  # read at a time when loading a partition (Kafka's offsets.load.buffer.size is 5 MiB)


class InternalTopic:
    """An internal topic as a coordinator runtime's ``PartitionWriter``.

    Created on first use, as Kafka does, compacted; records are appended through
    the ReplicaManager like any produce (acks=-1), committed once the partition's
    high watermark passes them, and read back batch by batch when a partition is
    loaded. Event-loop thread only.
    """

    def __init__(self, name: str, replica_manager: ReplicaManager, admin_manager: AdminManager,
                 num_partitions: int, segment_bytes: int, replication_factor: int = 1,
                 commit_timeout_ms: int = 5000, replication_factor_config: str = "",
                 min_insync_replicas: int | None = None) -> None:
        self.name = name
        self.replication_factor_config = replication_factor_config
        self.min_insync_replicas = min_insync_replicas
        self.replica_manager = replica_manager
        self.admin_manager = admin_manager
        self.num_partitions = num_partitions
        self.segment_bytes = segment_bytes
        self.replication_factor = replication_factor
        self.commit_timeout_ms = commit_timeout_ms
        self._creating: asyncio.Task[bool] | None = None  # this broker creating the topic

    async def ensure_exists(self) -> bool:
        """Create the topic if it is missing; whether it exists now.

        Callers that come while this broker is creating it wait for that creation
        (bounded by the commit timeout): the topic is in metadata before its logs exist
        and its shards are loaded (on a single broker the creation ends only then), and
        a caller answering FindCoordinator meanwhile would send clients to a shard that
        is not there yet."""
        creating = self._creating
        if creating is not None:
            try:
                return await asyncio.wait_for(asyncio.shield(creating), self.commit_timeout_ms / 1000)
            except TimeoutError:
                return self.admin_manager.store.topic(self.name) is not None
        if self.admin_manager.store.topic(self.name) is not None:
            return True
        task = self._creating = asyncio.get_running_loop().create_task(self._create())
        task.add_done_callback(self._created)
        return await asyncio.shield(task)

    def _created(self, task: asyncio.Task[bool]) -> None:
        self._creating = None
        if not task.cancelled() and task.exception() is not None:
            log.error("cannot create %s", self.name, exc_info=task.exception())

    async def _create(self) -> bool:
        live = len(self.admin_manager.store.brokers()) or 1
        rf = min(self.replication_factor, live)
        if rf < self.replication_factor and live > 1:
            log.warning("creating %s with replication factor %d: only %d brokers are live "
                        "(%s=%d)", self.name, rf, live, self.replication_factor_config,
                        self.replication_factor)
        try:
            configs: dict[str, str | None] = {"cleanup.policy": "compact",
                                              "segment.bytes": str(self.segment_bytes),
                                              "compression.type": "producer"}
            if self.min_insync_replicas is not None:
                configs["min.insync.replicas"] = str(min(self.min_insync_replicas, rf))
            await self.admin_manager.create_topic(self.name, self.num_partitions, rf, configs)
            log.info("created %s with %d partitions", self.name, self.num_partitions)
            return True
        except MetadataError as e:
            if e.error == "topic_already_exists":
                return True  # another broker created it first
            log.error("cannot create %s: %s", self.name, e)
            return False

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]],
               producer: tuple[int, int] | None = None,
               verification: VerificationGuard | None = SKIP_VERIFICATION) -> tuple[ErrorCode, int]:
        """The runtime's append: one batch, acks=all (transactional when ``producer`` is
        given, as Kafka's coordinators write a transaction's offsets); ``(error, last offset)``."""
        if self.admin_manager.store.topic(self.name) is None:
            # Created (async) by FindCoordinator or before a coordinator's first write.
            return ErrorCode.coordinator_not_available, -1
        now = int(time.time() * 1000)
        if producer is None:
            batch = encode_batch([(k, v, []) for k, v in records], timestamp=now)
            result = self.replica_manager.append_to_local_log(self.name, partition, batch, -1)
        else:
            batch = encode_batch([(k, v, []) for k, v in records], timestamp=now, producer_id=producer[0],
                                 producer_epoch=producer[1], attributes_extra=TRANSACTIONAL)
            result = self.replica_manager.append_to_local_log(self.name, partition, batch, -1,
                                                              AppendOrigin.COORDINATOR,
                                                              verification=verification)
        return result.error, result.last_offset

    def append_marker(self, partition: int, marker: EndMarker) -> tuple[ErrorCode, int]:
        """A transaction's COMMIT or ABORT marker (a control batch), acks=all."""
        if self.admin_manager.store.topic(self.name) is None:
            return ErrorCode.coordinator_not_available, -1
        result = self.replica_manager.append_end_txn_marker(
            self.name, partition, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
            marker.commit)
        return result.error, result.last_offset

    async def wait_committed(self, partition: int, last_offset: int) -> ErrorCode:
        """Until every in-sync replica has ``last_offset`` (the commit timeout at most)."""
        error, _ = await self.replica_manager.wait_for_replication(
            self.name, partition, last_offset, self.commit_timeout_ms / 1000)
        return error

    def leads(self, partition: int) -> bool:
        meta = self.admin_manager.store.topic(self.name)
        state = meta.partitions.get(partition) if meta is not None else None
        return state is not None and state.leader == self.replica_manager.broker_id

    def read(self, partition: int) -> Iterator[LogEntry]:
        """The partition's records and markers, read ``LOAD_BUFFER_BYTES`` at a time from
        the log's segments as they are when each chunk is read (Kafka's loader reads so
        too): the runtime replays a large partition in slices, yielding to the event loop
        between them, and the cleaner may replace segments meanwhile (the reader then goes
        on from its next offset in the cleaned ones)."""
        p = self.replica_manager.get_partition(self.name, partition)
        if p is None:
            return
        lg = p.log
        offset = lg.log_start_offset
        while offset < lg.log_end_offset:
            try:
                chunk = lg.read(offset, LOAD_BUFFER_BYTES, lg.log_end_offset)
            except OffsetOutOfRangeError:
                return  # truncated meanwhile: leadership moved, the load is being dropped
            data = chunk.read() if chunk is not None else b""
            headers = iter_headers(data)
            if not headers:
                return
            for pos, header in headers:
                _, records = decode_batch(data[pos : pos + header.size])
                producer_id = header.producer_id if header.is_transactional else -1
                for r in records:
                    if r.offset < max(offset, lg.log_start_offset):
                        continue
                    if header.is_control:
                        marker = _end_marker(header.producer_id, header.producer_epoch, r.key, r.value)
                        if marker is not None:
                            yield LogEntry(r.offset, None, None, header.producer_id, marker)
                    elif r.key is not None:
                        yield LogEntry(r.offset, r.key, r.value, producer_id)
            offset = max(offset, headers[-1][1].last_offset + 1)


def _end_marker(producer_id: int, epoch: int, key: bytes | None, value: bytes | None) -> EndMarker | None:
    """A COMMIT or ABORT control record; None for any other (or unreadable) control record."""
    try:
        marker = parse_end_txn_marker(key, value)
    except InvalidRecordError:
        return None
    return EndMarker(producer_id, epoch, marker.is_commit, marker.coordinator_epoch)
