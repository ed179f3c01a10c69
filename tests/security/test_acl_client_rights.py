"""Real clients with exactly the rights Kafka's documentation gives them.

A producer needs Write on its topic (an idempotent one also IdempotentWrite on the
cluster, or Write on some topic: KIP-679); a consumer of a group Read on the topic and the
group. The clients (confluent-kafka, as User:ANONYMOUS from 127.0.0.1) get those rights by
ACLs and nothing else: what they may do works, the rest is refused with Kafka's error,
and the error reaches the application as Kafka's clients report it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AclOperation, AdminClient
from kio.schema.errors import ErrorCode
from support.broker import BrokerProcess
from support.transactions import (
    end_transaction,
    open_transaction,
    produce_records,
    produce_transactional,
    stable_and_end,
    transactional_batch,
)

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module
from dmq.record.records import encode_batch

CLIENT = ("User:ANONYMOUS", "127.0.0.1")  # how the broker sees this test's clients
ADMIN_HOST = "127.0.0.2"  # the admin connects from here (see test_acl_sweep)
TOPIC, DENIED_TOPIC, GROUP = "ledger", "salaries", "accounting"
TRANSACTIONAL_ID = "ledger-app"


def admin(broker: BrokerProcess) -> WireClient:
    return WireClient(broker.host, broker.port, client_id="acl-admin", source_host=ADMIN_HOST)


def grant(c: WireClient, resource_type: int, name: str, operation: int, principal: str, host: str,
          pattern: int = 3) -> None:
    mod = request_module(30, 3)
    answer = c.request(make(request_class(30, 3), creations=(make(
        mod.AclCreation, resource_type=resource_type, resource_name=name, resource_pattern_type=pattern,
        principal=principal, host=host, operation=operation, permission_type=3),)))
    assert [r.error_code for r in answer.results] == [ErrorCode.none], answer


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base: Path = tmp_path_factory.mktemp("acl-rights")
    proc = BrokerProcess(base / "data", overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        # Open until the admin's first ACLs (a wildcard on every resource type) lock it.
        "allow.everyone.if.no.acl.found": "true",
        "group.initial.rebalance.delay.ms": "0", "auto.create.topics.enable": "false"}).start()
    try:
        with admin(proc) as c:
            ALL, READ, WRITE = 2, 3, 4
            for resource_type, name in ((2, "*"), (3, "*"), (4, "kafka-cluster"), (5, "*")):
                grant(c, resource_type, name, ALL, "User:ANONYMOUS", ADMIN_HOST)
            mod = request_module(19, 7)
            created = c.request(make(request_class(19, 7), timeout=timedelta(seconds=10), validate_only=False,
                                     topics=tuple(make(mod.CreatableTopic, name=name, num_partitions=1,
                                                       replication_factor=1, assignments=(), configs=())
                                                  for name in (TOPIC, DENIED_TOPIC))))
            assert [t.error_code for t in created.topics] == [ErrorCode.none] * 2, created
            grant(c, 2, TOPIC, WRITE, *CLIENT)   # the producer: Write (so also an idempotent one)
            grant(c, 2, "led", READ, *CLIENT, pattern=4)  # the consumer: Read on the topic (prefixed)
            grant(c, 3, GROUP, READ, *CLIENT)    # and on its group
            grant(c, 5, TRANSACTIONAL_ID, WRITE, *CLIENT)  # a transactional producer: Write on its id
        yield proc
    finally:
        proc.close()


def produce(broker: BrokerProcess, topic: str, idempotent: bool) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": idempotent,
                  "message.timeout.ms": 10000, "retries": 0 if not idempotent else 2147483647})
    for i in range(3):
        p.produce(topic, value=b"%d" % i, on_delivery=lambda err, _msg: errors.append(err))
    p.flush(15)
    return errors


def test_a_producer_with_write_on_its_topic(broker: BrokerProcess) -> None:
    assert produce(broker, TOPIC, idempotent=True) == [None] * 3  # Write on a topic: InitProducerId too
    refused = produce(broker, DENIED_TOPIC, idempotent=False)
    assert refused and all(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in refused), \
        refused


def test_a_consumer_with_read_on_its_topic_and_group(broker: BrokerProcess) -> None:
    assert produce(broker, TOPIC, idempotent=False) == [None] * 3
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([TOPIC])
        got = []
        for _ in range(60):
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
                if len(got) >= 3:
                    break
        assert len(got) >= 3
        c.commit(got[-1], asynchronous=False)  # OffsetCommit: Read on the group and the topic
        committed = c.committed(c.assignment(), timeout=10)
        assert committed[0].offset == got[-1].offset() + 1
    finally:
        c.close()


def test_a_consumer_of_a_group_it_may_not_use(broker: BrokerProcess) -> None:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "payroll", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([TOPIC])
        errors = []
        for _ in range(40):
            msg = c.poll(0.5)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error().code())
                break
        assert errors == [KafkaError.GROUP_AUTHORIZATION_FAILED]
    finally:
        c.close()


def test_metadata_shows_only_the_topics_it_may_describe(broker: BrokerProcess) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap})
    listed = p.list_topics(timeout=10).topics
    assert TOPIC in listed and DENIED_TOPIC not in listed
    named = p.list_topics(DENIED_TOPIC, timeout=10).topics[DENIED_TOPIC]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_an_allowed_group_still_refuses_a_topic(broker: BrokerProcess) -> None:
    """OffsetCommit with Read on the group but not on the topic: the topic's partitions are
    refused, the others committed (Kafka's per-topic rule)."""
    mod = request_module(8, 9)
    with WireClient(broker.host, broker.port) as c:
        answer = c.request(make(request_class(8, 9), group_id=GROUP, generation_id_or_member_epoch=-1, member_id="",
                                group_instance_id=None, topics=tuple(make(
                                    mod.OffsetCommitRequestTopic, name=name, partitions=(make(
                                        mod.OffsetCommitRequestPartition, partition_index=0, committed_offset=1,
                                        committed_leader_epoch=-1, committed_metadata=""),)) for name in
                                    (TOPIC, DENIED_TOPIC))))
    assert {t.name: t.partitions[0].error_code for t in answer.topics} == {
        TOPIC: ErrorCode.none, DENIED_TOPIC: ErrorCode.topic_authorization_failed}


def test_authorized_operations_as_the_admin_client_asks_for_them(broker: BrokerProcess) -> None:
    """Describe Topics/Cluster/Groups with include_authorized_operations: the operations this
    principal's ACLs allow (Describe implied by Read and Write)."""
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = a.describe_topics(TopicCollection([TOPIC]), include_authorized_operations=True)
    assert set(topics[TOPIC].result(10).authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE}
    # DescribeCluster (librdkafka asks Metadata v12, which has no cluster field): none for this
    # principal (no Describe on the cluster), every cluster operation for the admin (All).
    for c, expected in ((WireClient(broker.host, broker.port), 0), (admin(broker), sum(
            1 << op for op in (5, 7, 8, 9, 10, 11, 12)))):
        with c:
            described = c.request(make(request_class(60, 1), include_cluster_authorized_operations=True,
                                       endpoint_type=1))
        assert described.cluster_authorized_operations == expected
    produce(broker, TOPIC, idempotent=False)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([TOPIC])
        for _ in range(40):
            if c.poll(0.5) is not None and c.assignment():
                break
        groups = a.describe_consumer_groups([GROUP], include_authorized_operations=True)
        assert set(groups[GROUP].result(10).authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    finally:
        c.close()


def test_a_transactional_producer_with_write_on_its_transactional_id(broker: BrokerProcess) -> None:
    """InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn with
    Write on the transactional id (and Write on the topic, Read on the group); another
    transactional id is refused at init_transactions."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": TRANSACTIONAL_ID})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(TOPIC, value=b"in a transaction")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        p.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 1)], c.consumer_group_metadata(), 15)
    finally:
        c.close()
    p.commit_transaction(15)
    other = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "payroll-app"})
    with pytest.raises(KafkaException) as refused:
        other.init_transactions(15)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_a_second_batch_cannot_slip_into_another_producers_transaction(broker: BrokerProcess) -> None:
    """A Produce partition holding two batches is INVALID_RECORD (Kafka's validateRecords,
    v3 on). The transactional-id check reads the first batch only: before, a principal with
    Write on the topic but on no transactional id put a plain batch first and another
    producer's transactional batch second, and that batch joined the open transaction
    (whose next batch then failed OUT_OF_ORDER_SEQUENCE)."""
    topic = "ledger-shared"
    with admin(broker) as a, WireClient(broker.host, broker.port) as c:
        mod = request_module(19, 7)
        created = a.request(make(request_class(19, 7), timeout=timedelta(seconds=10), validate_only=False,
                                 topics=(make(mod.CreatableTopic, name=topic, num_partitions=1, replication_factor=1,
                                              assignments=(), configs=()),)))
        assert created.topics[0].error_code == ErrorCode.none, created
        grant(a, 2, topic, 4, *CLIENT)  # this client: Write on the topic, on no transactional id
        pid, epoch = open_transaction(a, a, "payroll-app", topic)
        smuggled = encode_batch([(None, b"plain", [])]) + transactional_batch(pid, epoch, 1, b"smuggled")
        assert produce_records(c, None, topic, smuggled) == ErrorCode.invalid_record
        assert produce_records(c, None, topic, encode_batch([(None, b"a", [])]) + encode_batch(
            [(None, b"b", [])])) == ErrorCode.invalid_record  # two plain batches: refused as well
        assert produce_transactional(a, "payroll-app", topic, pid, epoch, 1, b"second") == ErrorCode.none
        end_transaction(a, "payroll-app", pid, epoch, commit=True)
        deadline = time.monotonic() + 10
        while stable_and_end(c, topic) != (3, 3) and time.monotonic() < deadline:
            time.sleep(0.05)  # the COMMIT marker is written just after EndTxn's answer
        assert stable_and_end(c, topic) == (3, 3)  # two records and the marker: nothing else appended


def test_a_refused_offset_commit_of_no_topics_does_not_keep_a_member_alive(broker: BrokerProcess) -> None:
    """OffsetCommit refused for its group answers without asking the coordinator, as Kafka
    does, also when it names no topic. Before, such a commit from a principal without Read
    on the group reached the coordinator and counted as the member's heartbeat: anyone
    could keep another group's stopped member (and its partitions) from expiring."""
    group = "payroll-stopped"
    jmod, smod = request_module(11, 9), request_module(14, 5)
    with admin(broker) as a, WireClient(broker.host, broker.port, source_host="127.0.0.3") as intruder:
        joined = a.request(make(request_class(11, 9), group_id=group, session_timeout=timedelta(seconds=6),
                                rebalance_timeout=timedelta(seconds=6), member_id="", group_instance_id="m-1",
                                protocol_type="consumer", reason=None, protocols=(make(
                                    jmod.JoinGroupRequestProtocol, name="range", metadata=b"\x00" * 6),)))
        assert joined.error_code == ErrorCode.none, joined
        member, generation = joined.member_id, joined.generation_id
        synced = a.request(make(request_class(14, 5), group_id=group, generation_id=generation, member_id=member,
                                group_instance_id="m-1", protocol_type="consumer", protocol_name="range",
                                assignments=(make(smod.SyncGroupRequestAssignment, member_id=member,
                                                  assignment=b""),)))
        assert synced.error_code == ErrorCode.none, synced
        # The member stops; another principal (no ACL for this host) commits nothing in its name.
        deadline = time.monotonic() + 9  # past the 6 s session
        while time.monotonic() < deadline:
            answer = intruder.request(make(request_class(8, 9), group_id=group,
                                           generation_id_or_member_epoch=generation, member_id=member,
                                           group_instance_id="m-1", topics=()))
            assert answer.topics == ()
            time.sleep(0.5)
        described = a.request(make(request_class(15, 5), groups=(group,), include_authorized_operations=False))
        assert described.groups[0].error_code == ErrorCode.none
        assert described.groups[0].members == (), "the stopped member was kept alive"


def test_invalid_acks_comes_after_authorization_and_unknown_partitions(broker: BrokerProcess) -> None:
    """A Produce whose acks is not 0, 1 or -1 is answered in Kafka's order (KafkaApis, then
    ReplicaManager.appendRecords): the transactional id refuses every partition, then each
    partition's topic ACL, then an unknown partition, and only the rest are
    INVALID_REQUIRED_ACKS. Before, every partition was INVALID_REQUIRED_ACKS, which told a
    client without Write on a topic nothing of its rights."""
    mod = request_module(0, 9)

    def produce(txn_id: str | None, records: bytes) -> dict[tuple[str, int], ErrorCode]:
        answer = c.request(make(request_class(0, 9), transactional_id=txn_id, acks=5,
                                timeout=timedelta(seconds=10), topic_data=tuple(
                                    make(mod.TopicProduceData, name=topic, partition_data=tuple(
                                        make(mod.PartitionProduceData, index=i, records=records) for i in indexes))
                                    for topic, indexes in ((TOPIC, (0, 7)), (DENIED_TOPIC, (0,))))))
        return {(t.name, p.index): ErrorCode(p.error_code) for t in answer.responses for p in t.partition_responses}

    with WireClient(broker.host, broker.port) as c:
        assert produce(None, encode_batch([(None, b"x", [])])) == {
            (TOPIC, 0): ErrorCode.invalid_required_acks, (TOPIC, 7): ErrorCode.unknown_topic_or_partition,
            (DENIED_TOPIC, 0): ErrorCode.topic_authorization_failed}
        assert set(produce("payroll-app", transactional_batch(1, 0, 0, b"t")).values()) == \
            {ErrorCode.transactional_id_authorization_failed}
