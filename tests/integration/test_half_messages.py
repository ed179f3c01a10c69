"""Half messages with check-back (issue 11, part 3) against a real broker, real processes.

Producers of the group run in child processes that are SIGKILLed at the moment
under test; checkers run in this process; consumers read with read_committed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from support.broker import BrokerProcess
from support.cli import run_dmq
from support.half_messages import crash_producer as support_crash_producer
from support.half_messages import describe_checks

from dmq.client.transactions import (
    HalfMessage,
    TransactionProducer,
    TransactionResolution,
    _Checker,
)
from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class
from dmq.protocol.extensions import (
    CheckAnswer,
    CheckAnswerV1,
    CheckTransactionsRequest,
    CheckTransactionsRequestV1,
)

TOPIC = "orders"

# Checks 1 s after a transaction begins, every 0.5 s after that, three at the most.
QUICK_CHECKS = {"transaction.check.delay.ms": "1000", "transaction.check.interval.ms": "500",
                "transaction.check.max": "3"}


@contextmanager
def with_orders_topic(broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """A started broker with the one-partition orders topic, closed after its test."""
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(15)
        yield broker
    finally:
        broker.close()


@pytest.fixture
def half_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with with_orders_topic(BrokerProcess(tmp_path / "data", overrides={
            **QUICK_CHECKS, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"}).start()) as broker:
        yield broker


def committed_keys(broker: BrokerProcess, settle: float = 1.0) -> list[bytes]:
    """Every key a read_committed consumer sees, read until the last stable offset and then
    ``settle`` seconds more without a record. The quiet time counts from the first end of
    the partition: a consumer slow to connect and fetch (a loaded machine) read nothing
    within the first second and returned no keys."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"probe-{time.monotonic_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "log_level": 0})
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    keys: list[bytes] = []
    deadline = time.monotonic() + 20
    quiet_until: float | None = None  # set at the first end of the partition
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if quiet_until is not None and time.monotonic() > quiet_until:
                    break
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF and quiet_until is None:
                    quiet_until = time.monotonic() + settle
                continue  # end of partition: keep polling until quiet
            keys.append(msg.key())
            if quiet_until is not None:
                quiet_until = time.monotonic() + settle
    finally:
        consumer.close()
    return keys


def crash_producer(broker: BrokerProcess, key: str, outcome: str, table: Path, group: str = "orders") -> str:
    return support_crash_producer(broker.bootstrap, key, outcome, table, group)


def describe(broker: BrokerProcess, group: str = "orders") -> dict[str, tuple[str, int, int]]:
    """transactional id -> (state, checks made, last answer), as the CLI shows them."""
    return describe_checks(broker.port, group)


def wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_commit_delivers_once_and_rollback_never(half_broker: BrokerProcess) -> None:
    with TransactionProducer({"bootstrap.servers": half_broker.bootstrap, "producer.group": "orders"}) as producer:
        txn = producer.begin()
        txn.send(TOPIC, key=b"1", value=b'{"total": 10}')
        assert committed_keys(half_broker, settle=0.5) == []  # a half message: invisible
        txn.commit()
        txn = producer.begin()
        txn.send(TOPIC, key=b"2", value=b'{"total": 20}')
        txn.rollback()
        with producer.begin() as txn:  # a block that raises rolls back
            txn.send(TOPIC, key=b"3", value=b"x")
            with pytest.raises(RuntimeError):
                raise RuntimeError("local transaction failed")
    assert committed_keys(half_broker) == [b"1"]


def test_a_crashed_producer_is_checked_back_by_a_live_member(half_broker: BrokerProcess, tmp_path: Path) -> None:
    table = tmp_path / "orders-table"
    table.mkdir()
    asked: list[HalfMessage] = []

    def check(message: HalfMessage) -> TransactionResolution:
        asked.append(message)
        assert message.key is not None
        saved = (table / message.key.decode()).exists()
        return TransactionResolution.COMMIT if saved else TransactionResolution.ROLLBACK

    with TransactionProducer({"bootstrap.servers": half_broker.bootstrap, "producer.group": "orders",
                              "check.poll.interval.ms": 200}, checker=check):
        saved_id = crash_producer(half_broker, "42", "commit", table)
        lost_id = crash_producer(half_broker, "43", "rollback", table)
        wait_for(lambda: describe(half_broker).get(saved_id, ("",))[0] == "CompleteCommit"
                 and describe(half_broker).get(lost_id, ("",))[0] == "CompleteAbort", 20, "both checks")
    assert committed_keys(half_broker) == [b"42"]
    by_id = {m.transactional_id: m for m in asked}
    assert by_id[saved_id].value == b'{"total": 10}' and by_id[saved_id].topic == TOPIC
    assert by_id[saved_id].check == 1
    assert describe(half_broker)[saved_id] == ("CompleteCommit", 1, TransactionResolution.COMMIT)
    assert describe(half_broker)[lost_id] == ("CompleteAbort", 1, TransactionResolution.ROLLBACK)
    shown = run_dmq(half_broker.bootstrap, "transactions", "describe", "--transactional-id", saved_id).stdout
    rows = {line.split()[0]: line.split()[1] for line in shown.splitlines() if len(line.split()) >= 2}
    assert (rows["state"], rows["producer-group"], rows["checks-made"], rows["last-answer"]) == \
        ("CompleteCommit", "orders", "1", "COMMIT"), shown


def test_unknown_answers_are_asked_up_to_the_limit_then_rolled_back(
        half_broker: BrokerProcess, tmp_path: Path) -> None:
    asked: list[int] = []
    lock = threading.Lock()

    def unsure(message: HalfMessage) -> TransactionResolution:
        with lock:
            asked.append(message.check)
        return TransactionResolution.UNKNOWN

    with TransactionProducer({"bootstrap.servers": half_broker.bootstrap, "producer.group": "orders",
                              "check.poll.interval.ms": 100}, checker=unsure):
        txn_id = crash_producer(half_broker, "44", "commit", tmp_path)
        wait_for(lambda: describe(half_broker)[txn_id][0] == "CompleteAbort", 20, "the rollback")
    assert asked == [1, 2, 3]  # transaction.check.max
    assert describe(half_broker)[txn_id] == ("CompleteAbort", 3, TransactionResolution.UNKNOWN)
    assert committed_keys(half_broker) == []
    log = half_broker.log_text()
    assert f"rolling back half-message transaction {txn_id}" in log and "3 checks made" in log


def test_with_no_live_checker_checks_wait_and_resume_when_one_comes(
        half_broker: BrokerProcess, tmp_path: Path) -> None:
    table = tmp_path / "orders-table"
    table.mkdir()
    txn_id = crash_producer(half_broker, "45", "commit", table)
    time.sleep(3.5)  # the first check was due after 1 s, then every 0.5 s: 3 checks' worth
    assert describe(half_broker)[txn_id] == ("Ongoing", 0, -1)  # nobody asked, nothing counted
    assert committed_keys(half_broker, settle=0.3) == []

    def check(message: HalfMessage) -> TransactionResolution:
        assert message.key is not None
        return TransactionResolution.COMMIT if (table / message.key.decode()).exists() \
            else TransactionResolution.ROLLBACK

    with TransactionProducer({"bootstrap.servers": half_broker.bootstrap, "producer.group": "orders",
                              "check.poll.interval.ms": 200}, checker=check):
        wait_for(lambda: describe(half_broker)[txn_id][0] == "CompleteCommit", 20, "the check")
    assert committed_keys(half_broker) == [b"45"]


def test_other_groups_checkers_are_not_asked(half_broker: BrokerProcess, tmp_path: Path) -> None:
    asked: list[str] = []

    def check(message: HalfMessage) -> TransactionResolution:
        asked.append(message.transactional_id)
        return TransactionResolution.ROLLBACK

    with TransactionProducer({"bootstrap.servers": half_broker.bootstrap, "producer.group": "payments",
                              "check.poll.interval.ms": 100}, checker=check):
        txn_id = crash_producer(half_broker, "46", "commit", tmp_path)
        time.sleep(2.5)
        assert asked == []
        assert describe(half_broker)[txn_id][:2] == ("Ongoing", 0)


def test_bad_check_requests_get_errors_not_a_crash(half_broker: BrokerProcess) -> None:
    with WireClient("127.0.0.1", half_broker.port) as c:
        wait_for(lambda: c.request(make(request_class(10, 4), key_type=1, coordinator_keys=("t",)))
                 .coordinators[0].error_code == ErrorCode.none, 20, "the transaction coordinator")
        resp = c.request(make(CheckTransactionsRequest, producer_group="", describe_only=False, answers=()))
        assert resp.error_code == ErrorCode.invalid_request
        resp = c.request(make(CheckTransactionsRequest, producer_group="nobody", describe_only=True, answers=()))
        assert resp.error_code == ErrorCode.none and resp.transactions == ()
    with pytest.raises(ValueError, match="producer.group"):
        TransactionProducer({"bootstrap.servers": half_broker.bootstrap})
    assert half_broker.alive()


def test_the_readme_example_runs(half_broker: BrokerProcess) -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    block = next(b for b in readme.split("```python")[1:] if "TransactionProducer" in b).split("```")[0]
    saved: list[str] = []
    code = block.replace("127.0.0.1:9092", half_broker.bootstrap) + "\nproducer.close()\n"
    exec(compile(code, "README.md", "exec"), {  # noqa: S102 - the README's own example
        "order_saved": lambda key: True, "save_order_in_database": lambda: saved.append("42")})
    assert saved == ["42"]
    assert committed_keys(half_broker) == [b"42"]


@pytest.fixture
def slow_check_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """Checks 1 s after a transaction begins, then only every minute."""
    with with_orders_topic(BrokerProcess(tmp_path / "data", overrides={
            "transaction.check.delay.ms": "1000", "transaction.check.interval.ms": "60000"}).start()) as broker:
        yield broker


def poll_checks(c: WireClient, answers: tuple[Any, ...] = (), v0: bool = False) -> list[Any]:
    if v0:
        request = make(CheckTransactionsRequest, producer_group="orders", describe_only=False, answers=answers)
    else:
        request = make(CheckTransactionsRequestV1, producer_group="orders", describe_only=False, answers=answers)
    resp = c.request(request)
    assert resp.error_code == ErrorCode.none, resp
    return list(resp.transactions)


def handed_out(c: WireClient, transactional_id: str, v0: bool = False) -> Any:
    found: list[Any] = []
    wait_for(lambda: found.extend(t for t in poll_checks(c, v0=v0) if t.transactional_id == transactional_id)
             or found, 20, "the check")
    return found[0]


def test_a_late_answer_to_an_ended_transaction_does_not_end_the_producers_next_one(
        slow_check_broker: BrokerProcess) -> None:
    broker = slow_check_broker
    with TransactionProducer({"bootstrap.servers": broker.bootstrap, "producer.group": "orders"}) as producer, \
            WireClient("127.0.0.1", broker.port) as checker:
        txn = producer.begin()
        txn.send(TOPIC, key=b"1", value=b"first", partition=0)
        assert producer.kafka.flush(30) == 0
        # A checker (of before v1) is asked about it, and is slow to answer.
        first = handed_out(checker, producer.transactional_id, v0=True)
        txn.commit()  # meanwhile the producer commits it itself
        txn = producer.begin()  # and begins the next, with the same producer id and epoch
        txn.send(TOPIC, key=b"2", value=b"second", partition=0)
        assert producer.kafka.flush(30) == 0
        # The checker's answers about the first transaction arrive: in v0 (which cannot name
        # it) and in v1 (which does). Neither is applied to the second.
        poll_checks(checker, (make(CheckAnswer, transactional_id=first.transactional_id,
                                   producer_id=first.producer_id, producer_epoch=first.producer_epoch,
                                   resolution=TransactionResolution.ROLLBACK),), v0=True)
        assert describe(broker)[producer.transactional_id][0] == "Ongoing"
        poll_checks(checker, (make(CheckAnswerV1, transactional_id=first.transactional_id,
                                   producer_id=first.producer_id, producer_epoch=first.producer_epoch,
                                   start_time_ms=first.start_time_ms,
                                   resolution=TransactionResolution.ROLLBACK),))
        assert describe(broker)[producer.transactional_id][0] == "Ongoing"
        second = handed_out(checker, producer.transactional_id)
        assert second.start_time_ms > first.start_time_ms
        poll_checks(checker, (make(CheckAnswerV1, transactional_id=first.transactional_id,
                                   producer_id=first.producer_id, producer_epoch=first.producer_epoch,
                                   start_time_ms=first.start_time_ms,
                                   resolution=TransactionResolution.ROLLBACK),))
        assert describe(broker)[producer.transactional_id][0] == "Ongoing"
        txn.commit()
    assert committed_keys(broker) == [b"1", b"2"]


def test_the_checker_is_not_shown_the_next_transactions_record(slow_check_broker: BrokerProcess) -> None:
    broker = slow_check_broker
    asked: list[HalfMessage] = []

    def check(message: HalfMessage) -> TransactionResolution:
        asked.append(message)
        return TransactionResolution.ROLLBACK

    config = {"bootstrap.servers": broker.bootstrap, "producer.group": "orders", "log_level": 0}
    with TransactionProducer(config) as producer, TransactionProducer(config) as member:
        checker = _Checker(member, check, 100, 5000, {"bootstrap.servers": broker.bootstrap, "log_level": 0})
        try:
            txn = producer.begin()
            txn.send(TOPIC, key=b"1", value=b"first", partition=0)
            assert producer.kafka.flush(30) == 0
            handed: list[Any] = []
            wait_for(lambda: handed.extend(checker._poll()) or handed, 20, "the check")
            txn.commit()  # the transaction ends before the checker reads its half message
            txn = producer.begin()
            txn.send(TOPIC, key=b"2", value=b"second", partition=0)
            assert producer.kafka.flush(30) == 0
            assert checker._ask(handed[0]) is None  # not asked: the record there is the next one's
            assert asked == []
            txn.commit()
        finally:
            checker._disconnect()
            if checker.consumer is not None:
                checker.consumer.close()
    assert committed_keys(broker) == [b"1", b"2"]


def test_a_delayed_half_message_is_the_one_the_checker_is_shown(half_broker: BrokerProcess) -> None:
    """A half message with a delay header is taken out of its batch (held in a control batch
    until its time); the checker was shown the next record of the partition, another
    producer's, and answered for the order from that."""
    asked: list[HalfMessage] = []

    def check(message: HalfMessage) -> TransactionResolution:
        asked.append(message)
        return TransactionResolution.COMMIT

    config = {"bootstrap.servers": half_broker.bootstrap, "producer.group": "orders", "log_level": 0}
    with TransactionProducer(config) as producer:
        txn = producer.begin()
        txn.send(TOPIC, key=b"order-42", value=b"remind", partition=0,
                 headers=[("dmq-delay-ms", b"60000"), ("trace", b"t1")])
        assert producer.kafka.flush(30) == 0
        other = Producer({"bootstrap.servers": half_broker.bootstrap, "log_level": 0})
        other.produce(TOPIC, key=b"someone-else", value=b"x", partition=0)
        assert other.flush(10) == 0
        with TransactionProducer({**config, "check.poll.interval.ms": 200}, checker=check):
            wait_for(lambda: describe(half_broker)[producer.transactional_id][0] == "CompleteCommit", 20,
                     "the check")
    assert [(m.key, m.value, m.headers) for m in asked] == [(b"order-42", b"remind", [("trace", b"t1")])]


def test_a_checker_on_a_sasl_listener_answers_checks(tmp_path: Path) -> None:
    """The checker's own connections (coordinator polls, the read of the checked record)
    use the producer's TLS/SASL settings: they connected in plaintext, the SASL listener
    closed them, and no check was ever answered on a secured cluster."""
    from support.security import plain_conf, start_secure_broker

    secure = start_secure_broker(tmp_path, **QUICK_CHECKS)
    with with_orders_topic(secure.proc):
        table = tmp_path / "orders-table"
        table.mkdir()
        asked: list[HalfMessage] = []

        def check(message: HalfMessage) -> TransactionResolution:
            asked.append(message)
            return TransactionResolution.COMMIT

        with TransactionProducer({**plain_conf(secure), "producer.group": "orders",
                                  "check.poll.interval.ms": 200}, checker=check):
            txn_id = crash_producer(secure.proc, "44", "commit", table)
            wait_for(lambda: describe(secure.proc).get(txn_id, ("",))[0] == "CompleteCommit", 30,
                     "the check over SASL_PLAINTEXT")
        assert [m.key for m in asked] == [b"44"]
        assert committed_keys(secure.proc) == [b"44"]
