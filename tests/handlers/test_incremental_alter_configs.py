"""IncrementalAlterConfigs against a real (single, embedded-store) broker."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from support.admin import (
    APPEND,
    BROKER,
    DELETE,
    GROUP,
    SET,
    TOPIC,
    alter_configs,
    at_once,
    create_topic,
    describe_configs,
    incremental_alter,
    incremental_alter_request,
)
from support.broker import BrokerProcess

from dmq.client.wire import WireClient
from dmq.config import ConfigSource


@pytest.mark.parametrize(("resource_type", "first", "second"), [
    (TOPIC, "retention.ms", "segment.ms"),
    (GROUP, "share.record.lock.duration.ms", "share.delivery.count.limit"),
])
def test_concurrent_changes_of_one_resource_are_both_kept(broker: BrokerProcess, resource_type: int,
                                                          first: str, second: str) -> None:
    """Two clients SET different configs of one resource at once: each handler read the
    overrides, then wrote its map with its one change, so the last write dropped the other's
    change though both were answered NONE (30 rounds out of 30). Kafka applies them in turn."""
    name = f"race-{resource_type}"
    with WireClient("127.0.0.1", broker.port) as a, WireClient("127.0.0.1", broker.port) as b:
        if resource_type == TOPIC:
            assert create_topic(a, name, 1, 1)[0] == ErrorCode.none
        for i in range(10):
            answers = at_once([
                (a, incremental_alter_request(resource_type, name, [(first, SET, str(30_000 + i))])),
                (b, incremental_alter_request(resource_type, name, [(second, SET, str(3 + i % 5))]))])
            assert [r.error_code for x in answers for r in x.responses] == [ErrorCode.none] * 2
            error, _, configs = describe_configs(a, resource_type, name, [first, second])
            assert error == ErrorCode.none
            assert (configs[first].value, configs[second].value) == (str(30_000 + i), str(3 + i % 5)), i


def test_delete_never_fails_on_a_name(broker: BrokerProcess) -> None:
    """DELETE removes an override whatever its name (Kafka's prepareIncrementalConfigs):
    kafka-reassign-partitions --verify deletes Kafka's throttle configs on every topic and
    broker it moved, and failed on the names dmq did not know."""
    with WireClient("127.0.0.1", broker.port) as c:
        assert create_topic(c, "deletes", 1, 1)[0] == ErrorCode.none
        assert incremental_alter(c, TOPIC, "deletes", [("no.such.config", DELETE, None),
                                                        ("retention.ms", DELETE, None)]) == [(ErrorCode.none, None)]
        assert incremental_alter(c, BROKER, "0", [("replica.alter.log.dirs.io.max.bytes.per.second", DELETE, None),
                                                  ("no.such.config", DELETE, None)]) == [(ErrorCode.none, None)]
        error, message = incremental_alter(c, TOPIC, "deletes", [("no.such.config", SET, "1")])[0]
        assert (error, message) == (ErrorCode.invalid_config, "Unknown topic config name: no.such.config")


def test_kafka_reassign_partitions_throttle_round_trip(broker: BrokerProcess) -> None:
    """What kafka-reassign-partitions --execute --throttle sets (Reassign.java: the replica
    lists on each topic, both rates on each broker) and --verify removes."""
    with WireClient("127.0.0.1", broker.port) as c:
        assert create_topic(c, "moved", 2, 1)[0] == ErrorCode.none
        topic_lists = [("leader.replication.throttled.replicas", "0:0,1:0"),
                       ("follower.replication.throttled.replicas", "0:1,1:1")]
        rates = [("leader.replication.throttled.rate", "1000000"), ("follower.replication.throttled.rate", "1000000")]
        assert incremental_alter(c, TOPIC, "moved", [(k, SET, v) for k, v in topic_lists]) == [(ErrorCode.none, None)]
        assert incremental_alter(c, BROKER, "0", [(k, SET, v) for k, v in rates]) == [(ErrorCode.none, None)]
        _, _, configs = describe_configs(c, TOPIC, "moved", [k for k, _ in topic_lists])
        assert {k: e.value for k, e in configs.items()} == dict(topic_lists)
        assert incremental_alter(c, BROKER, "0", [(k, DELETE, None) for k, _ in rates] + [
            ("replica.alter.log.dirs.io.max.bytes.per.second", DELETE, None)]) == [(ErrorCode.none, None)]
        assert incremental_alter(c, TOPIC, "moved", [(k, DELETE, None) for k, _ in topic_lists]) == [
            (ErrorCode.none, None)]
        _, _, configs = describe_configs(c, TOPIC, "moved", [k for k, _ in topic_lists])
        assert {k: e.value for k, e in configs.items()} == {k: "" for k, _ in topic_lists}


def test_remote_storage_is_refused_with_a_reason(broker: BrokerProcess) -> None:
    """dmq has no tiered storage: remote.storage.enable=true is INVALID_CONFIG, with Kafka's
    message for a broker without it; false (and the local.retention.* that only tiered
    topics use) is accepted."""
    with WireClient("127.0.0.1", broker.port) as c:
        error, message, _ = create_topic(c, "tiered", 1, 1, configs={"remote.storage.enable": "true"})
        assert error == ErrorCode.invalid_config
        assert message is not None and "Tiered Storage functionality is disabled in the broker" in message
        assert create_topic(c, "tiered", 1, 1, configs={"remote.storage.enable": "false",
                                                         "local.retention.ms": "-2"})[0] == ErrorCode.none
        error, message = incremental_alter(c, TOPIC, "tiered", [("remote.storage.enable", SET, "true")])[0]
        assert error == ErrorCode.invalid_config and message is not None and "Tiered Storage" in message
        error, message = incremental_alter(c, TOPIC, "tiered", [("min.compaction.lag.ms", SET, "10"),
                                                                ("max.compaction.lag.ms", SET, "9")])[0]
        assert (error, message) == (ErrorCode.invalid_config, "conflict topic config setting "
                                    "min.compaction.lag.ms (10) > max.compaction.lag.ms (9)")


def test_requests_kafka_refuses_before_looking_at_them(broker: BrokerProcess) -> None:
    """As Kafka's ConfigAdminManager.preprocess, INVALID_REQUEST for: a resource named twice
    (both entries; dmq applied them in turn), a config key twice, a null value other than a
    DELETE's. A topic resource with an invalid name is INVALID_TOPIC_EXCEPTION (Topic.validate;
    dmq answered UNKNOWN_TOPIC_OR_PARTITION); a broker config that cannot change is
    INVALID_REQUEST (Kafka's code, KAFKA-13609; dmq answered INVALID_CONFIG)."""
    with WireClient("127.0.0.1", broker.port) as c:
        assert create_topic(c, "pre", 1, 1)[0] == ErrorCode.none
        twice = incremental_alter(c, TOPIC, "pre", [("retention.ms", SET, "1000")],
                                  more=[(TOPIC, "pre", [("segment.ms", SET, "1000")])])
        assert twice == [(ErrorCode.invalid_request, "Each resource must appear at most once.")] * 2
        assert incremental_alter(c, TOPIC, "pre", [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)]) \
            == [(ErrorCode.invalid_request, "Error due to duplicate config keys")]
        assert incremental_alter(c, TOPIC, "pre", [("retention.ms", SET, None), ("segment.ms", APPEND, None)]) \
            == [(ErrorCode.invalid_request, "Null value not supported for : retention.ms, segment.ms")]
        error, message = incremental_alter(c, TOPIC, "bad name", [("retention.ms", SET, "1")])[0]
        assert error == ErrorCode.invalid_topic_exception and message is not None
        assert incremental_alter(c, TOPIC, "", [("retention.ms", SET, "1")])[0][0] == ErrorCode.invalid_topic_exception
        assert describe_configs(c, TOPIC, "")[0] == ErrorCode.invalid_topic_exception
        assert incremental_alter(c, BROKER, "0", [("num.partitions", SET, "3")])[0][0] == ErrorCode.invalid_request
        _, _, configs = describe_configs(c, TOPIC, "pre", ["retention.ms", "segment.ms"])
        assert {k: e.config_source for k, e in configs.items()} == dict.fromkeys(configs, ConfigSource.DEFAULT_CONFIG)
        # the legacy AlterConfigs: the same, and a null value is refused, not dropped
        assert alter_configs(c, TOPIC, "pre", [("retention.ms", "5"), ("segment.ms", None)]) == [
            (ErrorCode.invalid_request, "Null value not supported for : segment.ms")]
        assert alter_configs(c, TOPIC, "pre", [("retention.ms", "5")], more=[(TOPIC, "pre", [])]) == [
            (ErrorCode.invalid_request, "Each resource must appear at most once.")] * 2
        assert alter_configs(c, TOPIC, "bad name", [("retention.ms", "5")])[0][0] == ErrorCode.invalid_topic_exception
