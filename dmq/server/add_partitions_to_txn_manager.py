"""AddPartitionsToTxnManager: a partition leader asks transaction coordinators whether a
producer's partitions are in its ongoing transaction (KIP-890 verification).

The ReplicaManager's ``txn_verifier``. A transactional id's coordinator is the leader of
its ``__transaction_state`` partition: this broker's own coordinator answers directly;
another broker is sent AddPartitionsToTxn v4 with ``verify_only``. Verifications for one
broker that arrive while a request to it is out go together in the next one, one entry
per transactional id (a newer one answers the older: ``_enqueue``), as Kafka's
AddPartitionsToTxnManager batches them per node.

The coordinator's answers are translated as Kafka's AddPartitionsToTxnManager does: a
partition not in the transaction (TRANSACTION_ABORTABLE), and a CLUSTER_AUTHORIZATION_FAILED
of the whole request, become INVALID_TXN_STATE; PRODUCER_FENCED becomes
INVALID_PRODUCER_EPOCH; a coordinator that cannot be reached is NETWORK_EXCEPTION, one
that is not known COORDINATOR_NOT_AVAILABLE. The callers turn the rest into what their
clients retry (``ReplicaManager``, ``GroupCoordinator.txn_offset_commit``).

A coordinator that does not support verification (UNSUPPORTED_VERSION) verifies nothing:
the partitions are taken as verified, as Kafka does with an older coordinator.
Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.add_partitions_to_txn.v4 import request as schema
from kio.schema.errors import ErrorCode

from dmq.client.channels import BrokerChannels, BrokerUnreachable
from dmq.protocol.codec import make, request_class

log = logging.getLogger("dmq.transaction")

TopicPartition = tuple[str, int]
# (transactional id, producer id, epoch, partitions) -> the coordinator's error per partition
LocalVerify = Callable[[str, int, int, list[TopicPartition]], dict[TopicPartition, ErrorCode]]
REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms for its inter-broker clients
VERSION = 4


def _translated(error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.transaction_abortable:
        return ErrorCode.invalid_txn_state
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch  # producers expect it here (Kafka)
    return error


@dataclass(slots=True)
class _Waiting:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: list[TopicPartition]
    answer: asyncio.Future[dict[TopicPartition, ErrorCode]]


class AddPartitionsToTxnManager:
    """``coordinator_of(transactional_id)`` is the broker id leading its
    ``__transaction_state`` partition (None or -1: none now); ``local`` is this broker's
    TransactionCoordinator.verify_partitions. Invariant: at most one request in flight
    per remote broker (BrokerChannels); ``_queued[b]`` holds what waits for the next, one
    entry per transactional id."""

    def __init__(self, broker_id: int, coordinator_of: Callable[[str], int | None], local: LocalVerify,
                 channels: BrokerChannels) -> None:
        self.broker_id = broker_id
        self.coordinator_of = coordinator_of
        self.local = local
        self.channels = channels
        self._queued: dict[int, dict[str, _Waiting]] = {}  # broker -> transactional id -> waiting
        self._senders: dict[int, asyncio.Task[None]] = {}

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """The partitions the coordinator does not confirm, each with its error."""
        broker = self.coordinator_of(transactional_id)
        if broker is None or broker < 0:
            errors = dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        elif broker == self.broker_id:
            errors = self.local(transactional_id, producer_id, producer_epoch, partitions)
        else:
            waiting = _Waiting(transactional_id, producer_id, producer_epoch, partitions,
                               asyncio.get_running_loop().create_future())
            self._enqueue(broker, waiting)
            if broker not in self._senders:
                self._senders[broker] = asyncio.create_task(self._send_queued(broker))
            errors = await waiting.answer
        return {tp: _translated(e) for tp, e in errors.items() if e != ErrorCode.none}

    def _enqueue(self, broker: int, waiting: _Waiting) -> None:
        """One entry per transactional id waits for a broker's next request, as in Kafka's
        addTxnData: a newer one answers the older (NETWORK_EXCEPTION for the same epoch,
        which the producer retries, INVALID_PRODUCER_EPOCH for an older epoch); one with an
        older epoch than what waits is answered INVALID_PRODUCER_EPOCH at once. So a
        request its client gave up on (and retried) does not cost a round trip of its own."""
        queued = self._queued.setdefault(broker, {})
        older = queued.get(waiting.transactional_id)
        if older is not None:
            if older.producer_epoch > waiting.producer_epoch:
                waiting.answer.set_result(dict.fromkeys(waiting.partitions, ErrorCode.invalid_producer_epoch))
                return
            if not older.answer.done():
                error = ErrorCode.invalid_producer_epoch if older.producer_epoch < waiting.producer_epoch \
                    else ErrorCode.network_exception
                older.answer.set_result(dict.fromkeys(older.partitions, error))
        queued[waiting.transactional_id] = waiting

    async def _send_queued(self, broker: int) -> None:
        batch: dict[str, _Waiting] = {}
        try:
            while queued := self._queued.pop(broker, None):
                batch = {t: w for t, w in queued.items() if not w.answer.done()}
                if batch:
                    answers = await self._request(broker, list(batch.values()))
                    for w in batch.values():
                        if not w.answer.done():
                            w.answer.set_result(answers[w.transactional_id])
        except asyncio.CancelledError:
            self._fail(broker, batch)  # at shutdown: nobody may wait for ever
            raise
        except Exception:
            log.exception("transaction verification with broker %d failed", broker)
            self._fail(broker, batch)
        finally:
            self._senders.pop(broker, None)

    def _fail(self, broker: int, batch: dict[str, _Waiting]) -> None:
        for w in [*batch.values(), *self._queued.pop(broker, {}).values()]:
            if not w.answer.done():
                w.answer.set_result(dict.fromkeys(w.partitions, ErrorCode.network_exception))

    async def _request(self, broker: int, batch: list[_Waiting]) -> dict[str, dict[TopicPartition, ErrorCode]]:
        def everyone(error: ErrorCode) -> dict[str, dict[TopicPartition, ErrorCode]]:
            return {w.transactional_id: dict.fromkeys(w.partitions, error) for w in batch}

        transactions = []
        for w in batch:
            topics: dict[str, list[int]] = {}
            for topic, index in w.partitions:
                topics.setdefault(topic, []).append(index)
            transactions.append(make(
                schema.AddPartitionsToTxnTransaction, transactional_id=w.transactional_id,
                producer_id=w.producer_id, producer_epoch=w.producer_epoch, verify_only=True,
                topics=tuple(make(schema.AddPartitionsToTxnTopic, name=t, partitions=tuple(ps))
                             for t, ps in topics.items())))
        try:
            response = await self.channels.request(
                broker, make(request_class(24, VERSION), transactions=tuple(transactions)), REQUEST_TIMEOUT_S)
        except BrokerUnreachable as e:
            log.info("transaction verification with broker %d failed: %s", broker, e)
            return everyone(ErrorCode.network_exception)
        top = ErrorCode(response.error_code)
        if top == ErrorCode.unsupported_version:
            return everyone(ErrorCode.none)
        if top == ErrorCode.cluster_authorization_failed:
            log.error("broker %d refused transaction verification: CLUSTER_AUTHORIZATION_FAILED "
                      "(the inter-broker principal needs ClusterAction)", broker)
            return everyone(ErrorCode.invalid_txn_state)
        if top != ErrorCode.none:
            return everyone(top)
        answered: dict[str, dict[TopicPartition, ErrorCode]] = {}
        for result in response.results_by_transaction:
            errors = answered.setdefault(result.transactional_id, {})
            for t in result.topic_results:
                for p in t.results_by_partition:
                    errors[(t.name, int(p.partition_index))] = ErrorCode(p.partition_error_code)
        return {w.transactional_id: {tp: answered.get(w.transactional_id, {}).get(tp, ErrorCode.unknown_server_error)
                                     for tp in w.partitions} for w in batch}

    def close(self) -> None:
        for task in list(self._senders.values()):
            task.cancel()  # answers its request's waiters, if it has started
        self._senders.clear()
        for broker in list(self._queued):
            self._fail(broker, {})
        self.channels.close()
