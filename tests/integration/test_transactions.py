"""Transactional producers against a real dmq server (issue 11, part 2, in progress):
finding the transaction coordinator, InitProducerId with a transactional id, ListTransactions."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kio.schema.errors import ErrorCode
from support.broker import BrokerProcess

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module


def test_confluent_kafka_init_transactions_twice_for_one_id(
        broker: BrokerProcess) -> None:
    conf = {"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-init", "log_level": 3}
    first = Producer(conf)
    first.init_transactions(30)
    second = Producer(conf)
    second.init_transactions(30)  # a new instance of the same id: its epoch is bumped
    first.flush(1)
    second.flush(1)


def test_kafka_python_gets_producer_id_and_epoch_from_the_coordinator(broker: BrokerProcess) -> None:
    epochs = []
    for _ in range(2):
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-kp")
        producer.init_transactions()
        manager = producer._transaction_manager
        assert manager is not None
        epochs.append((manager.producer_id_and_epoch.producer_id, manager.producer_id_and_epoch.epoch))
        producer.close(timeout=5)
    assert epochs[0][0] == epochs[1][0] >= 0
    assert epochs[1][1] == epochs[0][1] + 1


def test_list_transactions_filters_by_state_and_producer_id(broker: BrokerProcess) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-listed")
    producer.init_transactions()
    pid = producer._transaction_manager.producer_id_and_epoch.producer_id  # type: ignore[union-attr]
    producer.close(timeout=5)
    with WireClient("127.0.0.1", broker.port) as c:
        def listed(states: tuple[str, ...], pids: tuple[int, ...]) -> tuple[list[tuple[str, int, str]], tuple[str, ...]]:
            resp = c.request(make(request_class(66, 0), state_filters=states, producer_id_filters=pids))
            assert resp.error_code == ErrorCode.none
            return ([(t.transactional_id, t.producer_id, t.transaction_state) for t in resp.transaction_states],
                    tuple(resp.unknown_state_filters))

        assert ("txn-listed", pid, "Empty") in listed((), ())[0]
        assert listed((), (pid,))[0] == [("txn-listed", pid, "Empty")]
        assert listed(("Ongoing",), (pid,))[0] == []
        assert listed(("Empty", "Bogus"), (pid,)) == ([("txn-listed", pid, "Empty")], ("Bogus",))
        assert listed(("Bogus",), ()) == ([], ("Bogus",))


def _create(broker: BrokerProcess, topic: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def _read_all(broker: BrokerProcess, topic: str, isolation: str, partitions: int = 2,
              expect: int | None = None, seconds: float = 10) -> list[tuple[int, str]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"read-{topic}-{isolation}",
                         "auto.offset.reset": "earliest", "isolation.level": isolation,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: list[tuple[int, str]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (expect is None or len(got) < expect):
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        got.append((msg.partition(), msg.value().decode()))
    consumer.close()
    return got


def _latest(broker: BrokerProcess, topic: str, partition: int, isolation: str) -> int:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso-probe",
                         "isolation.level": isolation})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    consumer.close()
    return int(high)


def test_confluent_kafka_commit_abort_and_read_committed(broker: BrokerProcess) -> None:
    topic = "txn-ck"
    _create(broker, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-ck", "log_level": 3})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, f"c{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"a{i}".encode(), partition=i % 2)
    assert producer.flush(10) == 0  # on the broker, then aborted
    producer.abort_transaction(30)
    # An open transaction holds the last stable offset of its partitions.
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(10) == 0
    assert _latest(broker, topic, 0, "read_committed") < _latest(broker, topic, 0, "read_uncommitted")
    committed = _read_all(broker, topic, "read_committed", expect=10, seconds=6)
    assert sorted(v for _, v in committed) == sorted(f"c{i}" for i in range(10))
    assert [v for p, v in committed if p == 0] == [f"c{i}" for i in range(0, 10, 2)]  # in order
    producer.commit_transaction(30)
    everything = _read_all(broker, topic, "read_uncommitted", expect=16)
    assert sorted(v for _, v in everything) == sorted([f"c{i}" for i in range(10)] + [f"a{i}" for i in range(5)]
                                                      + ["open"])
    committed = _read_all(broker, topic, "read_committed", expect=11)
    assert sorted(v for _, v in committed) == sorted([f"c{i}" for i in range(10)] + ["open"])
    assert _latest(broker, topic, 0, "read_committed") == _latest(broker, topic, 0, "read_uncommitted")


def test_a_zombie_producer_is_fenced_by_a_new_instance(broker: BrokerProcess) -> None:
    topic = "txn-zombie"
    _create(broker, topic, 1)
    conf = {"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-zombie", "log_level": 3}
    zombie = Producer(conf)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    assert zombie.flush(10) == 0
    fresh = Producer(conf)
    fresh.init_transactions(30)  # fences the zombie and aborts its open transaction
    fresh.begin_transaction()
    fresh.produce(topic, b"fresh", partition=0)
    fresh.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(10)
    assert raised.value.args[0].fatal() or raised.value.args[0].txn_requires_abort() or \
        "fenced" in str(raised.value).lower()
    assert [v for _, v in _read_all(broker, topic, "read_committed", partitions=1, expect=1, seconds=4)] == ["fresh"]


def test_consume_transform_produce_commits_offsets_with_the_output(broker: BrokerProcess) -> None:
    source, sink, group = "txn-in", "txn-out", "txn-ctp"
    _create(broker, source, 1)
    _create(broker, sink, 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        plain.produce(source, f"{i}".encode(), partition=0)
    assert plain.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-ctp", "log_level": 3})
    producer.init_transactions(30)
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 20 and time.monotonic() < deadline:
        msgs = [m for m in consumer.consume(10, 1.0) if not m.error()]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, str(int(m.value()) * 10).encode(), partition=0)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        seen += len(msgs)
    consumer.close()
    assert seen == 20
    out = [v for _, v in _read_all(broker, sink, "read_committed", partitions=1, expect=20)]
    assert out == [str(i * 10) for i in range(20)]
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    committed = check.committed([TopicPartition(source, 0)], timeout=10)
    check.close()
    assert committed[0].offset == 20


def test_offsets_an_open_transaction_will_replace_are_unstable_to_require_stable_fetches(
        broker: BrokerProcess) -> None:
    """KIP-447: while a transaction holds a group's offset, OffsetFetch with require_stable
    (a read_committed consumer's) answers UNSTABLE_OFFSET_COMMIT, not the older committed
    offset, from which the consumer would process the transaction's input again."""
    _create(broker, "txn-stable", 1)
    group = "txn-stable-group"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "log_level": 0})
    consumer.commit(offsets=[TopicPartition("txn-stable", 0, 3)], asynchronous=False)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-stable", "log_level": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition("txn-stable", 0, 9)], consumer.consumer_group_metadata(), 30)

    def fetched(version: int, require_stable: bool) -> tuple[ErrorCode, int]:
        m = request_module(9, version)
        with WireClient("127.0.0.1", broker.port) as c:
            if version >= 8:
                request = make(m.OffsetFetchRequest, require_stable=require_stable, groups=(make(
                    m.OffsetFetchRequestGroup, group_id=group,
                    topics=(make(m.OffsetFetchRequestTopics, name="txn-stable", partition_indexes=(0,)),)),))
                partition = c.request(request).groups[0].topics[0].partitions[0]
            else:
                request = make(m.OffsetFetchRequest, group_id=group, require_stable=require_stable, topics=(
                    make(m.OffsetFetchRequestTopic, name="txn-stable", partition_indexes=(0,)),))
                partition = c.request(request).topics[0].partitions[0]
        return partition.error_code, int(partition.committed_offset)

    for version in (7, 8):
        assert fetched(version, True) == (ErrorCode.unstable_offset_commit, -1)
        assert fetched(version, False) == (ErrorCode.none, 3)
    producer.commit_transaction(30)
    # EndTxn is answered once the commit is decided; the marker that makes the offset
    # stable is written just after.
    deadline = time.monotonic() + 30
    while fetched(8, True)[0] == ErrorCode.unstable_offset_commit and time.monotonic() < deadline:
        time.sleep(0.05)
    for version in (7, 8):
        assert fetched(version, True) == (ErrorCode.none, 9)
    consumer.close()


def test_a_read_committed_lookup_by_time_finds_nothing_in_an_open_transaction(broker: BrokerProcess) -> None:
    """ListOffsets by timestamp for read_committed finds only offsets below the last stable
    offset (Kafka's fetchOffsetForTimestamp): it answered an offset inside an open
    transaction, which a read_committed consumer cannot read yet."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    _create(broker, "txn-times", 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    plain.produce("txn-times", b"before", partition=0, timestamp=1_000_000)
    assert plain.flush(10) == 0
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-times", "log_level": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("txn-times", b"open", partition=0, timestamp=5_000_000)
    assert producer.flush(10) == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    tp = TopicPartition("txn-times", 0)

    def found(isolation: IsolationLevel) -> int:
        answer = admin.list_offsets({tp: OffsetSpec.for_timestamp(5_000_000)}, isolation_level=isolation)
        return int(answer[tp].result(10).offset)

    assert found(IsolationLevel.READ_UNCOMMITTED) == 1
    assert found(IsolationLevel.READ_COMMITTED) == -1
    producer.commit_transaction(30)
    deadline = time.monotonic() + 30
    while found(IsolationLevel.READ_COMMITTED) == -1 and time.monotonic() < deadline:
        time.sleep(0.05)  # the marker follows EndTxn's answer
    assert found(IsolationLevel.READ_COMMITTED) == 1


def test_kafka_python_commit_and_abort(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer

    topic = "txn-kp-data"
    _create(broker, topic, 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-kp-data")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(5):
        producer.send(topic, f"c{i}".encode(), partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(3):
        producer.send(topic, f"a{i}".encode(), partition=0)
    producer.flush()
    producer.abort_transaction()
    producer.close(timeout=5)
    for isolation, expected in (("read_committed", [f"c{i}" for i in range(5)]),
                                ("read_uncommitted", [f"c{i}" for i in range(5)] + [f"a{i}" for i in range(3)])):
        consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, isolation_level=isolation,
                                 auto_offset_reset="earliest", consumer_timeout_ms=3000)
        got = [m.value.decode() for m in consumer]
        consumer.close()
        assert got == expected, isolation


def test_aiokafka_transaction_and_read_committed(broker: BrokerProcess) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = "txn-aio"
    _create(broker, topic, 1)

    async def main() -> list[str]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-aio")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(4):
                    await producer.send_and_wait(topic, f"c{i}".encode(), partition=0)
            try:
                async with producer.transaction():
                    await producer.send_and_wait(topic, b"aborted", partition=0)
                    raise RuntimeError("roll back")
            except RuntimeError:
                pass
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                                    auto_offset_reset="earliest")
        await consumer.start()
        got: list[str] = []
        try:
            end = asyncio.get_running_loop().time() + 6
            while len(got) < 4 and asyncio.get_running_loop().time() < end:
                for records in (await consumer.getmany(timeout_ms=300)).values():
                    got.extend(r.value.decode() for r in records)
            await asyncio.sleep(0.5)
            for records in (await consumer.getmany(timeout_ms=300)).values():
                got.extend(r.value.decode() for r in records)
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(main()) == [f"c{i}" for i in range(4)]
