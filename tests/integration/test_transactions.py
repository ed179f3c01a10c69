"""Transactional producers against a real dmq server (issue 11, part 2, in progress):
finding the transaction coordinator, InitProducerId with a transactional id, ListTransactions."""

from __future__ import annotations

from confluent_kafka import Producer
from kafka import KafkaProducer
from kio.schema.errors import ErrorCode
from support.broker import BrokerProcess

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class


def test_confluent_kafka_init_transactions_and_a_second_instance_bumps_the_epoch(
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
