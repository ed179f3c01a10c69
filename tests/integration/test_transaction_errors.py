"""Transactions gone wrong: abandoned transactions time out, bad requests get Kafka's errors."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_entity_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from support.broker import BrokerProcess
from support.transactions import abort_then_send_late_batch, produce_transactional, stable_and_end

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class

ABANDON = """
import os, sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "abandoned", "transaction.timeout.ms": 2000,
              "log_level": 0})
p.init_transactions(30)
p.begin_transaction()
for i in range(5):
    p.produce("txn-abandon", b"never", partition=0)
assert p.flush(10) == 0
os._exit(0)  # gone without EndTxn
"""


def request(c: WireClient, api_key: int, version: int, **values: Any) -> Any:
    return c.request(make(request_class(api_key, version), **values))


def init(c: WireClient, txn_id: str, timeout_ms: int = 60_000) -> Any:
    for _ in range(50):
        found = request(c, 10, 4, key_type=1, coordinator_keys=(txn_id,))
        if found.coordinators[0].error_code == ErrorCode.none:
            break
        time.sleep(0.1)
    return request(c, 22, 4, transactional_id=txn_id, transaction_timeout=timedelta(milliseconds=timeout_ms),
                   producer_id=-1, producer_epoch=-1)


def test_an_abandoned_transaction_is_aborted_after_its_timeout(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("txn-abandon", 1, 1)])["txn-abandon"].result(15)
        subprocess.run([sys.executable, "-c", ABANDON, broker.bootstrap], check=True, timeout=60)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "abandon-probe",
                             "isolation.level": "read_committed"})
        tp = TopicPartition("txn-abandon", 0)
        assert consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1] == 0  # held by it
        deadline = time.monotonic() + 20
        while consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1] == 0 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1] == 6  # 5 records and the ABORT
        consumer.assign([TopicPartition("txn-abandon", 0, OFFSET_BEGINNING)])
        got = [m for m in (consumer.poll(0.5) for _ in range(6)) if m is not None and not m.error()]
        consumer.close()
        assert got == []  # aborted: nothing for read_committed
        with WireClient("127.0.0.1", broker.port) as c:
            state = request(c, 65, 0, transactional_ids=("abandoned",)).transaction_states[0]
            assert state.transaction_state == "CompleteAbort" and state.producer_epoch == 1  # fenced
    finally:
        broker.close()


def test_bad_transactional_requests_get_kafkas_errors(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("bad-t", 1, 1)])["bad-t"].result(15)
    with WireClient("127.0.0.1", broker.port) as c:
        assert init(c, "bad-timeout", timeout_ms=900_001).error_code == ErrorCode.invalid_transaction_timeout
        good = init(c, "bad-input")
        assert good.error_code == ErrorCode.none
        pid, epoch = good.producer_id, good.producer_epoch
        amod = load_entity_module("add_partitions_to_txn", 3, EntityType.request)

        def add(txn: str, p: int, e: int, topic: str) -> list[ErrorCode]:
            r = request(c, 24, 3, v3_and_below_transactional_id=txn, v3_and_below_producer_id=p,
                        v3_and_below_producer_epoch=e, v3_and_below_topics=(
                            make(amod.AddPartitionsToTxnTopic, name=topic, partitions=(0,)),))
            return [x.partition_error_code for t in r.results_by_topic_v3_and_below for x in t.results_by_partition]

        assert add("never-initialised", 1, 0, "bad-t") == [ErrorCode.invalid_producer_id_mapping]
        assert add("bad-input", pid, epoch + 1, "bad-t") == [ErrorCode.producer_fenced]
        assert add("bad-input", pid, epoch, "no-such-topic") == [ErrorCode.unknown_topic_or_partition]
        # A client never adds an internal topic: its markers would land among the coordinator's
        # records (Kafka filters internal topics out of the authorized ones).
        request(c, 10, 4, key_type=0, coordinator_keys=("make-offsets-topic",))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and add("bad-input", pid, epoch, "__consumer_offsets") == [
                ErrorCode.unknown_topic_or_partition]:
            time.sleep(0.2)
        assert add("bad-input", pid, epoch, "__consumer_offsets") == [ErrorCode.topic_authorization_failed]
        assert add("bad-input", pid, epoch, "__transaction_state") == [ErrorCode.topic_authorization_failed]
        # Kafka's input checks: an empty transactional id, a producer id without an epoch.
        for bad in ({"transactional_id": "", "producer_id": -1, "producer_epoch": -1},
                    {"transactional_id": "bad-input", "producer_id": pid, "producer_epoch": -1},
                    {"transactional_id": "bad-input", "producer_id": -1, "producer_epoch": 0},
                    {"transactional_id": None, "producer_id": -1, "producer_epoch": 3}):
            refused = request(c, 22, 4, transaction_timeout=timedelta(seconds=60), **bad)
            assert (refused.error_code, refused.producer_id) == (ErrorCode.invalid_request, -1), bad
        assert request(c, 26, 3, transactional_id="", producer_id=pid, producer_epoch=epoch,
                       committed=True).error_code == ErrorCode.invalid_request
        assert request(c, 25, 3, transactional_id="", producer_id=pid, producer_epoch=epoch,
                       group_id="g").error_code == ErrorCode.invalid_request
        end = request(c, 26, 3, transactional_id="bad-input", producer_id=pid, producer_epoch=epoch, committed=True)
        assert end.error_code == ErrorCode.invalid_txn_state  # no transaction open
        end = request(c, 26, 1, transactional_id="bad-input", producer_id=pid, producer_epoch=epoch + 5,
                      committed=False)
        assert end.error_code == ErrorCode.invalid_producer_epoch  # before KIP-588
        mmod = load_entity_module("write_txn_markers", 1, EntityType.request)
        markers = request(c, 27, 1, markers=(make(
            mmod.WritableTxnMarker, producer_id=pid, producer_epoch=epoch, transaction_result=True,
            coordinator_epoch=0, topics=(make(mmod.WritableTxnMarkerTopic, name="no-such-topic",
                                              partition_indexes=(3,)),)),))
        assert markers.markers[0].topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def test_batched_add_partitions_and_verify_only(broker: BrokerProcess) -> None:
    """AddPartitionsToTxn v4 (KIP-890): several transactions in one request; verify_only
    answers which partitions are in a transaction and changes nothing."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("txn-batched", 2, 1)])["txn-batched"].result(15)
    mod = load_entity_module("add_partitions_to_txn", 4, EntityType.request)
    R = request_class(24, 4)

    def txn(txn_id: str, pid: int, epoch: int, partitions: tuple[int, ...], verify: bool) -> Any:
        return make(mod.AddPartitionsToTxnTransaction, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                    verify_only=verify, topics=(make(mod.AddPartitionsToTxnTopic, name="txn-batched",
                                                     partitions=partitions),))

    def codes(resp: Any) -> dict[str, list[ErrorCode]]:
        return {r.transactional_id: [p.partition_error_code for t in r.topic_results for p in t.results_by_partition]
                for r in resp.results_by_transaction}

    with WireClient("127.0.0.1", broker.port) as c:
        a, b = init(c, "batched-a"), init(c, "batched-b")
        assert a.error_code == b.error_code == ErrorCode.none
        added = c.request(make(R, transactions=(txn("batched-a", a.producer_id, a.producer_epoch, (0,), False),
                                                txn("batched-b", b.producer_id, b.producer_epoch, (1,), False))))
        assert added.error_code == ErrorCode.none
        assert codes(added) == {"batched-a": [ErrorCode.none], "batched-b": [ErrorCode.none]}
        verified = c.request(make(R, transactions=(
            txn("batched-a", a.producer_id, a.producer_epoch, (0, 1), True),
            txn("batched-b", b.producer_id, b.producer_epoch + 1, (1,), True),
            txn("batched-none", 99, 0, (0,), True),
            txn("", 99, 0, (0,), True))))
        assert codes(verified) == {
            "batched-a": [ErrorCode.none, ErrorCode.transaction_abortable],  # 1 is not in a's transaction
            "batched-b": [ErrorCode.producer_fenced],
            "batched-none": [ErrorCode.invalid_producer_id_mapping],
            "": [ErrorCode.invalid_request]}
        # verify_only added nothing: a's transaction still holds partition 0 only.
        state = c.request(make(request_class(65, 0), transactional_ids=("batched-a",))).transaction_states[0]
        assert [(t.topic, tuple(t.partitions)) for t in state.topics] == [("txn-batched", (0,))]


def test_a_late_batch_of_an_aborted_transaction_is_refused(broker: BrokerProcess) -> None:
    """KIP-890: a produce the client gave up on arrives after its transaction was aborted.
    Taken, it opened a transaction no coordinator knew: the last stable offset stayed
    behind it (read_committed consumers stuck), and the producer's next transaction on the
    partition would have committed the aborted record. The leader now asks the coordinator
    first and answers INVALID_TXN_STATE."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("txn-late", 1, 1)])["txn-late"].result(15)
    with WireClient("127.0.0.1", broker.port) as c:
        assert init(c, "late-app").error_code == ErrorCode.none
        late, producer = abort_then_send_late_batch(c, c, "late-app", "txn-late")
        assert late == ErrorCode.invalid_txn_state
        assert stable_and_end(c, "txn-late") == (2, 2)
        # Transactional records without a transactional id: refused outright, as Kafka.
        assert produce_transactional(c, None, "txn-late", *producer, seq=1) \
            == ErrorCode.transactional_id_authorization_failed
    # The producer's next transaction on the partition commits only its own record.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "late-app", "log_level": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("txn-late", b"next", partition=0)
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "late-probe",
                         "isolation.level": "read_committed", "log_level": 0})
    consumer.assign([TopicPartition("txn-late", 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    consumer.close()
    assert got == [b"next"]


def test_a_late_offset_commit_of_an_aborted_transaction_is_refused(broker: BrokerProcess) -> None:
    """KIP-890 for TxnOffsetCommit: a commit that arrives after its transaction was aborted
    was written as a transaction nobody would end, so its offsets stayed pending: every
    read_committed consumer of the group (require_stable) got UNSTABLE_OFFSET_COMMIT for
    ever. The group coordinator now asks the transaction coordinator first."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("txn-late-offsets", 1, 1)])["txn-late-offsets"].result(15)
    group = "late-offsets-group"
    cmod = load_entity_module("txn_offset_commit", 3, EntityType.request)
    fmod = load_entity_module("offset_fetch", 8, EntityType.request)
    with WireClient("127.0.0.1", broker.port) as c:
        for _ in range(100):
            if request(c, 10, 4, key_type=0, coordinator_keys=(group,)).coordinators[0].error_code == 0:
                break
            time.sleep(0.1)
        started = init(c, "late-offsets")
        pid, epoch = started.producer_id, started.producer_epoch

        def commit(offset: int) -> ErrorCode:
            r = request(c, 28, 3, transactional_id="late-offsets", group_id=group, producer_id=pid,
                        producer_epoch=epoch, generation_id=-1, member_id="", group_instance_id=None, topics=(
                            make(cmod.TxnOffsetCommitRequestTopic, name="txn-late-offsets", partitions=(make(
                                cmod.TxnOffsetCommitRequestPartition, partition_index=0, committed_offset=offset,
                                committed_leader_epoch=-1, committed_metadata=""),)),))
            return ErrorCode(r.topics[0].partitions[0].error_code)

        def fetch_stable() -> tuple[ErrorCode, int]:
            r = request(c, 9, 8, require_stable=True, groups=(make(
                fmod.OffsetFetchRequestGroup, group_id=group, topics=(make(
                    fmod.OffsetFetchRequestTopics, name="txn-late-offsets", partition_indexes=(0,)),)),))
            p = r.groups[0].topics[0].partitions[0]
            return ErrorCode(p.error_code), int(p.committed_offset)

        added = request(c, 25, 3, transactional_id="late-offsets", producer_id=pid, producer_epoch=epoch,
                        group_id=group)
        assert added.error_code == ErrorCode.none
        assert commit(5) == ErrorCode.none
        assert fetch_stable()[0] == ErrorCode.unstable_offset_commit
        end = request(c, 26, 3, transactional_id="late-offsets", producer_id=pid, producer_epoch=epoch,
                      committed=False)
        assert end.error_code == ErrorCode.none
        deadline = time.monotonic() + 20
        while fetch_stable()[0] != ErrorCode.none and time.monotonic() < deadline:
            time.sleep(0.05)  # the ABORT marker is written just after EndTxn's answer
        assert fetch_stable() == (ErrorCode.none, -1)
        # The coordinator completes the abort once the marker is written: until then a
        # TxnOffsetCommit is CONCURRENT_TRANSACTIONS (retriable), as in Kafka.
        while request(c, 65, 0, transactional_ids=("late-offsets",)).transaction_states[0].transaction_state \
                != "CompleteAbort" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert commit(7) == ErrorCode.invalid_txn_state
        assert fetch_stable() == (ErrorCode.none, -1)
