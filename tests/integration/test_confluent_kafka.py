"""confluent-kafka (librdkafka) against a real dmq server: produce, consume, admin."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)
from support.broker import BrokerProcess


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_topic(broker: BrokerProcess, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None) -> None:
    a = admin(broker)  # keep a reference: a collected client cancels its futures
    fs = a.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    fs[name].result(15)


def produce(broker: BrokerProcess, topic: str, messages: list[dict], **conf: object) -> list:
    delivered: list = []
    errors: list = []

    def cb(err, msg) -> None:
        (errors if err else delivered).append(err or msg)

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **conf})
    for m in messages:
        p.produce(topic, on_delivery=cb, **m)
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors
    return delivered


def consume_all(broker: BrokerProcess, topic: str, expected: int, partitions: int = 1,
                timeout: float = 30.0, **conf: object) -> list:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50, **conf})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        for msg in c.consume(1000, 0.5):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            out.append(msg)
    c.close()
    return out


@pytest.mark.parametrize("idempotence", [False, True])
@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume_round_trip(broker: BrokerProcess, topic_name: str, idempotence: bool,
                                    compression: str) -> None:
    create_topic(broker, topic_name, partitions=3)
    messages = []
    for i in range(600):
        m: dict = {"value": f"value-{i}".encode() * (i % 7 + 1), "partition": i % 3}
        if i % 5 == 0:
            m["key"] = f"key-{i}".encode()
        if i % 4 == 0:
            m["headers"] = [("h1", f"x{i}".encode()), ("empty", None)]
        if i % 11 == 0:
            m["value"] = None
        messages.append(m)
    delivered = produce(broker, topic_name, messages, **{
        "enable.idempotence": idempotence, "compression.type": compression, "acks": "all"})
    assert len(delivered) == 600
    got = consume_all(broker, topic_name, 600, partitions=3)
    assert len(got) == 600
    by_value = {}
    for msg in got:
        by_value.setdefault(msg.partition(), []).append(msg)
    for p, msgs in by_value.items():
        offsets = [m.offset() for m in msgs]
        assert offsets == list(range(len(msgs))), f"partition {p} offsets not dense"
    expected = {(m["partition"], m.get("key"), m["value"], tuple(m.get("headers") or ())) for m in messages}
    seen = {(m.partition(), m.key(), m.value(), tuple(m.headers() or ())) for m in got}
    assert seen == expected


def test_acks_zero_and_one(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name)
    produce(broker, topic_name, [{"value": b"a%d" % i} for i in range(100)], acks=0)
    produce(broker, topic_name, [{"value": b"b%d" % i} for i in range(100)], acks=1)
    got = consume_all(broker, topic_name, 200)
    assert sorted(m.value() for m in got) == sorted([b"a%d" % i for i in range(100)] + [b"b%d" % i for i in range(100)])


def test_log_append_time_topic(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    produce(broker, topic_name, [{"value": b"v", "timestamp": 1000}])
    after = int(time.time() * 1000)
    (msg,) = consume_all(broker, topic_name, 1)
    ts_type, ts = msg.timestamp()
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

    assert ts_type == TIMESTAMP_LOG_APPEND_TIME
    assert before - 5 <= ts <= after + 5


def test_create_time_is_kept(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name)
    produce(broker, topic_name, [{"value": b"v", "timestamp": 123456}])
    (msg,) = consume_all(broker, topic_name, 1)
    from confluent_kafka import TIMESTAMP_CREATE_TIME

    assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, 123456)


def test_list_offsets_by_timestamp(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name)
    produce(broker, topic_name, [{"value": b"v%d" % i, "timestamp": 10_000 + i * 10} for i in range(50)],
            **{"linger.ms": 50})
    a = admin(broker)
    tp = TopicPartition(topic_name, 0)

    def offset_for(spec: OffsetSpec) -> tuple[int, int]:
        r = a.list_offsets({tp: spec})[tp].result(10)
        return r.offset, r.timestamp

    assert offset_for(OffsetSpec.earliest())[0] == 0
    assert offset_for(OffsetSpec.latest())[0] == 50
    assert offset_for(OffsetSpec.for_timestamp(10_000 + 205)) == (21, 10_210)
    assert offset_for(OffsetSpec.for_timestamp(10_000 + 200)) == (20, 10_200)
    assert offset_for(OffsetSpec.for_timestamp(99_999))[0] == -1
    assert offset_for(OffsetSpec.max_timestamp()) == (49, 10_490)
    # The consumer API for the same lookup.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x", "enable.auto.commit": False})
    (res,) = c.offsets_for_times([TopicPartition(topic_name, 0, 10_000 + 33)], 10)
    assert res.offset == 4
    c.close()


def test_admin_topics_lifecycle(broker: BrokerProcess, topic_name: str) -> None:
    a = admin(broker)
    a.create_topics([NewTopic(topic_name, 2, 1, config={"retention.ms": "3600000"})])[topic_name].result(10)
    md = a.list_topics(timeout=10)
    assert topic_name in md.topics and len(md.topics[topic_name].partitions) == 2
    # already exists
    with pytest.raises(KafkaException) as exc:
        a.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    assert exc.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    # add partitions
    a.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(10)
    assert len(a.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 5
    with pytest.raises(KafkaException) as exc:
        a.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(10)
    assert exc.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    # describe configs: override, default and synonyms
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    configs = a.describe_configs([res])[res].result(10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].is_default
    # incremental alter
    res2 = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    a.incremental_alter_configs([res2])[res2].result(10)
    configs = a.describe_configs([res])[res].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "604800000"
    # legacy alter replaces the whole override set
    res3 = ConfigResource(ConfigResource.Type.TOPIC, topic_name, set_config={"max.message.bytes": "2000"})
    a.alter_configs([res3])[res3].result(10)
    configs = a.describe_configs([res])[res].result(10)
    assert configs["max.message.bytes"].value == "2000"
    assert configs["cleanup.policy"].value == "delete"
    # bad config values are rejected
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic_name, set_config={"retention.ms": "soon"})
    with pytest.raises(KafkaException) as exc:
        a.alter_configs([bad])[bad].result(10)
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG
    # delete
    a.delete_topics([topic_name])[topic_name].result(10)
    deadline = time.monotonic() + 10
    while topic_name in a.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic_name not in a.list_topics(timeout=10).topics


def test_create_topics_validate_only_and_errors(broker: BrokerProcess, topic_name: str) -> None:
    a = admin(broker)
    a.create_topics([NewTopic(topic_name, 3, 1)], validate_only=True)[topic_name].result(10)
    assert topic_name not in a.list_topics(timeout=10).topics
    cases = {
        "bad name!": KafkaError.TOPIC_EXCEPTION,
        topic_name + "-zero": KafkaError.INVALID_PARTITIONS,
        topic_name + "-rf": KafkaError.INVALID_REPLICATION_FACTOR,
        topic_name + "-cfg": KafkaError.INVALID_CONFIG,
    }
    topics = [
        NewTopic("bad name!", 1, 1),
        NewTopic(topic_name + "-zero", 0, 1),
        NewTopic(topic_name + "-rf", 1, 3),
        NewTopic(topic_name + "-cfg", 1, 1, config={"cleanup.policy": "shred"}),
    ]
    for t in topics:
        with pytest.raises(KafkaException) as exc:
            a.create_topics([t])[t.topic].result(10)
        assert exc.value.args[0].code() == cases[t.topic], t.topic


def test_describe_cluster_and_broker_configs(broker: BrokerProcess) -> None:
    a = admin(broker)
    desc = a.describe_cluster().result(10)
    assert [n.id for n in desc.nodes] == [0]
    assert desc.controller.id == 0
    assert desc.cluster_id
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = a.describe_configs([res])[res].result(10)
    assert configs["num.partitions"].value == "1"
    assert configs["log.retention.hours"].value == "168"


def test_dynamic_broker_config_layers_and_persists(fresh_broker: BrokerProcess) -> None:
    """follower.replication.throttled.rate is dynamic: per broker over the cluster default over
    static, shown with its source, kept across a restart; static configs are refused clearly."""
    a = admin(fresh_broker.start())
    name = "follower.replication.throttled.rate"
    this = ConfigResource(ConfigResource.Type.BROKER, "0")

    def described() -> ConfigEntry:
        return a.describe_configs([this])[this].result(10)[name]

    entry = described()
    assert entry.is_default and entry.is_read_only is False
    set_op = AlterConfigOpType.SET
    # librdkafka refuses an empty broker name, so the cluster default goes over the wire directly.
    from dmq.client.wire import WireClient
    from dmq.protocol.codec import make, request_class, request_module

    mod = request_module(44, 1)
    with WireClient("127.0.0.1", fresh_broker.port) as c:
        resp = c.request(make(request_class(44, 1), validate_only=False, resources=(make(
            mod.AlterConfigsResource, resource_type=4, resource_name="", configs=(make(
                mod.AlterableConfig, name=name, config_operation=0, value="2000"),)),)))
    assert resp.responses[0].error_code == 0
    entry = described()
    assert (entry.value, entry.source) == ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    a.incremental_alter_configs([ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry(name, "1000000", incremental_operation=set_op)])])[this].result(10)
    entry = described()
    assert (entry.value, entry.source) == ("1000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    # Static configs and unknown names are refused with INVALID_REQUEST (Kafka's code, KAFKA-13609)
    # and a message saying what to do.
    for bad, words in (("num.partitions", "static broker config"), ("no.such.config", "Unknown broker config")):
        res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
            ConfigEntry(bad, "3", incremental_operation=set_op)])
        with pytest.raises(KafkaException) as exc:
            a.incremental_alter_configs([res])[res].result(10)
        assert exc.value.args[0].code() == KafkaError.INVALID_REQUEST
        assert words in exc.value.args[0].str()
    bad_value = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry(name, "-5", incremental_operation=set_op)])
    with pytest.raises(KafkaException):
        a.incremental_alter_configs([bad_value])[bad_value].result(10)
    assert described().value == "1000000"
    fresh_broker.stop()
    fresh_broker.start()
    a = admin(fresh_broker)
    assert described().value == "1000000"
    # DELETE falls back to the cluster default.
    a.incremental_alter_configs([ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)])])[this].result(10)
    entry = described()
    assert (entry.value, entry.source) == ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert "dynamic broker config follower.replication.throttled.rate is now 2000" in fresh_broker.log_text()


def test_delete_records(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name)
    produce(broker, topic_name, [{"value": b"%d" % i} for i in range(100)], **{"linger.ms": 0, "batch.num.messages": 10})
    a = admin(broker)
    tp = TopicPartition(topic_name, 0, 40)
    res = a.delete_records([tp])[tp].result(10)
    assert res.low_watermark == 40
    got = consume_all(broker, topic_name, 60)
    assert [m.offset() for m in got] == list(range(40, 100))
    r = a.list_offsets({TopicPartition(topic_name, 0): OffsetSpec.earliest()})
    assert r[TopicPartition(topic_name, 0)].result(10).offset == 40
    # beyond the high watermark
    bad = TopicPartition(topic_name, 0, 1000)
    with pytest.raises(KafkaException) as exc:
        a.delete_records([bad])[bad].result(10)
    assert exc.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE


def test_delete_records_on_a_compact_only_topic_is_a_policy_violation(broker: BrokerProcess, topic_name: str) -> None:
    """As Kafka's deleteRecordsOnLeader: a topic without the delete policy keeps its records
    (the latest value of every key is the topic's state); compact,delete may."""
    create_topic(broker, topic_name, config={"cleanup.policy": "compact"})
    produce(broker, topic_name, [{"key": b"k%d" % i, "value": b"%d" % i} for i in range(10)])
    a = admin(broker)
    tp = TopicPartition(topic_name, 0, 5)
    with pytest.raises(KafkaException) as exc:
        a.delete_records([tp])[tp].result(10)
    assert exc.value.args[0].code() == KafkaError.POLICY_VIOLATION
    earliest = a.list_offsets({TopicPartition(topic_name, 0): OffsetSpec.earliest()})
    assert earliest[TopicPartition(topic_name, 0)].result(10).offset == 0
    both = topic_name + "-both"
    create_topic(broker, both, config={"cleanup.policy": "compact,delete"})
    produce(broker, both, [{"key": b"k%d" % i, "value": b"%d" % i} for i in range(10)])
    tp = TopicPartition(both, 0, 5)
    assert a.delete_records([tp])[tp].result(10).low_watermark == 5


def test_consume_from_offset_and_out_of_range(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name)
    produce(broker, topic_name, [{"value": b"%d" % i} for i in range(30)])
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic_name, 0, 25)])
    got = []
    deadline = time.monotonic() + 15
    while len(got) < 5 and time.monotonic() < deadline:
        got += [m for m in c.consume(10, 0.5) if not m.error()]
    assert [m.offset() for m in got] == [25, 26, 27, 28, 29]
    c.close()
    # Out of range: auto.offset.reset=earliest brings the consumer back to 0.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic_name, 0, 500)])
    got = []
    deadline = time.monotonic() + 15
    while not got and time.monotonic() < deadline:
        got += [m for m in c.consume(10, 0.5) if not m.error()]
    assert got and got[0].offset() == 0
    c.close()


def test_long_poll_returns_when_data_arrives(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x", "fetch.wait.max.ms": 5000, "enable.auto.commit": False})
    c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
    c.consume(1, 1.0)  # let the first (empty) long poll start
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    sent = time.monotonic()
    p.produce(topic_name, b"wake up")
    p.flush(10)
    msgs: list = []
    while not msgs and time.monotonic() - sent < 10:
        msgs = [m for m in c.consume(1, 0.1) if not m.error()]
    latency = time.monotonic() - sent
    c.close()
    assert msgs and msgs[0].value() == b"wake up"
    # With a 5 s fetch.wait.max.ms the record must arrive well before the wait ends.
    assert latency < 2.0, latency
