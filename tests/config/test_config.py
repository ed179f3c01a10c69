from __future__ import annotations

import re
from pathlib import Path

import pytest

from dmq.config import (
    BrokerConfig,
    ConfigError,
    ConfigSource,
    LogConfig,
    ShareGroupSettings,
    group_config_values,
    iso_duration_ms,
    parse_properties,
    share_group_settings,
    validate_group_configs,
    validate_topic_configs,
)


def test_topic_defaults_follow_broker_synonyms() -> None:
    b = BrokerConfig({"log.retention.hours": "1", "log.segment.bytes": "5000"})
    lc = LogConfig(b)
    assert lc.retention_ms == 3_600_000
    assert lc.segment_bytes == 5000
    described = {n: (v, s, syn) for n, v, s, syn in lc.describe()}
    value, source, synonyms = described["retention.ms"]
    assert (value, source) == ("3600000", ConfigSource.STATIC_BROKER_CONFIG)
    assert synonyms[0] == ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG)
    assert described["max.message.bytes"][1] == ConfigSource.DEFAULT_CONFIG
    b2 = BrokerConfig({"log.retention.ms": "5"})
    assert LogConfig(b2).retention_ms == 5  # ms beats hours


def test_topic_override_wins() -> None:
    lc = LogConfig(BrokerConfig({"log.retention.hours": "1"}), {"retention.ms": "7"})
    assert lc.retention_ms == 7
    described = {n: (v, s) for n, v, s, _ in lc.describe()}
    assert described["retention.ms"] == ("7", ConfigSource.DYNAMIC_TOPIC_CONFIG)


@pytest.mark.parametrize("key,value", [
    ("num.partitions", "zero"), ("num.partitions", "0"), ("auto.create.topics.enable", "maybe"),
    ("log.message.timestamp.type", "Now"), ("message.max.bytes", "99999999999"),
])
def test_bad_broker_values_are_clear(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig({key: value})
    assert key in str(e.value) and value in str(e.value)


def test_unknown_topic_config_is_refused() -> None:
    with pytest.raises(ConfigError):
        LogConfig(BrokerConfig(), {"retention.weeks": "1"})


def test_properties_parsing() -> None:
    props = parse_properties("# comment\nnum.partitions=3\n\n log.dirs = /tmp/x \nbroker.id:2\n")
    assert props == {"num.partitions": "3", "log.dirs": "/tmp/x", "broker.id": "2"}
    with pytest.raises(ConfigError):
        parse_properties("novalue\n")


def test_dynamic_broker_configs_layer_over_static() -> None:
    name = "follower.replication.throttled.rate"
    b = BrokerConfig({name: "500"})
    assert b.source(name) == ConfigSource.STATIC_BROKER_CONFIG
    assert b.apply_dynamic({}, {name: "700"}) == [name]
    assert (b[name], b.source(name)) == (700, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert b.apply_dynamic({name: "900"}, {name: "700"}) == [name]
    assert (b[name], b.source(name)) == (900, ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(v, s) for _, v, s in b.synonyms(name)][:3] == [
        ("900", ConfigSource.DYNAMIC_BROKER_CONFIG), ("700", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("500", ConfigSource.STATIC_BROKER_CONFIG)]
    # Static-only names and bad values in the dynamic layers are ignored, not fatal.
    assert b.apply_dynamic({"num.partitions": "9", name: "-1"}, {}) == [name]
    assert (b[name], b["num.partitions"]) == (500, 1)
    assert b.apply_dynamic({}, {}) == []


def test_dynamic_broker_config_validation_names_the_problem() -> None:
    from dmq.config import validate_dynamic_broker_configs

    assert validate_dynamic_broker_configs({"follower.replication.throttled.rate": "10"}) == {
        "follower.replication.throttled.rate": 10}
    with pytest.raises(ConfigError, match="static broker config"):
        validate_dynamic_broker_configs({"num.partitions": "3"})
    with pytest.raises(ConfigError, match="Unknown broker config"):
        validate_dynamic_broker_configs({"nope": "3"})
    with pytest.raises(ConfigError, match="follower.replication.throttled.rate"):
        validate_dynamic_broker_configs({"follower.replication.throttled.rate": "0"})


def test_the_example_server_properties_shows_known_keys_at_their_defaults() -> None:
    """config/server.properties (named in the README) lists real broker configs, each at
    dmq's default, and works as a --config file as it is."""
    path = Path(__file__).resolve().parents[2] / "config" / "server.properties"
    text = path.read_text()
    assert BrokerConfig(parse_properties(text)).explicit == {}, "every line is commented out"
    shown = parse_properties("\n".join(line[1:] for line in text.splitlines()
                                       if re.match(r"#[a-z]", line)))
    assert len(shown) >= 20
    config = BrokerConfig(shown)
    assert config.unknown == []
    examples = {"zookeeper.connect", "advertised.listeners"}  # no default: an example value
    defaults = BrokerConfig()
    for key, raw in shown.items():
        if key not in examples:
            assert config[key] == defaults[key], f"{key}={raw} is not dmq's default {defaults[key]!r}"


def test_share_group_configs_have_kafkas_names_defaults_and_bounds() -> None:
    defaults = BrokerConfig()
    assert {k: defaults[k] for k in (
        "group.share.session.timeout.ms", "group.share.heartbeat.interval.ms", "group.share.record.lock.duration.ms",
        "group.share.delivery.count.limit", "group.share.partition.max.record.locks", "group.share.max.size",
        "group.share.max.share.sessions")} == {
        "group.share.session.timeout.ms": 45000, "group.share.heartbeat.interval.ms": 5000,
        "group.share.record.lock.duration.ms": 30000, "group.share.delivery.count.limit": 5,
        "group.share.partition.max.record.locks": 2000, "group.share.max.size": 200,
        "group.share.max.share.sessions": 2000}
    for key, bad in [("group.share.delivery.count.limit", "1"), ("group.share.delivery.count.limit", "11"),
                     ("group.share.partition.max.record.locks", "99"), ("group.share.max.size", "1001"),
                     ("group.share.record.lock.duration.ms", "999"), ("group.share.session.timeout.ms", "0")]:
        with pytest.raises(ConfigError, match=key):
            BrokerConfig({key: bad})
    assert BrokerConfig({"group.share.delivery.count.limit": "10"})["group.share.delivery.count.limit"] == 10


# ------------------------------------------------------------------ group configs


def test_iso_durations_as_java_reads_them() -> None:
    assert iso_duration_ms("PT10S") == 10_000
    assert iso_duration_ms("PT1H30M") == 5_400_000
    assert iso_duration_ms("P1DT0.5S") == 86_400_500
    assert iso_duration_ms("p2d") == 2 * 86_400_000
    assert iso_duration_ms("PT0,25S") == 250
    for bad in ("P", "PT", "PT-1H", "-PT1H", "1H", "P1H", "PT1.5", "PT1H2D", ""):
        with pytest.raises(ValueError):
            iso_duration_ms(bad)


def test_group_configs_are_validated_within_the_brokers_bounds() -> None:
    broker = BrokerConfig()
    assert validate_group_configs({"share.auto.offset.reset": "by_duration:P1D",
                                   "share.record.lock.duration.ms": "15000"}, broker) == {
        "share.auto.offset.reset": "by_duration:P1D", "share.record.lock.duration.ms": 15000}
    for configs, message in (
            ({"share.record.lock.duration.ms": "14999"}, "greater than or equal to group.share.min.record"),
            ({"share.delivery.count.limit": "11"}, "less than or equal to group.share.max.delivery"),
            ({"share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "15000"}, None),
            ({"share.heartbeat.interval.ms": "15000", "share.session.timeout.ms": "46000"}, None),
            ({"share.auto.offset.reset": "Earliest"}, "must be latest, earliest or by_duration"),
            ({"share.dead.letter.topic": "dead letters"}, "legal topic name"),
            ({"group.share.delivery.count.limit": "3"}, "Unknown group config name")):
        if message is None:
            validate_group_configs(configs, broker)
        else:
            with pytest.raises(ConfigError, match=message):
                validate_group_configs(configs, broker)
    low = BrokerConfig({"group.share.session.timeout.ms": "3000", "group.share.heartbeat.interval.ms": "1000",
                        "group.share.min.heartbeat.interval.ms": "1000"})
    with pytest.raises(ConfigError, match="share.session.timeout.ms must be greater than share.heartbeat"):
        validate_group_configs({"share.heartbeat.interval.ms": "3000"}, low)  # the broker's session is 3000


def test_a_groups_settings_fall_back_to_the_brokers_group_share_configs() -> None:
    broker = BrokerConfig({"group.share.record.lock.duration.ms": "20000", "group.share.delivery.count.limit": "4"})
    assert share_group_settings(broker, {}) == ShareGroupSettings(45_000, 5_000, 20_000, 4, "latest", False, None)
    s = share_group_settings(broker, {"share.delivery.count.limit": "7", "share.isolation.level": "read_committed",
                                      "share.dead.letter.topic": "orders.dlq",
                                      "share.auto.offset.reset": "by_duration:PT1M"})
    assert (s.delivery_count_limit, s.read_committed, s.dead_letter_topic, s.reset_by_duration_ms) == \
        (7, True, "orders.dlq", 60_000)
    values = group_config_values(broker, {"share.delivery.count.limit": "7"})
    assert values["share.delivery.count.limit"][1:] == (ConfigSource.GROUP_CONFIG, [
        ("share.delivery.count.limit", "7", ConfigSource.GROUP_CONFIG),
        ("group.share.delivery.count.limit", "4", ConfigSource.STATIC_BROKER_CONFIG)])
    assert values["share.record.lock.duration.ms"][:2] == (20_000, ConfigSource.DEFAULT_CONFIG)


@pytest.mark.parametrize(("configs", "wrong"), [
    ({"compression.gzip.level": "0"}, "between 1 and 9 or equal to -1"),
    ({"compression.lz4.level": "18"}, "between 1 and 17"),
    ({"compression.zstd.level": "23"}, "between -131072 and 22"),
    ({"leader.replication.throttled.replicas": "0:1,x:2"}, "the literal '*' or a list of replicas"),
    ({"follower.replication.throttled.replicas": "0:1,*"}, "the literal '*' or a list of replicas"),
    ({"follower.replication.throttled.replicas": "0:\u0661"}, "the literal '*' or a list of replicas"),
    ({"remote.storage.enable": "true"}, "Tiered Storage functionality is disabled in the broker"),
    ({"local.retention.ms": "-3"}, "at least -2"),
    ({"segment.jitter.ms": "-1"}, "at least 0"),
    ({"max.compaction.lag.ms": "0"}, "at least 1"),
    ({"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "4"},
     "conflict topic config setting min.compaction.lag.ms (5) > max.compaction.lag.ms (4)"),
])
def test_kafkas_other_topic_configs_are_validated_as_kafka_does(configs: dict[str, str], wrong: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(wrong)):
        validate_topic_configs(configs, BrokerConfig())


def test_kafkas_other_topic_configs_are_accepted() -> None:
    """Kafka's topic configs that dmq refused as unknown (LogConfig's list): Kafka's tools,
    MirrorMaker 2 and Kafka Streams set them."""
    configs = {"segment.jitter.ms": "100", "min.compaction.lag.ms": "10", "max.compaction.lag.ms": "20",
               "message.timestamp.difference.max.ms": "1", "message.timestamp.before.max.ms": "2",
               "message.timestamp.after.max.ms": "3", "preallocate": "true",
               "message.downconversion.enable": "false", "compression.gzip.level": "-1",
               "compression.lz4.level": "17", "compression.zstd.level": "-5",
               "leader.replication.throttled.replicas": "0:1,1:2", "follower.replication.throttled.replicas": "*",
               "remote.storage.enable": "false", "remote.log.copy.disable": "false",
               "remote.log.delete.on.disable": "false", "local.retention.ms": "-2", "local.retention.bytes": "100"}
    validate_topic_configs(configs, BrokerConfig())
    lc = LogConfig(BrokerConfig(), configs)
    assert (lc.timestamp_before_max_ms, lc.timestamp_after_max_ms) == (2, 3)
    assert lc["follower.replication.throttled.replicas"] == ["*"]
    # with the broker's own default: the conflict is with it
    with pytest.raises(ConfigError, match="conflict topic config setting"):
        validate_topic_configs({"min.compaction.lag.ms": "50"},
                               BrokerConfig({"log.cleaner.max.compaction.lag.ms": "40"}))
    synonyms = {n: s for n, _v, _s, s in LogConfig(BrokerConfig({"log.roll.jitter.hours": "1"})).describe()}
    assert synonyms["segment.jitter.ms"][0] == ("log.roll.jitter.hours", "1", ConfigSource.STATIC_BROKER_CONFIG)
    assert LogConfig(BrokerConfig({"log.roll.jitter.hours": "1"}))["segment.jitter.ms"] == 3_600_000


def test_the_readme_names_every_topic_config_and_each_one_ignored() -> None:
    """The README's topic-config paragraph names every topic config dmq accepts, and its
    list of accepted-but-ignored ones is IGNORED_TOPIC_CONFIGS exactly: nothing is
    advertised that does nothing."""
    from dmq.config import IGNORED_TOPIC_CONFIGS, TOPIC_CONFIGS

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text[text.index("Topic configs (CreateTopics"):text.index("## Data directory")]
    named = set(re.findall(r"`([a-z0-9.]+)`", section))
    assert set(TOPIC_CONFIGS) - named == set()
    ignored_part = section[section.index("<!-- ignored topic configs -->"):section.index("Values are validated")]
    items = ignored_part.replace("\n  ", " ").splitlines()  # a bullet's continuation lines joined
    bullets = [line[2:].split(":", 1)[0] for line in items if line.startswith("- ")]
    assert set(re.findall(r"`([a-z0-9.]+)`", "".join(bullets))) == IGNORED_TOPIC_CONFIGS


def test_the_compression_level_follows_the_topics_codec() -> None:
    from dmq.config import BrokerConfig, LogConfig

    broker = BrokerConfig()
    assert (LogConfig(broker).compression_codec, LogConfig(broker).compression_level) == (None, None)
    assert LogConfig(broker, {"compression.type": "gzip"}).compression_level is None  # -1: the default
    gzip = LogConfig(broker, {"compression.type": "gzip", "compression.gzip.level": "9"})
    assert (gzip.compression_codec, gzip.compression_level) == (1, 9)
    assert LogConfig(broker, {"compression.type": "zstd"}).compression_level == 3
    assert LogConfig(broker, {"compression.type": "lz4", "compression.zstd.level": "7"}).compression_level == 9
    assert LogConfig(broker, {"compression.type": "snappy"}).compression_level is None
