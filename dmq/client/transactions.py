"""Half messages with check-back (RocketMQ's transactional messages) on Kafka transactions.

A ``TransactionProducer`` of a *producer group* sends half messages: records
of a Kafka transaction whose transactional id is
``__dmq_half/<producer group>/<instance>``. They are invisible to
``read_committed`` consumers until ``commit()``; ``rollback()`` aborts them.
When neither arrives (the producer crashed, the call was lost), the broker
checks back: the checker thread of every live producer of the group polls the
group's transaction coordinator (dmq's CheckTransactions API) and is handed
the transactions due a check; it calls the application's ``checker`` with the
first half message and sends the answer back in its next poll. COMMIT and
ROLLBACK end the transaction on the broker; UNKNOWN leaves it for the next
check. docs/half-messages.md has the whole protocol.

Threads: ``begin()``, ``send()``, ``commit()``, ``rollback()`` and ``close()``
belong to the application's thread (one transaction at a time per producer,
as Kafka's transactional producer); the checker runs in its own daemon thread
with its own connections and calls ``checker`` there.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import IntEnum
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.client.security import client_settings
from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module
from dmq.protocol.extensions import (
    CheckAnswer,
    CheckAnswerV1,
    CheckTransactionsRequest,
    CheckTransactionsRequestV1,
    Resolution,
)
from dmq.record.batch import iter_headers
from dmq.record.delayed import DELAYED_TYPE, decode_delayed, read_control_batch
from dmq.record.records import decode_batch

log = logging.getLogger("dmq.client.transactions")

HALF_PREFIX = "__dmq_half/"  # dmq.transaction.records.HALF_PREFIX; the client sits below it
OWN_KEYS = ("producer.group", "check.poll.interval.ms", "check.fetch.timeout.ms")
RETRIABLE = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
             ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions,
             ErrorCode.request_timed_out)
# A coordinator that closed the connection on a CheckTransactions v1 poll (a broker from
# before v1) is polled with v0 for this long before v1 is tried again.
V0_RETRY_S = 300.0
FETCH_BYTES = 4 << 20  # what the checker reads from a transaction's start (at least a batch)


class TransactionResolution(IntEnum):
    """What a checker answers: the local transaction committed, rolled back, or is not known yet."""
    COMMIT = Resolution.COMMIT
    ROLLBACK = Resolution.ROLLBACK
    UNKNOWN = Resolution.UNKNOWN


@dataclass(frozen=True)
class HalfMessage:
    """The first record of a half-message transaction, as a checker is given it.

    ``key``, ``value`` and ``headers`` are None when the record could not be read
    (its partition's leader was unreachable within ``check.fetch.timeout.ms``)."""
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    transactional_id: str
    producer_id: int
    producer_epoch: int
    check: int  # which check this is, 1 for the first


class TransactionError(RuntimeError):
    pass


FetchedRecord = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]  # offset, key, value, headers


def first_record(data: bytes, start: int, producer_id: int) -> FetchedRecord | None:
    """The first record of ``producer_id``'s transaction that starts at offset ``start``,
    from the batches ``data`` a read_uncommitted Fetch at ``start`` returned; None when
    they do not hold it.

    The batch at ``start`` is the producer's first of the transaction. A record of it
    taken out for delayed delivery (docs/delayed-delivery.md) is in the DELAYED control
    batch that follows, naming the producer; a batch all of whose records were taken out
    is left empty. Another producer's records are never the answer (a consumer reading
    from ``start`` skips the control batch and the empty one, and returns whatever
    record comes next)."""
    for pos, header in iter_headers(data):
        if header.last_offset < start:
            continue
        batch = data[pos : pos + header.size]
        if header.is_control and header.producer_id < 0:
            for delta, control_type, value in read_control_batch(batch):
                if control_type != DELAYED_TYPE or value is None:
                    continue
                held = decode_delayed(value)
                if held.producer_id == producer_id:
                    return (header.base_offset + delta, held.key, held.value,
                            [(k, v if v is not None else b"") for k, v in held.headers])
            continue
        if header.producer_id != producer_id or header.is_control:
            if header.base_offset <= start:
                return None  # the batch at start is not the producer's: not its transaction
            continue
        for r in decode_batch(batch)[1]:
            if r.offset >= start:
                return r.offset, r.key, r.value, [(k, v if v is not None else b"") for k, v in r.headers]
    return None


def _bootstrap(servers: str) -> list[tuple[str, int]]:
    out = []
    for item in servers.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap.servers: {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    return out


class Transaction:
    """One open half-message transaction. Use ``send()``, then ``commit()`` or ``rollback()``;
    as a context manager it rolls back when the block raises and was not ended."""

    def __init__(self, producer: TransactionProducer) -> None:
        self._producer = producer
        self.ended = False

    def send(self, topic: str, value: bytes | str | None = None, key: bytes | str | None = None,
             partition: int | None = None, headers: list[tuple[str, bytes]] | None = None) -> None:
        if self.ended:
            raise TransactionError("this transaction has ended")
        kwargs: dict[str, Any] = {"value": value, "key": key}
        if partition is not None:
            kwargs["partition"] = partition
        if headers is not None:
            kwargs["headers"] = headers
        kafka = self._producer.kafka
        while True:
            try:
                kafka.produce(topic, **kwargs)
                break
            except BufferError:
                kafka.poll(0.05)
        kafka.poll(0)

    def commit(self, timeout: float = 30.0) -> None:
        """Commit; on a retriable failure (confluent-kafka's KafkaException) the
        transaction stays open: commit again or roll back."""
        self._check_open()
        self._producer.kafka.commit_transaction(timeout)
        self._ended()

    def rollback(self, timeout: float = 30.0) -> None:
        self._check_open()
        self._producer.kafka.abort_transaction(timeout)
        self._ended()

    def _check_open(self) -> None:
        if self.ended:
            raise TransactionError("this transaction has already ended")

    def _ended(self) -> None:
        self.ended = True
        self._producer._open = None

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None and not self.ended:
            self.rollback()


class TransactionProducer:
    """A producer of half messages in a producer group, and (given ``checker``) a checker
    of the group's transactions whose producer is gone.

    Config: ``bootstrap.servers`` and ``producer.group`` (required),
    ``check.poll.interval.ms`` (1000: how often the checker asks for checks),
    ``check.fetch.timeout.ms`` (5000: how long it tries to read a half message);
    everything else goes to confluent-kafka's ``Producer``."""

    def __init__(self, config: dict[str, Any],
                 checker: Callable[[HalfMessage], TransactionResolution] | None = None,
                 init_timeout: float = 30.0) -> None:
        from confluent_kafka import Producer

        group = config.get("producer.group")
        if not group or not isinstance(group, str):
            raise ValueError("producer.group is required")
        servers = config.get("bootstrap.servers")
        if not servers:
            raise ValueError("bootstrap.servers is required")
        self.group = group
        self.bootstrap = _bootstrap(str(servers))
        self.transactional_id = f"{HALF_PREFIX}{group}/{uuid.uuid4().hex}"
        kafka_config = {k: v for k, v in config.items() if k not in OWN_KEYS}
        kafka_config.setdefault("log_level", 3)
        kafka_config["transactional.id"] = self.transactional_id
        self.kafka = Producer(kafka_config)
        self.kafka.init_transactions(init_timeout)
        self._open: Transaction | None = None
        self._checker: _Checker | None = None
        if checker is not None:
            self._checker = _Checker(self, checker, int(config.get("check.poll.interval.ms", 1000)),
                                     int(config.get("check.fetch.timeout.ms", 5000)), kafka_config)
            self._checker.start()

    def begin(self) -> Transaction:
        if self._open is not None:
            raise TransactionError("a transaction is already open on this producer; commit or roll it back")
        self.kafka.begin_transaction()
        self._open = Transaction(self)
        return self._open

    def close(self, timeout: float = 10.0) -> None:
        if self._checker is not None:
            self._checker.stop(timeout)
            self._checker = None
        self.kafka.flush(timeout)

    def __enter__(self) -> TransactionProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Checker(threading.Thread):
    """Polls the group's coordinator, calls the checker for each transaction handed out,
    sends the answers with the next poll. Its own thread and connections."""

    def __init__(self, producer: TransactionProducer, checker: Callable[[HalfMessage], TransactionResolution],
                 interval_ms: int, fetch_timeout_ms: int, kafka_config: dict[str, Any]) -> None:
        super().__init__(name=f"dmq-checker-{producer.group}", daemon=True)
        self.producer = producer
        self.checker = checker
        self.interval = interval_ms / 1000
        self.fetch_timeout = fetch_timeout_ms / 1000
        self.consumer_config = {
            k: v for k, v in kafka_config.items()
            if k in ("bootstrap.servers", "client.id", "log_level") or k.startswith(("security.", "sasl.", "ssl."))}
        # The same TLS/SASL settings for the checker's own connections (coordinator polls,
        # DescribeProducers, the fetch of the checked record): without them it could not
        # talk to a secured listener, and no check was ever answered.
        self.security = client_settings({k: str(v) for k, v in self.consumer_config.items()
                                         if k.startswith(("security.", "sasl.", "ssl."))}).security
        self.stopping = threading.Event()
        self.coordinator: WireClient | None = None
        self.coordinator_address: tuple[str, int] | None = None
        self.v1_answered = False  # the connected coordinator answered a v1 poll
        self.v0_until: dict[tuple[str, int], float] = {}  # coordinators polled with v0, until
        self.consumer: Any = None
        # (transactional id, producer id, epoch, transaction start time, resolution)
        self.answers: list[tuple[str, int, int, int, int]] = []

    def stop(self, timeout: float) -> None:
        self.stopping.set()
        self.join(timeout)

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    handed = self._poll()
                except (OSError, ValueError, TransactionError) as e:
                    log.debug("check poll of producer group %s failed: %s", self.producer.group, e)
                    self._disconnect()
                    self.stopping.wait(self.interval)
                    continue
                for txn in handed:
                    answer = self._ask(txn)
                    if answer is not None:
                        self.answers.append((txn.transactional_id, int(txn.producer_id),
                                             int(txn.producer_epoch), int(txn.start_time_ms), int(answer)))
                if not self.answers:
                    self.stopping.wait(self.interval)
        finally:
            self._disconnect()
            if self.consumer is not None:
                self.consumer.close()

    def _disconnect(self) -> None:
        if self.coordinator is not None:
            self.coordinator.close()
            self.coordinator = None
            self.v1_answered = False

    def _connect(self) -> WireClient:
        last: Exception | None = None
        for host, port in self.producer.bootstrap:
            try:
                with WireClient(host, port, "dmq-checker", timeout=10, security=self.security) as c:
                    found = c.request(make(request_class(10, 4), key_type=1,
                                           coordinator_keys=(self.producer.transactional_id,)))
            except OSError as e:
                last = e
                continue
            coordinator = found.coordinators[0]
            if coordinator.error_code != ErrorCode.none:
                raise TransactionError(f"no transaction coordinator: {coordinator.error_code.name}")
            self.coordinator_address = (coordinator.host, int(coordinator.port))
            return WireClient(coordinator.host, coordinator.port, "dmq-checker", timeout=30, security=self.security)
        raise TransactionError(f"no broker of bootstrap.servers answered: {last}")

    def _v1(self) -> bool:
        """Whether to poll the connected coordinator with v1 (answers naming their transaction)."""
        until = self.v0_until.get(self.coordinator_address) if self.coordinator_address else None
        return until is None or time.monotonic() >= until

    def _request(self, describe_only: bool, answers: list[tuple[str, int, int, int, int]]) -> Any:
        """A CheckTransactions request to the connected coordinator: v1, or v0 to a broker
        that closed the connection on v1 (it predates it; its answers are matched on the
        producer id and epoch alone, as that broker always did)."""
        assert self.coordinator is not None
        if not self._v1():
            return self.coordinator.request(make(
                CheckTransactionsRequest, producer_group=self.producer.group, describe_only=describe_only,
                answers=tuple(make(CheckAnswer, transactional_id=t, producer_id=p, producer_epoch=e,
                                   resolution=r) for t, p, e, _, r in answers)))
        request = make(CheckTransactionsRequestV1, producer_group=self.producer.group,
                       describe_only=describe_only,
                       answers=tuple(make(CheckAnswerV1, transactional_id=t, producer_id=p, producer_epoch=e,
                                          start_time_ms=start, resolution=r) for t, p, e, start, r in answers))
        try:
            response = self.coordinator.request(request)
        except ConnectionError:
            if not self.v1_answered and self.coordinator_address is not None:
                # A broker closes the connection on a version it does not know: poll it with
                # v0 for a while (a broker that just restarted is tried with v1 again later).
                log.info("the coordinator %s:%d of producer group %s closed the connection on "
                         "CheckTransactions v1; polling it with v0", *self.coordinator_address,
                         self.producer.group)
                self.v0_until[self.coordinator_address] = time.monotonic() + V0_RETRY_S
            raise
        self.v1_answered = True
        return response

    def _poll(self) -> list[Any]:
        if self.coordinator is None:
            self.coordinator = self._connect()
        answers = self.answers
        response = self._request(False, answers)
        if response.error_code in RETRIABLE:
            raise TransactionError(f"coordinator answered {response.error_code.name}")
        if response.error_code != ErrorCode.none:
            raise TransactionError(f"check poll refused: {response.error_code.name}")
        self.answers = []
        return list(response.transactions)

    def _still_open(self, txn: Any) -> bool:
        """Whether the transaction handed out is still open. After the record at the
        producer's current transaction start has been read: if it is, that record is this
        transaction's (one transaction of a producer is open at a time, and one that ended
        never opens again), not the next one's. Unknown (the coordinator did not answer): True."""
        try:
            if self.coordinator is None:
                self.coordinator = self._connect()
            response = self._request(True, [])
        except (OSError, ValueError, TransactionError) as e:
            log.debug("cannot describe the transactions of producer group %s: %s", self.producer.group, e)
            self._disconnect()
            return True
        if response.error_code != ErrorCode.none:
            return True
        return any(t.transactional_id == txn.transactional_id and int(t.producer_id) == int(txn.producer_id)
                   and int(t.producer_epoch) == int(txn.producer_epoch)
                   and int(t.start_time_ms) == int(txn.start_time_ms) and t.state == "Ongoing"
                   for t in response.transactions)

    def _ask(self, txn: Any) -> TransactionResolution | None:
        """The checker's answer for a transaction handed out; None: the transaction ended
        while its half message was being read (the record read may be a later
        transaction's), so the checker is not asked and nothing is answered."""
        message = self._first_message(txn)
        if message.offset >= 0 and not self._still_open(txn):
            log.debug("%s: the transaction handed out ended meanwhile; not checked", txn.transactional_id)
            return None
        try:
            answer = self.checker(message)
            return TransactionResolution(answer)
        except Exception:
            log.exception("the checker of producer group %s failed on %s; answering UNKNOWN",
                          self.producer.group, txn.transactional_id)
            return TransactionResolution.UNKNOWN

    def _first_message(self, txn: Any) -> HalfMessage:
        """The transaction's first record on the first of its partitions that can be read
        (there the producer's transaction starts at the offset DescribeProducers gives)."""
        for topic in txn.topics:
            for partition in topic.partitions:
                try:
                    message = self._read(txn, topic.name, int(partition))
                except Exception as e:  # any failure leaves the checker without the content
                    log.debug("cannot read half message of %s on %s[%d]: %s", txn.transactional_id,
                              topic.name, partition, e)
                    continue
                if message is not None:
                    return message
        first = txn.topics[0] if txn.topics else None
        return HalfMessage(first.name if first else "", int(first.partitions[0]) if first else -1, -1,
                           None, None, None, txn.transactional_id, int(txn.producer_id),
                           int(txn.producer_epoch), int(txn.checks))

    def _read(self, txn: Any, topic: str, partition: int) -> HalfMessage | None:
        from confluent_kafka import Consumer

        if self.consumer is None:
            self.consumer = Consumer({**self.consumer_config, "group.id": f"__dmq_checker/{self.producer.group}",
                                      "enable.auto.commit": False, "isolation.level": "read_uncommitted",
                                      "enable.partition.eof": False})
        meta = self.consumer.list_topics(topic, timeout=self.fetch_timeout)
        leader_id = meta.topics[topic].partitions[partition].leader
        if leader_id not in meta.brokers:  # no leader just now (-1): read on the next check
            return None
        leader = meta.brokers[leader_id]
        deadline = time.monotonic() + self.fetch_timeout
        with WireClient(leader.host, leader.port, "dmq-checker", timeout=self.fetch_timeout, security=self.security) as c:
            module = request_module(61, 0)
            resp = c.request(make(module.DescribeProducersRequest, topics=(
                make(module.TopicRequest, name=topic, partition_indexes=(partition,)),)))
            start = -1
            for t in resp.topics:
                for p in t.partitions:
                    for producer in p.active_producers:
                        if int(producer.producer_id) == int(txn.producer_id):
                            start = int(producer.current_txn_start_offset)
            if start < 0:
                return None
            # A Fetch of its own, not a consumer: a consumer skips the control batch holding a
            # delayed half message and returns the next record, whoever produced it.
            fetch = request_module(1, 12)
            while time.monotonic() < deadline:
                answer = c.request(make(
                    fetch.FetchRequest, replica_id=-1, max_wait=timedelta(milliseconds=200), min_bytes=1,
                    max_bytes=FETCH_BYTES, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                    forgotten_topics_data=(), topics=(make(fetch.FetchTopic, topic=topic, partitions=(
                        make(fetch.FetchPartition, partition=partition, fetch_offset=start,
                             partition_max_bytes=FETCH_BYTES, current_leader_epoch=-1, log_start_offset=-1,
                             last_fetched_epoch=-1),)),)))
                data = b"".join(bytes(p.records or b"") for t in answer.responses for p in t.partitions
                                if p.error_code == ErrorCode.none)
                found = first_record(data, start, int(txn.producer_id))
                if found is not None:
                    offset, key, value, headers = found
                    return HalfMessage(topic, partition, offset, key, value, headers, txn.transactional_id,
                                       int(txn.producer_id), int(txn.producer_epoch), int(txn.checks))
                if any(p.error_code != ErrorCode.none for t in answer.responses for p in t.partitions):
                    return None
                if any(h.last_offset >= start for _, h in iter_headers(data)):
                    return None  # read past where it would be: not there
        return None

