"""ReplicaManager: the partitions this broker hosts, as leader or follower.

Produce goes through ``append_records``, which appends every partition's
batches to the leader's log and decides itself whether the answer waits
(Kafka's ``delayedProduceRequestRequired``): with ``acks=all`` it waits in the
produce purgatory until the high watermark passes each batch, or the timeout.
Internal writers (the group coordinator) use ``append_to_local_log`` and
``wait_for_replication``. Fetch goes through ``fetch_messages``, which
long-polls in the fetch purgatory; a follower's fetch (``replica_id >= 0``)
also records the follower's log end offset, which moves the high watermark
and may grow the ISR, and its log start offset. DeleteRecords goes through
``delete_records``, which waits in the delete-records purgatory until the log
starts of the leader and its registered followers all reach the offset
(Kafka's DelayedDeleteRecords).

ISR changes (KIP-497 over ZooKeeper): a Partition proposes one change at a
time; ``isr_writer`` writes it with compare-and-set against the state version
the leader holds and returns the new version, or None when the state moved on
(the store's watch brings the new one). Until confirmed, the change has no
effect but to hold the high watermark to the maximal ISR. A follower outside
the ISR that caught up within ``replica_lag_time_max_ms`` and is eligible
holds it too, so it can rejoin under a steady produce stream (KAFKA-4485:
``Partition.maybe_increment_high_watermark``). Only replicas
``replica_eligible`` accepts (registered, not shutting down: KIP-841) join.
A leader that would shrink the ISR below ``min.insync.replicas`` while its
followers stay registered asks ``resigner`` to have the controller replace it
instead (``Partition.lagging_followers``). With the embedded store the ISR is this broker alone and never changes. The
broker's metadata listener calls ``become_leader``/``become_follower``/
``remove_partition``. Event-loop thread only.

High watermarks are checkpointed (``high_watermarks_snapshot``, every
``replica.high.watermark.checkpoint.interval.ms``, written on a worker thread;
``checkpoint_high_watermarks`` at shutdown) to
``replication-offset-checkpoint`` in the data directory, Kafka's text format.
A replicated partition opened after a restart starts from its checkpointed
high watermark, clamped into [log start, log end]: those records were
committed when it was written, so consumers see them at once instead of after
the first fetch exchange with the other replicas.

Transaction verification (KIP-890, Kafka's handleProduceAppend): with a
``txn_verifier`` (``transaction.partition.verification.enable``), a Produce
whose first batch on a partition led here would start its producer's
transaction first asks the transaction coordinator, through the verifier,
whether the partition is in that producer's ongoing transaction, and appends
with the guard its Log gave (``Log.maybe_start_transaction_verification``). A
partition the coordinator does not confirm is not appended: INVALID_TXN_STATE,
INVALID_PRODUCER_EPOCH, or NOT_ENOUGH_REPLICAS for what the producer should
retry (the coordinator moving, loading or out of reach). A partition not led
here when the verification starts is NOT_LEADER_OR_FOLLOWER at once, and a
request with more than one transactional producer INVALID_PRODUCER_ID_MAPPING.
A request without a transactional id is not verified: the Log refuses a batch
of it that would open a transaction (the Produce handler refuses such records
before). So a batch that arrives after its transaction was aborted (a retry
the client gave up on) cannot open a transaction no coordinator will end.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from kio.schema.errors import ErrorCode

from dmq.record.batch import (
    CONTROL_MASK,
    HEADER_SIZE,
    InvalidRecordError,
    parse_header,
    recompressed,
    validate_batches,
)
from dmq.replication.partition import Partition, PartitionError, ReadResult
from dmq.replication.purgatory import DelayedOperationPurgatory
from dmq.replication.stats import TopicStats
from dmq.storage.log_manager import CheckpointFile, LogManager
from dmq.storage.producer_state import (
    SKIP_VERIFICATION,
    AppendOrigin,
    ProducerEntry,
    VerificationGuard,
)

log = logging.getLogger("dmq.replication")

TopicPartition = tuple[str, int]
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
# (partition, leader epoch, new ISR, expected state version) -> the new version, or None
# when the store's state moved on; raises when the store cannot be reached.
IsrWriter = Callable[[Partition, int, list[int], int], Awaitable[int | None]]
# (partition, leader epoch) -> asks the controller to elect another ISR member
Resigner = Callable[[Partition, int], Awaitable[None]]
ISR_RETRY_MS = 500  # after a failed ISR write, the next attempt waits this long


class TxnVerifier(Protocol):
    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Whether ``partitions`` are in the producer's ongoing transaction, asked of its
        coordinator: the partitions that are not, each with its error (INVALID_TXN_STATE:
        not in it; INVALID_PRODUCER_EPOCH: fenced; else why it could not be asked)."""
        ...


# Verification errors a producer retries, answered as NOT_ENOUGH_REPLICAS (Kafka: older
# clients may not retry them correctly, and it does not make them refresh metadata).
_VERIFICATION_RETRIABLE = frozenset({
    ErrorCode.concurrent_transactions, ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator})


def _produce_refusal(error: ErrorCode) -> ProduceResult:
    if error == ErrorCode.invalid_txn_state:
        return ProduceResult(error, error_message="Partition was not added to the transaction")
    if error in _VERIFICATION_RETRIABLE:
        return ProduceResult(ErrorCode.not_enough_replicas, error_message=(
            f"Unable to verify the partition has been added to the transaction. Underlying error: {error.name}"))
    return ProduceResult(error, error_message=f"Transaction verification failed: {error.name}")


def _first_transactional_batch(records: bytes | None) -> tuple[int, int, int] | None:
    """(producer id, epoch, base sequence) when a partition's first batch is a
    transactional data batch (only such a request's first batch is verified, as Kafka)."""
    if records is None or len(records) < HEADER_SIZE:
        return None
    header = parse_header(records)
    if header.magic != 2 or not header.is_transactional or header.attributes & CONTROL_MASK \
            or header.producer_id < 0:
        return None
    return header.producer_id, header.producer_epoch, header.base_sequence


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    last_offset: int = -1
    record_errors: tuple[tuple[int, str], ...] = ()  # (record index, message): Produce v8+


@dataclass(slots=True)
class FetchRequestPartition:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1  # a follower's (Fetch v5+): DeleteRecords waits on it


@dataclass(slots=True)
class _Watched:
    """A waiting fetch's view of one partition: the Partition it started on, the bytes
    counter (visible or appended) as last seen, and its request."""

    partition: Partition
    last: int
    request: FetchRequestPartition


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager: LogManager,
                 isr_writer: IsrWriter | None = None,
                 partition_exists: Callable[[str, int], bool] = lambda topic, index: False,
                 replica_eligible: Callable[[int], bool] = lambda broker_id: True,
                 resigner: Resigner | None = None, replica_lag_time_max_ms: int = 30_000,
                 replica_alive: Callable[[int], bool] = lambda broker_id: True) -> None:
        self.broker_id = broker_id
        # A registered broker: its log start offset holds DeleteRecords (Partition.low_watermark)
        self.replica_alive = replica_alive
        self.partition_exists = partition_exists  # in the cluster's metadata, hosted here or not
        self.replica_eligible = replica_eligible  # may join an ISR: registered, not shutting down
        # replica.lag.time.max.ms: how recently a follower outside the ISR must have caught
        # up to hold the high watermark (Partition.maybe_increment_high_watermark)
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.log_manager = log_manager
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch")
        self.produce_purgatory = DelayedOperationPurgatory("Produce")
        self.delete_records_purgatory = DelayedOperationPurgatory("DeleteRecords")
        self.isr_writer = isr_writer
        self.resigner = resigner
        self.txn_verifier: TxnVerifier | None = None  # set by the broker (see the module docstring)
        self._isr_tasks: set[asyncio.Task[None]] = set()
        self._hw_file = CheckpointFile(os.path.join(log_manager.data_dir, HIGH_WATERMARK_FILE))
        # A deleted partition leaves this file too before its next log is created (the
        # LogManager's invariant). Built after load_logs: the entries of logs it did not keep
        # (topics deleted, replicas moved away while this broker was down) go now, as they
        # went from its own files.
        log_manager.add_checkpoint(self._hw_file, self._high_watermarks)
        kept = {tp: hw for tp, hw in self._hw_file.written.items() if tp in log_manager.logs}
        if kept != self._hw_file.written:
            self._hw_file.write(self._hw_file.take(kept))
        # Metrics (dmq.metrics reads them at scrape time): per-topic counters shared by the
        # topic's partitions, and the confirmed ISR changes of partitions led here.
        self.topic_stats: dict[str, TopicStats] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0

    def high_watermarks_snapshot(self) -> Callable[[], None] | None:
        """Every hosted partition's high watermark now, as a call that writes them to the
        checkpoint file (replaced atomically) on any thread; None when the file says so
        already. The broker runs that call on a worker thread: an fsync under load takes
        milliseconds to tens of milliseconds, which the event loop must not wait for."""
        snapshot = self._hw_file.snapshot(self._high_watermarks())
        return None if snapshot is None else partial(self._hw_file.write, snapshot)

    def _high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: p.high_watermark for tp, p in self.partitions.items()}

    def checkpoint_high_watermarks(self) -> None:
        """Write every hosted partition's high watermark now, on this thread (at shutdown)."""
        write = self.high_watermarks_snapshot()
        if write is not None:
            write()

    # ------------------------------------------------------------------- roles

    def _get_or_create(self, topic: str, index: int, topic_id: str, replicas: list[int]) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is None:
            lg = self.log_manager.get_or_create(topic, index, topic_id)
            partition = Partition(topic, index, topic_id, lg, self.broker_id,
                                  replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                                  replica_eligible=self.replica_eligible)
            stats = self.topic_stats.get(topic)
            if stats is None:
                stats = self.topic_stats[topic] = TopicStats()
            partition.stats = stats
            if len(replicas) > 1:
                # Only what the checkpoint says was committed; without one, nothing yet:
                # the leader's fetch responses (or the followers' fetches) move it up.
                checkpointed = self._hw_file.written.get((topic, index), lg.log_start_offset)
                partition.high_watermark = min(max(checkpointed, lg.log_start_offset), lg.log_end_offset)
            self.partitions[(topic, index)] = partition
        return partition

    def become_leader(self, topic: str, index: int, topic_id: str, leader_epoch: int,
                      replicas: list[int], isr: list[int], version: int = -1) -> Partition:
        partition = self._get_or_create(topic, index, topic_id, replicas)
        before = list(partition.isr) if partition.is_leader and partition.leader_epoch == leader_epoch else None
        if partition.make_leader(leader_epoch, replicas, isr, version):
            log.info("%s-%d: leader in epoch %d (replicas %s, isr %s, min.insync.replicas %d, "
                     "log end %d)", topic, index, leader_epoch, replicas, isr,
                     partition.min_insync_replicas, partition.log.log_end_offset)
        elif before is not None:
            self._count_isr_change(before, partition.isr)  # written by the controller
        self._wake((topic, index))
        return partition

    def become_follower(self, topic: str, index: int, topic_id: str, leader_id: int,
                        leader_epoch: int, replicas: list[int], isr: list[int],
                        version: int = -1) -> tuple[Partition, bool]:
        partition = self._get_or_create(topic, index, topic_id, replicas)
        changed = partition.make_follower(leader_id, leader_epoch, replicas, isr, version)
        if changed:
            log.info("%s-%d: follower of %d in epoch %d", topic, index, leader_id, leader_epoch)
        self._wake((topic, index))
        return partition, changed

    def remove_partition(self, topic: str, index: int, delete: bool) -> None:
        # Before the log is deleted: the high-watermark snapshot the log manager takes for
        # the deletion must already leave the partition out.
        self.partitions.pop((topic, index), None)
        if delete:
            self.log_manager.delete(topic, index)
            if not any(t == topic for t, _ in self.partitions):
                self.topic_stats.pop(topic, None)
        self._wake((topic, index))

    def get_partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def _not_hosted(self, topic: str, index: int) -> tuple[ErrorCode, str]:
        # As Kafka: a partition the cluster has, elsewhere, is NOT_LEADER_OR_FOLLOWER, so
        # clients refresh their metadata and go to its leader.
        if self.partition_exists(topic, index):
            return (ErrorCode.not_leader_or_follower,
                    f"broker {self.broker_id} is not a replica of {topic}-{index}")
        return ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."

    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = -1) -> Partition:
        """The partition, led here. A client's ``current_leader_epoch`` (KIP-320) is checked
        first, as Kafka's Partition.getLocalLog: a broker that has not yet applied a newer
        epoch answers UNKNOWN_LEADER_EPOCH (the client waits for the broker to catch up)
        rather than NOT_LEADER_OR_FOLLOWER (it would refresh metadata it already has), and
        an older one FENCED_LEADER_EPOCH."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            raise PartitionError(*self._not_hosted(topic, index))
        partition.check_leader_epoch(current_leader_epoch)
        if not partition.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"broker {self.broker_id} is not the leader of {topic}-{index}")
        return partition

    def active_producers(self, topic: str, index: int) -> list[ProducerEntry]:
        """The producers of a partition hosted here, as leader or follower (Kafka answers
        DescribeProducers from any replica's log), by producer id; copies."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            raise PartitionError(*self._not_hosted(topic, index))
        producers = partition.log.producer_state.producers
        return [producers[pid].copy() for pid in sorted(producers)]

    def wake(self, key: TopicPartition) -> None:
        """Complete the delayed fetches and produces an append to ``key`` satisfies (for
        appends made outside ``append_records``, as the delayed-delivery timer's)."""
        self._wake(key)

    def _wake(self, key: TopicPartition) -> None:
        self.fetch_purgatory.check_and_complete(key)
        self.produce_purgatory.check_and_complete(key)
        self.delete_records_purgatory.check_and_complete(key)

    # ------------------------------------------------------------------ produce

    async def append_records(self, entries: dict[TopicPartition, bytes | None], required_acks: int,
                             timeout_s: float, appended: Callable[[], None] | None = None,
                             transactional_id: str | None = None) -> dict[TopicPartition, ProduceResult]:
        """Append each partition's batches as leader and answer as ``required_acks`` asks:
        at once for 0 and 1; for -1 (all) once the high watermark has passed every
        appended batch (or the timeout, or a lost leadership, fails that partition).
        Transactional batches are verified first (see the module docstring).
        ``appended`` is called once every batch is appended, before the wait."""
        if self.txn_verifier is None:
            results = {tp: self.append_to_local_log(tp[0], tp[1], records, required_acks, wake=False)
                       for tp, records in entries.items()}
        elif transactional_id is None:
            # Nothing to verify with (as Kafka): a batch that would open a transaction is
            # refused by the Log; idempotent and plain producers pay nothing more.
            results = {tp: self.append_to_local_log(tp[0], tp[1], records, required_acks, wake=False,
                                                    verification=None)
                       for tp, records in entries.items()}
        else:
            guards, refused, wanted = self._start_verification(entries, transactional_id)
            if wanted is not None:  # only then does the request wait for the coordinator
                errors = await self.txn_verifier.verify(*wanted)
                refused.update((tp, _produce_refusal(error)) for tp, error in errors.items())
            results = {tp: refused[tp] if tp in refused else
                       self.append_to_local_log(tp[0], tp[1], records, required_acks, wake=False,
                                                verification=guards.get(tp))
                       for tp, records in entries.items()}
        # Waiters (followers' and consumers' fetches) are completed once every partition
        # is appended, so a fetch they make sees the whole request (Kafka's action queue).
        for tp, r in results.items():
            if r.error == ErrorCode.none:
                self._wake(tp)
        if appended is not None:
            appended()
        if required_acks != -1:
            return results
        waiting = {tp: (self.partitions.get(tp), r.last_offset) for tp, r in results.items()
                   if r.error == ErrorCode.none}
        if not waiting:
            return results
        # One delayed operation for the whole request, as Kafka's DelayedProduce: each
        # partition's outcome is taken when it settles, the answer when all have.
        outcomes: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}

        def all_settled() -> bool:
            for tp, (start, last_offset) in waiting.items():
                if tp not in outcomes and self._replication_settled(tp, start, last_offset):
                    outcomes[tp] = self._replication_outcome(tp, start, last_offset)
            return len(outcomes) == len(waiting)

        await self.produce_purgatory.wait_until(waiting, timeout_s, all_settled)
        for tp, (start, last_offset) in waiting.items():
            error, message = outcomes.get(tp) or self._replication_outcome(tp, start, last_offset)
            if error != ErrorCode.none:
                results[tp] = ProduceResult(error, error_message=message)
        return results

    def _start_verification(self, entries: dict[TopicPartition, bytes | None], transactional_id: str
                            ) -> tuple[dict[TopicPartition, VerificationGuard], dict[TopicPartition, ProduceResult],
                                       tuple[str, int, int, list[TopicPartition]] | None]:
        """The guards to append with, the partitions refused already, and what to ask the
        coordinator (None: nothing), as Kafka's maybeStartTransactionVerificationForPartitions."""
        firsts = []
        producer = None
        for tp, records in entries.items():
            info = _first_transactional_batch(records)
            if info is None:
                continue
            if producer is None:
                producer = info[:2]
            elif info[:2] != producer:
                refused = ProduceResult(ErrorCode.invalid_producer_id_mapping,
                                        error_message="Transactional records contained more than one producer ID")
                return {}, dict.fromkeys(entries, refused), None
            firsts.append((tp, info))
        if producer is None:
            return {}, {}, None  # no transactional batch
        guards: dict[TopicPartition, VerificationGuard] = {}
        not_led: dict[TopicPartition, ProduceResult] = {}
        for tp, (pid, epoch, seq) in firsts:
            partition = self.partitions.get(tp)
            if partition is None or not partition.is_leader:
                # Refused now, as Kafka's getPartitionOrException: it may lead by the time
                # the coordinator answers, and would then be appended without a guard.
                error, message = self._not_leading(tp, partition)
                not_led[tp] = ProduceResult(error, error_message=message)
                continue
            guard = partition.log.maybe_start_transaction_verification(pid, seq, epoch)
            if guard is not None:
                guards[tp] = guard
        return guards, not_led, (transactional_id, producer[0], producer[1], list(guards)) if guards else None

    def _not_leading(self, tp: TopicPartition, partition: Partition | None) -> tuple[ErrorCode, str]:
        if partition is None:
            return self._not_hosted(*tp)
        return (ErrorCode.not_leader_or_follower,
                f"broker {self.broker_id} is not the leader of {tp[0]}-{tp[1]}")

    async def verify_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 tp: TopicPartition) -> tuple[VerificationGuard | None, ErrorCode]:
        """For a coordinator's transactional append to a partition led here (the group
        coordinator's TxnOffsetCommit, as Kafka's maybeStartTransactionVerificationForPartition):
        the guard to append with (SKIP_VERIFICATION when verification is off), and the
        verifier's error if the coordinator did not confirm the partition."""
        verifier = self.txn_verifier
        if verifier is None:
            return SKIP_VERIFICATION, ErrorCode.none
        partition = self.partitions.get(tp)
        if partition is None or not partition.is_leader:
            return None, self._not_leading(tp, partition)[0]
        guard = partition.log.maybe_start_transaction_verification(producer_id, -1, producer_epoch)
        if guard is None:
            return None, ErrorCode.none  # ongoing here: the append needs no guard
        errors = await verifier.verify(transactional_id, producer_id, producer_epoch, [tp])
        return guard, errors.get(tp, ErrorCode.none)

    def append_to_local_log(self, topic: str, index: int, records: bytes | None,
                            required_acks: int, origin: AppendOrigin = AppendOrigin.CLIENT,
                            wake: bool = True,
                            verification: VerificationGuard | None = SKIP_VERIFICATION) -> ProduceResult:
        """Append as leader; with ``wake``, complete the waiters the append satisfies.
        ``verification``: see ``Log.append_as_leader``."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            error, message = self._not_hosted(topic, index)
            return ProduceResult(error, error_message=message)
        if records is None:
            return ProduceResult(ErrorCode.invalid_record, error_message="null record set")
        try:
            config = partition.log.config
            batches = validate_batches(records, config.max_message_bytes)
            codec = config.compression_codec
            if codec is not None and (changed := recompressed(records, batches, codec, config.max_message_bytes,
                                                              config.compression_level)):
                # compression.type: stored with the topic's codec, as Kafka's LogValidator does.
                records = bytes(changed)
                batches = validate_batches(records, config.max_message_bytes)
            result = partition.append_records_to_leader(records, batches, required_acks, origin, verification)
        except InvalidRecordError as e:
            log.info("rejected produce to %s-%d: %s: %s", topic, index, e.error, e)
            return ProduceResult(ErrorCode[e.error], error_message=str(e),
                                 log_start_offset=partition.log.log_start_offset,
                                 record_errors=e.record_errors)
        except PartitionError as e:
            return ProduceResult(e.error, error_message=str(e))
        except OSError as e:
            log.error("write to %s-%d failed: %s", topic, index, e)
            return ProduceResult(ErrorCode.kafka_storage_error, error_message=str(e))
        if wake and not result.duplicate:
            self._wake((topic, index))
        return ProduceResult(ErrorCode.none, result.first_offset, result.log_append_time,
                             result.log_start_offset, last_offset=result.last_offset)

    def append_end_txn_marker(self, topic: str, index: int, producer_id: int, producer_epoch: int,
                              coordinator_epoch: int, commit: bool) -> ProduceResult:
        """A transaction's COMMIT or ABORT marker as the leader (WriteTxnMarkers); the caller
        waits for replication as for acks=all."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            error, message = self._not_hosted(topic, index)
            return ProduceResult(error, error_message=message)
        try:
            result = partition.append_end_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit)
        except InvalidRecordError as e:
            log.info("refused a transaction marker for %s-%d: %s: %s", topic, index, e.error, e)
            return ProduceResult(ErrorCode[e.error], error_message=str(e))
        except PartitionError as e:
            return ProduceResult(e.error, error_message=str(e))
        except OSError as e:
            log.error("write to %s-%d failed: %s", topic, index, e)
            return ProduceResult(ErrorCode.kafka_storage_error, error_message=str(e))
        self._wake((topic, index))
        return ProduceResult(ErrorCode.none, result.first_offset, result.log_append_time,
                             result.log_start_offset, last_offset=result.last_offset)

    async def wait_for_replication(self, topic: str, index: int, last_offset: int,
                                   timeout_s: float) -> tuple[ErrorCode, str | None]:
        """acks=all: wait until the high watermark passes ``last_offset`` (Kafka's DelayedProduce)."""
        key = (topic, index)
        start = self.partitions.get(key)
        await self.produce_purgatory.wait_until(
            [key], timeout_s, lambda: self._replication_settled(key, start, last_offset))
        return self._replication_outcome(key, start, last_offset)

    def _replication_settled(self, key: TopicPartition, start: Partition | None,
                             last_offset: int) -> bool:
        """Whether an acks=all wait for ``last_offset`` on ``start`` (the partition as it was
        when the batch was appended) is over: replicated, or the leadership moved."""
        p = self.partitions.get(key)
        return p is None or p is not start or not p.is_leader or p.high_watermark > last_offset

    def _replication_outcome(self, key: TopicPartition, start: Partition | None,
                             last_offset: int) -> tuple[ErrorCode, str | None]:
        p = self.partitions.get(key)
        if p is not None and p is start and not p.is_leader and p.high_watermark > last_offset:
            # Committed (the whole ISR had it) before this broker stopped leading, say by a
            # controlled shutdown in the same turn of the loop: the batch is safe, and
            # answering an error would only make the client send it again.
            return ErrorCode.none, None
        if p is None or p is not start or not p.is_leader:
            return (ErrorCode.not_leader_or_follower,
                    f"leadership of {key[0]}-{key[1]} moved before the batch was replicated")
        if p.high_watermark <= last_offset:
            return ErrorCode.request_timed_out, "the batch was not replicated to the ISR in time"
        if len(p.isr) < p.min_insync_replicas:
            return (ErrorCode.not_enough_replicas_after_append,
                    f"the ISR {p.isr} shrank below min.insync.replicas={p.min_insync_replicas}")
        return ErrorCode.none, None

    # -------------------------------------------------------------------- fetch

    def read_from_local_log(self, requests: list[FetchRequestPartition], max_bytes: int,
                            replica_id: int = -1, read_committed: bool = False) -> list[ReadResult]:
        """Read each partition as its leader; what is read counts as its topic's BytesOut
        (ReplicationBytesOut for a follower's fetch)."""
        results: list[ReadResult] = []
        remaining = max_bytes
        any_data = False
        follower = replica_id >= 0
        for req in requests:
            try:
                partition = self.leader_partition(req.topic, req.partition, req.current_leader_epoch)
            except PartitionError as e:
                results.append(ReadResult(e.error, -1, -1, -1, None))
                continue
            limit = max(0, min(req.max_bytes, remaining))
            res = partition.read(req.fetch_offset, limit, min_one_batch=not any_data,
                                 for_replica=follower, read_committed=read_committed)
            data = res.data
            if data is not None and data.length:
                any_data = True
                size = data.length
                remaining -= size
                if follower:
                    partition.stats.replication_bytes_out += size
                else:
                    partition.stats.bytes_out += size
            results.append(res)
        return results

    def _record_follower_fetches(self, requests: list[FetchRequestPartition], replica_id: int) -> None:
        """A follower's fetch offset is its log end offset, and moves the high watermark,
        only from a fetch the read will serve: in this leader's epoch (a fenced or future
        epoch is a follower that has not truncated against this leadership) and within
        [log start, log end] (an offset beyond the end is a log that diverged: counting it
        would commit every later append the moment it is written). Kafka checks both
        before ``updateFollowerFetchState``. A refused fetch does not count as a sign of
        life either (``last_fetch_ms``): a follower whose fetches keep being refused lags."""
        for req in requests:
            partition = self.partitions.get((req.topic, req.partition))
            if partition is None or not partition.is_leader:
                continue
            if 0 <= req.current_leader_epoch != partition.leader_epoch:
                continue
            plog = partition.log
            if not plog.log_start_offset <= req.fetch_offset <= plog.log_end_offset:
                continue
            try:
                moved = partition.update_follower_fetch(replica_id, req.fetch_offset, req.log_start_offset)
            except PartitionError:
                continue
            if moved:
                self._wake((req.topic, req.partition))
            else:  # its log start offset may have moved: a DeleteRecords may be done
                self.delete_records_purgatory.check_and_complete((req.topic, req.partition))
            expanded = partition.isr_after_expand(self.replica_eligible)
            if expanded is not None:
                self._change_isr(partition, expanded, "caught up")

    async def fetch_messages(self, requests: list[FetchRequestPartition], max_wait_ms: int,
                             min_bytes: int, max_bytes: int, replica_id: int = -1,
                             read_committed: bool = False, waiting: Callable[[], None] | None = None
                             ) -> list[ReadResult]:
        """Read; when there is less than ``min_bytes``, wait up to ``max_wait_ms`` for more
        (Kafka's DelayedFetch), calling ``waiting`` first."""
        if replica_id >= 0:
            self._record_follower_fetches(requests, replica_id)
        results = self.read_from_local_log(requests, max_bytes, replica_id, read_committed)
        available = sum(r.data.length for r in results if r.data is not None)
        has_error = any(r.error != ErrorCode.none for r in results)
        min_bytes = min(min_bytes, max_bytes)  # as Kafka's handleFetchRequest: never wait for more than fits
        if max_wait_ms <= 0 or not requests or available >= min_bytes or has_error:
            return results
        follower = replica_id >= 0
        if self._any_on_older_segment(requests, results, follower, read_committed):
            return results
        if available:
            self._uncount_bytes_out(requests, results, replica_id >= 0)  # read again below
        keys = [(r.topic, r.partition) for r in requests]

        def counter(p: Partition) -> int:
            return p.appended_bytes if follower else p.visible_bytes

        # Per partition: [the Partition, its counter as last seen, the request]; ``grown`` sums
        # the counters' growth since the start, so a check looks further only at partitions
        # whose counter moved since the last one.
        start = {(r.topic, r.partition): _Watched(p, counter(p), r) for r in requests
                 if (p := self.partitions.get((r.topic, r.partition))) is not None}
        grown = 0
        # A read_committed fetch can read only below the last stable offset (Kafka's
        # DelayedFetch measures it there): the high watermark's growth would answer it
        # while a transaction stays open, and a commit marker's few bytes would not.
        # Per partition: [last stable offset, bytes readable below it] as last seen, and
        # their sum. The last stable offset moves only with the high watermark (a marker
        # counts once it is below it), so it is looked at only when the visible bytes
        # changed, and the partition read again only when it moved.
        stable: dict[TopicPartition, list[int]] | None = None
        stable_total = 0
        if read_committed and not follower:
            stable = {}
            for r, res in zip(requests, results, strict=True):
                if (r.topic, r.partition) in start:
                    p = start[(r.topic, r.partition)].partition
                    readable = res.data.length if res.data is not None else 0
                    stable[(r.topic, r.partition)] = [p.log.last_stable_offset(), readable]
                    stable_total += readable

        def enough() -> bool:
            nonlocal stable_total, grown
            for key, watched in start.items():
                p = self.partitions.get(key)
                if p is not watched.partition or p is None or not p.is_leader:
                    return True  # deleted or moved: answer now
                req = watched.request
                if 0 <= req.current_leader_epoch != p.leader_epoch:
                    return True  # a new leader epoch here: FENCED_LEADER_EPOCH now (Kafka's DelayedFetch)
                now = counter(p)
                last = watched.last
                if now == last:
                    continue
                watched.last = now
                grown += now - last
                if stable is None:
                    # The end read to moved (it moves with the counter): into a later segment
                    # than the fetch offset's, the read stops at that segment's end and min_bytes
                    # may never be met from it. Kafka's DelayedFetch answers then ("fetching
                    # older segments"). A tailing fetch's offset is on the active segment.
                    lg = p.log
                    if lg.bases[-1] > req.fetch_offset and lg.on_older_segment(
                            req.fetch_offset, lg.log_end_offset if follower else p.high_watermark):
                        return True
                else:
                    seen = stable[key]
                    lso = p.log.last_stable_offset()
                    if lso != seen[0]:
                        if p.log.on_older_segment(req.fetch_offset, lso):
                            return True  # as above, at the last stable offset
                        data = p.read(req.fetch_offset, req.max_bytes, min_one_batch=True, read_committed=True).data
                        readable = data.length if data is not None else 0
                        stable_total += readable - seen[1]
                        seen[0], seen[1] = lso, readable
            if stable is not None:
                return stable_total >= min_bytes
            return available + grown >= min_bytes

        if waiting is not None:
            waiting()
        await self.fetch_purgatory.wait_until(keys, max_wait_ms / 1000.0, enough)
        return self.read_from_local_log(requests, max_bytes, replica_id, read_committed)

    def _any_on_older_segment(self, requests: list[FetchRequestPartition], results: list[ReadResult],
                              follower: bool, read_committed: bool) -> bool:
        """Whether a fetch offset lies in an older segment than the end its read stops at
        (log end for a follower, last stable offset for read_committed, else the high
        watermark): the read returned that segment's rest only, and waiting would not
        bring more (Kafka's DelayedFetch, "fetching older segments", completes at once)."""
        for req, res in zip(requests, results, strict=True):
            p = self.partitions.get((req.topic, req.partition))
            if p is None:
                continue
            end = res.log_end_offset if follower else res.last_stable_offset if read_committed \
                else res.high_watermark
            if p.log.on_older_segment(req.fetch_offset, end):
                return True
        return False

    def _uncount_bytes_out(self, requests: list[FetchRequestPartition], results: list[ReadResult],
                           follower: bool) -> None:
        """Take back what a read added to BytesOut when the fetch waits and reads again
        instead of answering it (fetch.min.bytes above what there was)."""
        for req, res in zip(requests, results, strict=True):
            data = res.data
            p = self.partitions.get((req.topic, req.partition))
            if data is not None and data.length and p is not None:
                if follower:
                    p.stats.replication_bytes_out -= data.length
                else:
                    p.stats.bytes_out -= data.length

    # ----------------------------------------------------------- delete records

    async def delete_records(self, offsets: dict[TopicPartition, int], timeout_ms: int
                             ) -> dict[TopicPartition, tuple[int, ErrorCode]]:
        """DeleteRecords (Kafka's ReplicaManager.deleteRecords): move each leader's log start
        to the offset asked (-1: its high watermark), then wait in the delete-records
        purgatory, up to ``timeout_ms``, until every partition's low watermark (the
        smallest log start among the leader and its registered followers, which move theirs
        from the leader's in their fetches) reaches it. Answers (low watermark, error) per
        partition: REQUEST_TIMED_OUT with the low watermark first seen for one that did not
        get there, NOT_LEADER_OR_FOLLOWER (or UNKNOWN_TOPIC_OR_PARTITION) for one whose
        leadership went meanwhile."""
        results: dict[TopicPartition, tuple[int, ErrorCode]] = {}
        pending: dict[TopicPartition, int] = {}  # partition -> offset its low watermark must reach
        for tp, offset in offsets.items():
            try:
                p = self.leader_partition(*tp)
                required = p.delete_records(offset)
                low = p.low_watermark(self.replica_alive)
            except PartitionError as e:
                results[tp] = (-1, e.error)
                continue
            if low < required:
                pending[tp] = required
                results[tp] = (low, ErrorCode.request_timed_out)  # until it is reached
            else:
                results[tp] = (low, ErrorCode.none)
        if not pending:
            return results

        def settled() -> bool:
            for tp, required in list(pending.items()):
                p = self.partitions.get(tp)
                if p is None:
                    results[tp] = (-1, ErrorCode.unknown_topic_or_partition)
                elif not p.is_leader:
                    results[tp] = (-1, ErrorCode.not_leader_or_follower)
                else:
                    low = p.low_watermark(self.replica_alive)
                    if low < required:
                        continue
                    results[tp] = (low, ErrorCode.none)
                del pending[tp]
            return not pending

        await self.delete_records_purgatory.wait_until(list(pending), timeout_ms / 1000.0, settled)
        return results

    # ---------------------------------------------------------------------- ISR

    def maybe_shrink_isr(self, lag_max_ms: int, resign_after_ms: int | None = None) -> None:
        """Drop followers that have not caught up within ``replica.lag.time.max.ms`` (or
        resign, when that leaves too few and the followers are fine: ``Partition.
        lagging_followers``); write again the ISR changes whose last write had an
        unknown outcome."""
        if self.isr_writer is None:
            return
        for partition in list(self.partitions.values()):
            retry = partition.retry_isr_write()
            if retry is not None:
                epoch, version, isr = retry
                self._start_isr_write(partition, epoch, version, isr, "retry")
                continue
            decided = partition.lagging_followers(
                lag_max_ms, resign_after_ms if resign_after_ms is not None else 2 * lag_max_ms,
                self.replica_eligible if self.resigner is not None else lambda r: False)
            if decided is None:
                continue
            action, isr = decided
            if action == "shrink":
                self._change_isr(partition, isr, "lagging")
            else:
                self._start_resignation(partition)

    def _count_isr_change(self, old: list[int], new: list[int]) -> None:
        """Kafka's IsrShrinksPerSec/IsrExpandsPerSec: a confirmed ISR of a partition led
        here lost (or gained) members."""
        if any(r not in new for r in old):
            self.isr_shrinks += 1
        if any(r not in old for r in new):
            self.isr_expands += 1

    def _start_resignation(self, partition: Partition) -> None:
        assert self.resigner is not None
        resigner, epoch = self.resigner, partition.leader_epoch
        tp = (partition.topic, partition.index)
        log.warning("%s-%d: no follower has fetched for too long, yet they are registered: "
                    "this leader seems cut off from them; asking the controller to replace it "
                    "(leader epoch %d, ISR %s)", *tp, epoch, partition.isr)

        async def resign() -> None:
            try:
                await resigner(partition, epoch)
            except Exception as e:  # noqa: BLE001 - ZooKeeper unreachable: asked again later
                log.warning("%s-%d: cannot ask to be replaced (%s); asking again later", *tp,
                            str(e) or type(e).__name__)
                if partition.leader_epoch == epoch:
                    partition.resignation_failed()

        task = asyncio.ensure_future(resign())
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    def _change_isr(self, partition: Partition, new_isr: list[int], reason: str) -> None:
        if self.isr_writer is None:
            return
        proposal = partition.propose_isr(new_isr)
        if proposal is None:
            return
        leader_epoch, version = proposal
        self._start_isr_write(partition, leader_epoch, version, new_isr, reason)

    def _start_isr_write(self, partition: Partition, leader_epoch: int, version: int,
                         new_isr: list[int], reason: str) -> None:
        task = asyncio.ensure_future(self._write_isr(partition, leader_epoch, version, new_isr, reason))
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    async def _write_isr(self, partition: Partition, leader_epoch: int, version: int,
                         new_isr: list[int], reason: str) -> None:
        assert self.isr_writer is not None
        old = list(partition.isr)
        tp = (partition.topic, partition.index)
        try:
            written = await self.isr_writer(partition, leader_epoch, new_isr, version)
        except Exception as e:  # noqa: BLE001 - the store is unreachable: retried later
            log.warning("%s-%d: cannot write ISR %s (%s); retrying in %d ms", *tp, new_isr,
                        str(e) or type(e).__name__, ISR_RETRY_MS)
            partition.isr_write_failed(leader_epoch, new_isr, ISR_RETRY_MS)
            self._wake(tp)
            return
        if partition.isr_written(leader_epoch, new_isr, written):
            log.info("%s-%d: ISR %s -> %s (%s)", *tp, old, new_isr, reason)
            self._count_isr_change(old, new_isr)
        elif written is not None and written == partition.partition_version and partition.isr == new_isr \
                and old != new_isr and partition.is_leader and partition.leader_epoch == leader_epoch:
            # ZooKeeper's data watch brought this write's own state (its version) before
            # the write's reply, and become_leader took it and counted it: say it here.
            log.info("%s-%d: ISR %s -> %s (%s)", *tp, old, new_isr, reason)
        elif written is None:
            log.info("%s-%d: ISR change to %s refused: the partition state changed since "
                     "version %d; waiting for the new state", *tp, new_isr, version)
        self._wake(tp)
