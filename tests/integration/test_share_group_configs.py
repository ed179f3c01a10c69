"""Share groups' per-group configs (Kafka's GROUP config resource) with confluent-kafka's
AdminClient against a real ``dmq server``: set with IncrementalAlterConfigs, shown by
DescribeConfigs with their sources, refused with Kafka's errors when out of bounds, kept
across a restart, and obeyed by ShareConsumers (share.auto.offset.reset=earliest and
by_duration, share.delivery.count.limit, share.record.lock.duration.ms, the session
timeout and heartbeat interval)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kio.schema.errors import ErrorCode
from support.broker import BrokerProcess
from test_share_consumer import consumer, create_topic, drain, produce

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module

BOUNDS = {"group.share.min.record.lock.duration.ms": "1000", "group.share.min.session.timeout.ms": "1000",
          "group.share.min.heartbeat.interval.ms": "100"}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", overrides=BOUNDS).start()
    try:
        yield b
    finally:
        b.close()


def alter(bootstrap: str, group: str, **values: str | None) -> None:
    """SET each value (None: DELETE) with IncrementalAlterConfigs."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k.replace("_", "."), v or "", incremental_operation=(
        AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)) for k, v in values.items()]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(10)


def describe(bootstrap: str, group: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group)
    return dict(admin.describe_configs([resource])[resource].result(10))


def test_group_configs_are_set_described_validated_and_kept(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    before = describe(bootstrap, "orders")
    assert {k: (v.value, int(v.source)) for k, v in before.items()} == {
        "share.session.timeout.ms": ("45000", 5), "share.heartbeat.interval.ms": ("5000", 5),
        "share.record.lock.duration.ms": ("30000", 5), "share.delivery.count.limit": ("5", 5),
        "share.auto.offset.reset": ("latest", 5), "share.isolation.level": ("read_uncommitted", 5),
        "share.dead.letter.topic": ("", 5)}
    alter(bootstrap, "orders", share_auto_offset_reset="earliest", share_delivery_count_limit="3",
          share_isolation_level="read_committed")
    after = describe(bootstrap, "orders")
    assert (after["share.auto.offset.reset"].value, int(after["share.auto.offset.reset"].source)) == ("earliest", 8)
    assert (after["share.delivery.count.limit"].value, after["share.isolation.level"].value) == ("3", "read_committed")
    assert int(after["share.record.lock.duration.ms"].source) == 5  # not set: the broker's

    for bad in ({"share_record_lock_duration_ms": "500"},             # below the broker's minimum
                {"share_record_lock_duration_ms": "3600001"},         # above its maximum
                {"share_delivery_count_limit": "11"},
                {"share_auto_offset_reset": "by_duration:-PT1H"},      # negative: refused as Kafka does
                {"share_auto_offset_reset": "yesterday"},
                {"share_isolation_level": "serializable"},
                {"share_session_timeout_ms": "2000", "share_heartbeat_interval_ms": "2000"},
                {"share_dead_letter_topic": "__consumer_offsets"}):
        with pytest.raises(KafkaException, match="INVALID_CONFIG"):
            alter(bootstrap, "orders", **bad)
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        alter(bootstrap, "orders", consumer_rebalance_magic="1")  # not a group config

    alter(bootstrap, "orders", share_delivery_count_limit=None)  # DELETE: back to the broker's
    broker.kill()
    broker.start()
    kept = describe(bootstrap, "orders")
    assert {k: v.value for k, v in kept.items() if int(v.source) == 8} == {
        "share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"}
    assert kept["share.delivery.count.limit"].value == "5"

    with WireClient("127.0.0.1", broker.port) as c:  # an empty group name is refused, as Kafka
        mod = request_module(32, 4)
        (result,) = c.request(make(request_class(32, 4), include_synonyms=True, include_documentation=False,
                                   resources=(make(mod.DescribeConfigsResource, resource_type=32, resource_name="",
                                                   configuration_keys=None),))).results
        assert result.error_code == ErrorCode.invalid_request


def test_earliest_and_by_duration_decide_where_a_new_group_starts(broker: BrokerProcess) -> None:
    """With the default (latest) a group that joins after the records were written sees none
    of them (test_share_consumer's groups join first for that reason); earliest gives it
    all, by_duration those younger than the duration."""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "backlog")
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    hour_ago = int(time.time() * 1000) - 3_600_000
    for i in range(10):
        p.produce("backlog", value=f"old{i}".encode(), timestamp=hour_ago)
    assert p.flush(10) == 0
    produce(bootstrap, "backlog", 20)  # r0..r19, written now

    for group, reset, expected in (("g-latest", None, []),
                                   ("g-earliest", "earliest", [f"old{i}" for i in range(10)] + [f"r{i}" for i in range(20)]),
                                   ("g-recent", "by_duration:PT10M", [f"r{i}" for i in range(20)])):
        if reset is not None:
            alter(bootstrap, group, share_auto_offset_reset=reset)
        c = consumer(bootstrap, group)
        try:
            c.subscribe(["backlog"])
            got = drain([c], len(expected), seconds=10 if expected else 3)[0]
            assert sorted(v for v, _ in got) == sorted(expected), (group, got)
        finally:
            c.close()


def test_the_groups_delivery_count_limit_and_lock_duration_are_obeyed(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "retries")
    alter(bootstrap, "g-limit", share_auto_offset_reset="earliest", share_delivery_count_limit="2",
          share_record_lock_duration_ms="2000", share_session_timeout_ms="6000",
          share_heartbeat_interval_ms="500")
    produce(bootstrap, "retries", 10)
    c = consumer(bootstrap, "g-limit")
    try:
        c.subscribe(["retries"])
        # r0 is always released: two deliveries (the group's limit, not the broker's 5),
        # then archived.
        def ack(_i: int, value: str, count: int) -> Any:
            return AcknowledgeType.RELEASE if value == "r0" else AcknowledgeType.ACCEPT

        got = drain([c], 11, seconds=20, ack=ack)[0]
        assert sorted(count for v, count in got if v == "r0") == [1, 2]
        assert not c.poll(3.0), "r0 archived after two deliveries"
    finally:
        c.close()
    with WireClient("127.0.0.1", broker.port) as w:  # ShareFetch's acquisition lock timeout is the group's
        resp = w.request(make(request_class(78, 1), group_id="g-limit", member_id="probe-member-0000000000",
                              share_session_epoch=0, max_wait=timedelta(milliseconds=1), min_bytes=1,
                              max_bytes=1000, max_records=1, batch_size=1, forgotten_topics_data=(), topics=()))
        assert resp.acquisition_lock_timeout == timedelta(milliseconds=2000)
        joined = w.request(make(request_class(76, 1), group_id="g-limit", member_id="probe-member-0000000000",
                                member_epoch=0, rack_id=None, subscribed_topic_names=("retries",)))
        assert (joined.error_code, joined.heartbeat_interval) == (ErrorCode.none, timedelta(milliseconds=500))


def test_read_committed_groups_get_only_committed_transactional_records(broker: BrokerProcess) -> None:
    """share.isolation.level=read_committed: records of committed transactions and plain
    records are delivered, an aborted transaction's never (archived), an open one's only
    once it commits; a read_uncommitted group of the same topic gets them all."""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "payments")
    alter(bootstrap, "g-committed", share_auto_offset_reset="earliest", share_isolation_level="read_committed")
    alter(bootstrap, "g-everything", share_auto_offset_reset="earliest")

    def transactional(txn_id: str) -> Producer:
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 0})
        p.init_transactions(10)
        return p

    def write(p: Producer, prefix: str, n: int) -> None:
        for i in range(n):
            p.produce("payments", value=f"{prefix}{i}".encode())
        p.flush(10)

    committed, aborted, pending = transactional("tx-a"), transactional("tx-b"), transactional("tx-c")
    committed.begin_transaction()
    aborted.begin_transaction()
    write(committed, "a", 5)
    write(aborted, "b", 5)  # interleaved with a's transaction in the log
    committed.commit_transaction(10)
    aborted.abort_transaction(10)
    produce(bootstrap, "payments", 5)  # plain records r0..r4
    pending.begin_transaction()
    write(pending, "c", 3)  # open: holds the last stable offset

    c = consumer(bootstrap, "g-committed")
    everything = consumer(bootstrap, "g-everything")
    try:
        c.subscribe(["payments"])
        everything.subscribe(["payments"])
        got = drain([c], 10, seconds=15)[0]
        assert sorted(v for v, _ in got) == sorted([f"a{i}" for i in range(5)] + [f"r{i}" for i in range(5)])
        assert not c.poll(1.5), "nothing of the aborted or the open transaction"
        all_of_it = drain([everything], 18, seconds=15)[0]
        assert sorted(v for v, _ in all_of_it) == sorted(
            [f"{p}{i}" for p in "abr" for i in range(5)] + [f"c{i}" for i in range(3)])
        pending.commit_transaction(10)
        late = drain([c], 3, seconds=15)[0]
        assert sorted(v for v, _ in late) == ["c0", "c1", "c2"]
        assert not c.poll(1.5)
        c.commit_sync(10)
        everything.commit_sync(10)
    finally:
        c.close()
        everything.close()


def test_deleting_a_share_group_deletes_its_state(broker: BrokerProcess) -> None:
    """DeleteGroups of an empty share group deletes its share-partitions' states too (as
    Kafka does): a group created again under the name starts where its reset policy says
    rather than where the deleted one stopped. A group with members is not deleted."""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "ledger")
    alter(bootstrap, "g-again", share_auto_offset_reset="earliest")
    produce(bootstrap, "ledger", 10)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    c = consumer(bootstrap, "g-again")
    try:
        c.subscribe(["ledger"])
        assert len(drain([c], 10)[0]) == 10
        c.commit_sync(10)
        with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
            admin.delete_consumer_groups(["g-again"])["g-again"].result(10)
    finally:
        c.close()
    admin.delete_consumer_groups(["g-again"])["g-again"].result(10)
    again = consumer(bootstrap, "g-again")
    try:
        again.subscribe(["ledger"])
        assert sorted(v for v, _ in drain([again], 10)[0]) == sorted(f"r{i}" for i in range(10))
        again.commit_sync(10)
    finally:
        again.close()
