"""Broker and topic configuration with Kafka's names, defaults and synonyms.

A topic config (``retention.ms``) falls back to its broker synonyms
(``log.retention.ms``, ``log.retention.minutes``, ``log.retention.hours``) in
that order, then to the default, exactly as DescribeConfigs reports them.
Values are validated when set; a bad value raises ``ConfigError`` with a
message that names the key and what is allowed.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property
from typing import Any

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigError(ValueError):
    pass


class ConfigType(IntEnum):
    """DescribeConfigs v3 config types."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """DescribeConfigs config sources."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: str | None
    doc: str
    validator: Callable[[Any], None] | None = None
    # Multiplier applied to a broker synonym's value to reach this config's unit:
    # synonym name -> factor (log.retention.hours -> 3_600_000 for retention.ms).
    synonyms: tuple[tuple[str, int], ...] = ()


def _at_least(n: int) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if v < n:
            raise ConfigError(f"must be at least {n}")

    return check


def _between(low: int, high: int) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if not low <= v <= high:
            raise ConfigError(f"must be between {low} and {high}")

    return check


def _one_of(*allowed: str) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        items = v if isinstance(v, list) else [v]
        for item in items:
            if item not in allowed:
                raise ConfigError(f"must be one of {', '.join(allowed)}")

    return check


def _gzip_level(v: Any) -> None:
    """Kafka's CompressionType.GZIP.levelValidator: 1-9, or -1 (zlib's default)."""
    if v > 9 or (v < 1 and v != -1):
        raise ConfigError("Value must be between 1 and 9 or equal to -1")


def _throttled_replicas(v: Any) -> None:
    """Kafka's ThrottledReplicaListValidator: ``*`` or ``partition:broker`` items (ASCII digits)."""
    if not (all(re.fullmatch(r"[0-9]+:[0-9]+", item) for item in v) or "".join(v) == "*"):
        raise ConfigError("must be the literal '*' or a list of replicas in the following format: "
                          "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


def _no_remote_storage(v: Any) -> None:
    if v:
        raise ConfigError("Tiered Storage functionality is disabled in the broker. Topic cannot be "
                          "configured with remote log storage. (dmq has no tiered storage.)")


def _ratio(v: Any) -> None:
    if not 0.0 <= v <= 1.0:
        raise ConfigError("must be between 0 and 1")


def parse_value(cdef: ConfigDef, raw: str) -> Any:
    """Parse and validate ``raw`` for ``cdef``; raise ConfigError on bad input."""
    text = raw.strip()
    try:
        value: Any
        if cdef.type in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
            value = int(text)
            limit = INT_MAX if cdef.type == ConfigType.INT else LONG_MAX
            if not -limit - 1 <= value <= limit:
                raise ConfigError("out of range")
        elif cdef.type == ConfigType.DOUBLE:
            value = float(text)
        elif cdef.type == ConfigType.BOOLEAN:
            low = text.lower()
            if low not in ("true", "false"):
                raise ConfigError("must be true or false")
            value = low == "true"
        elif cdef.type == ConfigType.LIST:
            value = [item.strip() for item in text.split(",") if item.strip()]
        else:
            value = text
        if cdef.validator is not None:
            cdef.validator(value)
    except ConfigError as e:
        raise ConfigError(f"Invalid value {raw!r} for configuration {cdef.name}: {e}") from None
    except ValueError:
        raise ConfigError(
            f"Invalid value {raw!r} for configuration {cdef.name}: "
            f"expected a value of type {cdef.type.name}"
        ) from None
    return value


def _defs(*items: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in items}


_H = 3_600_000
_M = 60_000

BROKER_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef("broker.id", ConfigType.INT, "0", "The broker id.", _at_least(0)),
    ConfigDef("log.dirs", ConfigType.STRING, "./dmq-data", "Directory holding the log data."),
    ConfigDef("listeners", ConfigType.STRING, "127.0.0.1:9092", "Address to listen on."),
    ConfigDef("advertised.listeners", ConfigType.STRING, None, "Address given to clients."),
    ConfigDef("metrics.listener", ConfigType.STRING, None, "HOST:PORT serving Prometheus metrics at /metrics (dmq's own); unset: not served."),
    ConfigDef("num.partitions", ConfigType.INT, "1", "Default partitions for new topics.", _at_least(1)),
    ConfigDef("default.replication.factor", ConfigType.SHORT, "1", "Default replication factor.", _at_least(1)),
    ConfigDef("auto.create.topics.enable", ConfigType.BOOLEAN, "true", "Create unknown topics on Metadata requests."),
    ConfigDef("delete.topic.enable", ConfigType.BOOLEAN, "true", "Allow deleting topics."),
    ConfigDef("message.max.bytes", ConfigType.INT, "1048588", "Largest record batch size allowed.", _at_least(0)),
    ConfigDef("socket.request.max.bytes", ConfigType.INT, "104857600", "Largest request size.", _at_least(1)),
    ConfigDef("log.segment.bytes", ConfigType.INT, "1073741824", "Segment file size.", _at_least(14)),
    ConfigDef("log.roll.ms", ConfigType.LONG, None, "Roll a segment after this long."),
    ConfigDef("log.roll.hours", ConfigType.INT, "168", "Roll a segment after this many hours.", _at_least(1)),
    ConfigDef("log.retention.ms", ConfigType.LONG, None, "Delete segments older than this."),
    ConfigDef("log.retention.minutes", ConfigType.INT, None, "Retention in minutes."),
    ConfigDef("log.retention.hours", ConfigType.INT, "168", "Retention in hours."),
    ConfigDef("log.retention.bytes", ConfigType.LONG, "-1", "Partition size before deleting old segments."),
    ConfigDef("log.retention.check.interval.ms", ConfigType.LONG, "300000", "How often retention runs.", _at_least(1)),
    ConfigDef("log.flush.interval.messages", ConfigType.LONG, str(LONG_MAX), "Flush after this many messages.", _at_least(1)),
    ConfigDef("log.flush.interval.ms", ConfigType.LONG, None, "Flush after this long."),
    ConfigDef("log.flush.scheduler.interval.ms", ConfigType.LONG, str(LONG_MAX), "How often to check flush.ms."),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", ConfigType.INT, "60000", "How often to write the recovery point.", _at_least(0)),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", ConfigType.INT, "60000", "How often to write log start offsets.", _at_least(0)),
    ConfigDef("log.index.interval.bytes", ConfigType.INT, "4096", "Bytes between offset index entries.", _at_least(0)),
    ConfigDef("log.index.size.max.bytes", ConfigType.INT, "10485760", "Accepted and ignored: indexes grow as their segment needs.", _at_least(4)),
    ConfigDef("log.roll.jitter.ms", ConfigType.LONG, None, "Most time a segment's roll may come before log.roll.ms (random per segment).", _at_least(0)),
    ConfigDef("log.roll.jitter.hours", ConfigType.INT, "0", "log.roll.jitter.ms in hours (when that is not set).", _at_least(0)),
    ConfigDef("log.message.timestamp.type", ConfigType.STRING, "CreateTime", "CreateTime or LogAppendTime.", _one_of("CreateTime", "LogAppendTime")),
    ConfigDef("log.message.timestamp.difference.max.ms", ConfigType.LONG, str(LONG_MAX), "[Deprecated] Largest difference between a CreateTime record's timestamp and the broker's clock (both ways) where the before/after limits are not set.", _at_least(0)),
    ConfigDef("log.message.timestamp.before.max.ms", ConfigType.LONG, str(LONG_MAX), "Farthest a CreateTime record's timestamp may lie in the past (INVALID_TIMESTAMP beyond).", _at_least(0)),
    ConfigDef("log.message.timestamp.after.max.ms", ConfigType.LONG, str(LONG_MAX), "Farthest a CreateTime record's timestamp may lie in the future (INVALID_TIMESTAMP beyond).", _at_least(0)),
    ConfigDef("log.cleanup.policy", ConfigType.LIST, "delete", "delete, compact or both.", _one_of("delete", "compact")),
    ConfigDef("log.cleaner.enable", ConfigType.BOOLEAN, "true", "Run the log cleaner for compacted topics."),
    ConfigDef("log.cleaner.backoff.ms", ConfigType.LONG, "15000", "Pause between cleaner passes.", _at_least(0)),
    ConfigDef("log.cleaner.dedupe.buffer.size", ConfigType.LONG, "134217728",
              "Bytes the cleaner's offset map of one pass may hold (each key: its length plus 120); "
              "a pass cleans up to where the map reached.", _at_least(1)),
    ConfigDef("log.cleaner.delete.retention.ms", ConfigType.LONG, "86400000", "How long tombstones are kept.", _at_least(0)),
    ConfigDef("log.cleaner.min.cleanable.ratio", ConfigType.DOUBLE, "0.5", "Dirty ratio that triggers cleaning.", _ratio),
    ConfigDef("log.cleaner.min.compaction.lag.ms", ConfigType.LONG, "0", "A record stays uncompacted at least this long.", _at_least(0)),
    ConfigDef("log.cleaner.max.compaction.lag.ms", ConfigType.LONG, str(LONG_MAX), "A record becomes eligible for compaction at most this long after it is written.", _at_least(1)),
    ConfigDef("log.key.index.enable", ConfigType.BOOLEAN, "true", "Build key indexes for message query in the background (dmq's own)."),
    ConfigDef("log.key.index.interval.ms", ConfigType.LONG, "1000", "How often an idle key indexer looks for new records (dmq's own).", _at_least(1)),
    ConfigDef("log.key.index.max.loop.share", ConfigType.DOUBLE, "0.5", "Share of the broker's event loop the key indexer may take while it is behind and the loop is otherwise idle; a tenth of it under load (dmq's own).", _ratio),
    ConfigDef("log.segment.delete.delay.ms", ConfigType.LONG, "60000", "How long a deleted or replaced segment stays readable to fetch answers that hold it.", _at_least(0)),
    ConfigDef("min.insync.replicas", ConfigType.INT, "1", "Minimum ISR size for acks=all.", _at_least(1)),
    ConfigDef("delayed.delivery.enable", ConfigType.BOOLEAN, "true", "Honour the dmq-delay-ms and dmq-deliver-at record headers."),
    ConfigDef("delayed.delivery.max.ms", ConfigType.LONG, "259200000", "Longest delay a record may ask for (3 days, as RocketMQ).", _at_least(0)),
    ConfigDef("compression.type", ConfigType.STRING, "producer", "Accepted and ignored: batches are stored as the producer compressed them (no recompression).", _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
    ConfigDef("unclean.leader.election.enable", ConfigType.BOOLEAN, "false", "Allow out-of-ISR leaders."),
    ConfigDef("offsets.topic.num.partitions", ConfigType.INT, "50", "Partitions of __consumer_offsets.", _at_least(1)),
    ConfigDef("offsets.topic.segment.bytes", ConfigType.INT, "104857600", "Segment size of __consumer_offsets.", _at_least(1)),
    ConfigDef("offsets.retention.minutes", ConfigType.INT, "10080", "Keep offsets of empty groups this long.", _at_least(1)),
    ConfigDef("offsets.retention.check.interval.ms", ConfigType.LONG, "600000", "How often expired offsets are removed.", _at_least(1)),
    ConfigDef("offset.metadata.max.bytes", ConfigType.INT, "4096", "Largest metadata string of a commit.", _at_least(0)),
    ConfigDef("group.min.session.timeout.ms", ConfigType.INT, "6000", "Smallest session timeout a member may ask for.", _at_least(0)),
    ConfigDef("group.max.session.timeout.ms", ConfigType.INT, "1800000", "Largest session timeout a member may ask for.", _at_least(0)),
    ConfigDef("group.initial.rebalance.delay.ms", ConfigType.INT, "3000", "How long the first rebalance of an empty group waits for more members.", _at_least(0)),
    ConfigDef("group.max.size", ConfigType.INT, str(INT_MAX), "Most members in one group.", _at_least(1)),
    ConfigDef("group.share.session.timeout.ms", ConfigType.INT, "45000", "Share groups: a member that does not heartbeat for this long is fenced.", _at_least(1)),
    ConfigDef("group.share.heartbeat.interval.ms", ConfigType.INT, "5000", "Share groups: how often members are told to heartbeat.", _at_least(1)),
    ConfigDef("group.share.max.size", ConfigType.INT, "200", "Share groups: most members in one group.", _between(1, 1000)),
    ConfigDef("group.share.record.lock.duration.ms", ConfigType.INT, "30000", "Share groups: how long a delivered record stays acquired by its member.", _between(1000, 3_600_000)),
    ConfigDef("group.share.delivery.count.limit", ConfigType.INT, "5", "Share groups: deliveries of a record before it is archived.", _between(2, 10)),
    ConfigDef("group.share.partition.max.record.locks", ConfigType.INT, "2000", "Share groups: most records in flight (acquired) per share partition.", _between(100, 10_000)),
    ConfigDef("group.share.min.session.timeout.ms", ConfigType.INT, "45000", "Share groups: smallest share.session.timeout.ms a group may set.", _at_least(1)),
    ConfigDef("group.share.max.session.timeout.ms", ConfigType.INT, "60000", "Share groups: largest share.session.timeout.ms a group may set.", _at_least(1)),
    ConfigDef("group.share.min.heartbeat.interval.ms", ConfigType.INT, "5000", "Share groups: smallest share.heartbeat.interval.ms a group may set.", _at_least(1)),
    ConfigDef("group.share.max.heartbeat.interval.ms", ConfigType.INT, "15000", "Share groups: largest share.heartbeat.interval.ms a group may set.", _at_least(1)),
    ConfigDef("group.share.min.record.lock.duration.ms", ConfigType.INT, "15000", "Share groups: smallest share.record.lock.duration.ms a group may set.", _between(1000, 30_000)),
    ConfigDef("group.share.max.record.lock.duration.ms", ConfigType.INT, "60000", "Share groups: largest share.record.lock.duration.ms a group may set.", _between(30_000, 3_600_000)),
    ConfigDef("group.share.min.delivery.count.limit", ConfigType.INT, "2", "Share groups: smallest share.delivery.count.limit a group may set.", _between(2, 5)),
    ConfigDef("group.share.max.delivery.count.limit", ConfigType.INT, "10", "Share groups: largest share.delivery.count.limit a group may set.", _between(5, 25)),
    ConfigDef("group.share.max.share.sessions", ConfigType.INT, "2000", "Share groups: most share sessions a broker keeps.", _at_least(1)),
    ConfigDef("producer.id.expiration.ms", ConfigType.INT, "86400000", "Idle time before a producer id's state expires.", _at_least(1)),
    ConfigDef("producer.id.expiration.check.interval.ms", ConfigType.INT, "600000", "How often idle producer state is removed.", _at_least(1)),
    ConfigDef("max.connections", ConfigType.INT, str(INT_MAX), "Most client connections at once.", _at_least(0)),
    ConfigDef("authorizer.class.name", ConfigType.CLASS, "", "The authorizer: kafka.security.authorizer.AclAuthorizer (ACLs, docs/security.md); empty: no authorization."),
    ConfigDef("super.users", ConfigType.STRING, None, "Principals every ACL check allows, separated by ';' (User:admin;User:broker)."),
    ConfigDef("allow.everyone.if.no.acl.found", ConfigType.BOOLEAN, "false", "Allow what no ACL covers (a resource without ACLs); false: deny it."),
    ConfigDef("zookeeper.connect", ConfigType.STRING, None, "HOST:PORT[,HOST:PORT...][/chroot] of ZooKeeper; unset runs one broker with embedded metadata."),
    ConfigDef("zookeeper.session.timeout.ms", ConfigType.INT, "6000", "ZooKeeper session timeout: how long a silent broker keeps its registration (Kafka's pre-2.5 default, so failover stays under 10 s).", _at_least(1000)),
    ConfigDef("zookeeper.connection.timeout.ms", ConfigType.INT, None, "How long to wait for the first ZooKeeper connection (default: the session timeout)."),
    ConfigDef("broker.rack", ConfigType.STRING, None, "Rack of this broker, for rack-aware replica assignment."),
    ConfigDef("replica.lag.time.max.ms", ConfigType.LONG, "30000", "A follower that has not caught up for this long leaves the ISR.", _at_least(1)),
    ConfigDef("replica.fetch.wait.max.ms", ConfigType.INT, "500", "Longest wait of a follower's fetch.", _at_least(0)),
    ConfigDef("replica.fetch.min.bytes", ConfigType.INT, "1", "Bytes a follower's fetch waits for.", _at_least(1)),
    ConfigDef("replica.fetch.max.bytes", ConfigType.INT, "1048576", "Bytes per partition in a follower's fetch.", _at_least(0)),
    ConfigDef("replica.fetch.response.max.bytes", ConfigType.INT, "10485760", "Bytes in a follower's fetch response.", _at_least(0)),
    ConfigDef("max.incremental.fetch.session.cache.slots", ConfigType.INT, "1000", "Most fetch sessions (KIP-227) a broker keeps; 0: every fetch is a full one.", _at_least(0)),
    ConfigDef("replica.fetch.backoff.ms", ConfigType.INT, "1000", "Pause after a failed follower fetch.", _at_least(0)),
    ConfigDef("replica.socket.timeout.ms", ConfigType.INT, "30000", "Socket timeout of follower fetches.", _at_least(1)),
    ConfigDef("controlled.shutdown.enable", ConfigType.BOOLEAN, "true", "Move leadership away before a clean shutdown."),
    ConfigDef("controlled.shutdown.max.retries", ConfigType.INT, "3", "Attempts at controlled shutdown.", _at_least(0)),
    ConfigDef("controlled.shutdown.retry.backoff.ms", ConfigType.LONG, "5000", "Pause between controlled shutdown attempts.", _at_least(0)),
    ConfigDef("auto.leader.rebalance.enable", ConfigType.BOOLEAN, "true", "Move leadership back to preferred replicas."),
    ConfigDef("leader.imbalance.check.interval.seconds", ConfigType.LONG, "300", "How often the controller checks leader balance.", _at_least(1)),
    ConfigDef("leader.imbalance.per.broker.percentage", ConfigType.INT, "10", "Imbalance per broker that triggers preferred elections.", _at_least(0)),
    ConfigDef("offsets.topic.replication.factor", ConfigType.SHORT, "3", "Replication factor of __consumer_offsets (capped at the live brokers).", _at_least(1)),
    ConfigDef("offsets.commit.timeout.ms", ConfigType.INT, "5000", "How long an offset commit waits for the ISR.", _at_least(1)),
    ConfigDef("transaction.state.log.num.partitions", ConfigType.INT, "50", "Partitions of __transaction_state.", _at_least(1)),
    ConfigDef("transaction.state.log.replication.factor", ConfigType.SHORT, "3", "Replication factor of __transaction_state (capped at the live brokers).", _at_least(1)),
    ConfigDef("transaction.state.log.min.isr", ConfigType.INT, "2", "min.insync.replicas of __transaction_state.", _at_least(1)),
    ConfigDef("transaction.state.log.segment.bytes", ConfigType.INT, "104857600", "Segment size of __transaction_state.", _at_least(1)),
    ConfigDef("share.coordinator.state.topic.num.partitions", ConfigType.INT, "50", "Partitions of __share_group_state.", _at_least(1)),
    ConfigDef("share.coordinator.state.topic.replication.factor", ConfigType.SHORT, "3", "Replication factor of __share_group_state (capped at the live brokers).", _at_least(1)),
    ConfigDef("share.coordinator.state.topic.min.isr", ConfigType.SHORT, "2", "min.insync.replicas of __share_group_state.", _at_least(1)),
    ConfigDef("share.coordinator.state.topic.segment.bytes", ConfigType.INT, "104857600", "Segment size of __share_group_state.", _at_least(1)),
    ConfigDef("transaction.partition.verification.enable", ConfigType.BOOLEAN, "true", "Before a producer's first transactional batch on a partition, ask its transaction coordinator whether the partition is in the ongoing transaction (KIP-890); a late batch of an ended transaction is refused."),
    ConfigDef("transaction.max.timeout.ms", ConfigType.INT, "900000", "Largest transaction.timeout.ms a producer may ask for.", _at_least(1)),
    ConfigDef("transactional.id.expiration.ms", ConfigType.INT, "604800000", "A transactional id idle this long is forgotten.", _at_least(1)),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", ConfigType.INT, "10000", "How often transactions past their timeout are aborted.", _at_least(1)),
    ConfigDef("transaction.check.delay.ms", ConfigType.INT, "6000", "Half messages: how long after its transaction began the first check-back is due (RocketMQ's transactionTimeOut).", _at_least(0)),
    ConfigDef("transaction.check.interval.ms", ConfigType.INT, "60000", "Half messages: time between check-backs of one transaction.", _at_least(1)),
    ConfigDef("transaction.check.max", ConfigType.INT, "15", "Half messages: checks made before the transaction is rolled back.", _at_least(1)),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", ConfigType.INT, "3600000", "How often expired transactional ids are removed.", _at_least(1)),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", ConfigType.LONG, "5000", "How often high watermarks are saved to replication-offset-checkpoint.", _at_least(1)),
    ConfigDef("follower.replication.throttled.rate", ConfigType.LONG, str(LONG_MAX), "Bytes/s a follower fetches for throttled (reassigning) replicas; dynamic.", _at_least(1)),
    ConfigDef("leader.replication.throttled.rate", ConfigType.LONG, str(LONG_MAX), "Accepted and ignored (dmq throttles replication on the follower side only, with follower.replication.throttled.rate); dynamic.", _at_least(1)),
    # Security (listeners, TLS, SASL): Kafka's names and defaults; see docs/security.md.
    ConfigDef("listener.security.protocol.map", ConfigType.STRING, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", "Listener name -> security protocol (NAME:PROTOCOL,...)."),
    ConfigDef("inter.broker.listener.name", ConfigType.STRING, None, "The listener brokers use to talk to each other (default: the one of security.inter.broker.protocol)."),
    ConfigDef("security.inter.broker.protocol", ConfigType.STRING, "PLAINTEXT", "Security protocol between brokers.", _one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    ConfigDef("sasl.enabled.mechanisms", ConfigType.LIST, "GSSAPI", "SASL mechanisms a SASL listener offers (dmq: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)."),
    ConfigDef("sasl.mechanism.inter.broker.protocol", ConfigType.STRING, "GSSAPI", "SASL mechanism brokers use with each other."),
    ConfigDef("sasl.server.max.receive.size", ConfigType.INT, "524288", "Largest request accepted before authentication.", _at_least(1)),
    ConfigDef("connections.max.reauth.ms", ConfigType.LONG, "0", "Longest SASL session before the client must re-authenticate (0: never, KIP-368).", _at_least(0)),
    ConfigDef("ssl.keystore.type", ConfigType.STRING, "JKS", "Format of the key store (dmq reads PEM only).", _one_of("JKS", "PKCS12", "PEM")),
    ConfigDef("ssl.keystore.location", ConfigType.STRING, None, "PEM file with the broker's private key and certificate chain."),
    ConfigDef("ssl.keystore.password", ConfigType.PASSWORD, None, "Password of the key store (PEM: unused)."),
    ConfigDef("ssl.key.password", ConfigType.PASSWORD, None, "Password of the private key in the key store."),
    ConfigDef("ssl.truststore.type", ConfigType.STRING, "JKS", "Format of the trust store (dmq reads PEM only).", _one_of("JKS", "PKCS12", "PEM")),
    ConfigDef("ssl.truststore.location", ConfigType.STRING, None, "PEM file with the trusted CA certificates."),
    ConfigDef("ssl.truststore.password", ConfigType.PASSWORD, None, "Password of the trust store (PEM: unused)."),
    ConfigDef("ssl.client.auth", ConfigType.STRING, "none", "Client certificates on SSL listeners: none, requested or required.", _one_of("none", "requested", "required")),
    ConfigDef("ssl.enabled.protocols", ConfigType.LIST, "TLSv1.2,TLSv1.3", "TLS versions accepted (TLSv1.2 and later only).", _one_of("TLSv1.2", "TLSv1.3")),
    ConfigDef("ssl.endpoint.identification.algorithm", ConfigType.STRING, "https", "https: brokers check the peer broker's host name against its certificate; empty: not."),
    # ZooKeeper over TLS (KIP-515's names); PEM files only.
    ConfigDef("zookeeper.ssl.client.enable", ConfigType.BOOLEAN, "false", "Connect to ZooKeeper over TLS."),
    ConfigDef("zookeeper.clientCnxnSocket", ConfigType.STRING, None, "Kafka's ZooKeeper socket class (ClientCnxnSocketNetty for TLS); dmq needs none."),
    ConfigDef("zookeeper.ssl.keystore.location", ConfigType.STRING, None, "PEM file with the broker's key and certificate for ZooKeeper's TLS."),
    ConfigDef("zookeeper.ssl.keystore.password", ConfigType.PASSWORD, None, "Password of the key in zookeeper.ssl.keystore.location."),
    ConfigDef("zookeeper.ssl.keystore.type", ConfigType.STRING, None, "PEM (the only format dmq reads).", _one_of("PEM")),
    ConfigDef("zookeeper.ssl.truststore.location", ConfigType.STRING, None, "PEM file with the CAs of ZooKeeper's certificate."),
    ConfigDef("zookeeper.ssl.truststore.password", ConfigType.PASSWORD, None, "Password of the trust store (PEM: unused)."),
    ConfigDef("zookeeper.ssl.truststore.type", ConfigType.STRING, None, "PEM (the only format dmq reads).", _one_of("PEM")),
    ConfigDef("zookeeper.ssl.endpoint.identification.enable", ConfigType.BOOLEAN, "true", "Check ZooKeeper's host name against its certificate."),
    ConfigDef("zookeeper.set.acl", ConfigType.BOOLEAN, "false", "Create znodes with ACLs: the broker's SASL identity may change them, everyone else only read them (nothing under /config/users and /config/brokers)."),
    # dmq's own: Kafka reads this login from the JVM's JAAS file (its Client section).
    ConfigDef("zookeeper.sasl.jaas.config", ConfigType.PASSWORD, None, "SASL (DIGEST-MD5) login to ZooKeeper: 'org.apache.zookeeper.server.auth.DigestLoginModule required username=\"...\" password=\"...\";' (the JAAS Client section's entry)."),
)

# Broker configs that AlterConfigs/IncrementalAlterConfigs may change at runtime, per
# broker or as the cluster default, like Kafka's dynamic broker configs. Everything else
# is read once at startup.
DYNAMIC_BROKER_CONFIGS = frozenset({"follower.replication.throttled.rate", "leader.replication.throttled.rate"})

TOPIC_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef("cleanup.policy", ConfigType.LIST, "delete", "delete, compact or both.", _one_of("delete", "compact"), (("log.cleanup.policy", 1),)),
    ConfigDef("compression.type", ConfigType.STRING, "producer", "Accepted and ignored: batches are stored as the producer compressed them (no recompression).", _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), (("compression.type", 1),)),
    ConfigDef("delayed.delivery.enable", ConfigType.BOOLEAN, "true", "Honour the dmq-delay-ms and dmq-deliver-at record headers.", None, (("delayed.delivery.enable", 1),)),
    ConfigDef("delayed.delivery.max.ms", ConfigType.LONG, "259200000", "Longest delay a record may ask for.", _at_least(0), (("delayed.delivery.max.ms", 1),)),
    ConfigDef("delete.retention.ms", ConfigType.LONG, "86400000", "How long tombstones are kept.", _at_least(0), (("log.cleaner.delete.retention.ms", 1),)),
    ConfigDef("file.delete.delay.ms", ConfigType.LONG, "60000", "How long a deleted or replaced segment stays readable to fetch answers that hold it.", _at_least(0), (("log.segment.delete.delay.ms", 1),)),
    ConfigDef("flush.messages", ConfigType.LONG, str(LONG_MAX), "Flush after this many messages.", _at_least(1), (("log.flush.interval.messages", 1),)),
    ConfigDef("flush.ms", ConfigType.LONG, str(LONG_MAX), "Flush after this long.", _at_least(0), (("log.flush.interval.ms", 1),)),
    ConfigDef("index.interval.bytes", ConfigType.INT, "4096", "Bytes between offset index entries.", _at_least(0), (("log.index.interval.bytes", 1),)),
    ConfigDef("max.message.bytes", ConfigType.INT, "1048588", "Largest record batch size allowed.", _at_least(0), (("message.max.bytes", 1),)),
    ConfigDef("message.timestamp.type", ConfigType.STRING, "CreateTime", "CreateTime or LogAppendTime.", _one_of("CreateTime", "LogAppendTime"), (("log.message.timestamp.type", 1),)),
    ConfigDef("min.cleanable.dirty.ratio", ConfigType.DOUBLE, "0.5", "Dirty ratio that triggers cleaning.", _ratio, (("log.cleaner.min.cleanable.ratio", 1),)),
    ConfigDef("min.insync.replicas", ConfigType.INT, "1", "Minimum ISR size for acks=all.", _at_least(1), (("min.insync.replicas", 1),)),
    ConfigDef("retention.bytes", ConfigType.LONG, "-1", "Partition size before deleting old segments.", None, (("log.retention.bytes", 1),)),
    ConfigDef("retention.ms", ConfigType.LONG, "604800000", "Delete segments older than this (-1: never).", _at_least(-1), (("log.retention.ms", 1), ("log.retention.minutes", _M), ("log.retention.hours", _H))),
    ConfigDef("segment.bytes", ConfigType.INT, "1073741824", "Segment file size.", _at_least(14), (("log.segment.bytes", 1),)),
    ConfigDef("segment.index.bytes", ConfigType.INT, "10485760", "Accepted and ignored: indexes grow as their segment needs.", _at_least(4), (("log.index.size.max.bytes", 1),)),
    ConfigDef("segment.ms", ConfigType.LONG, "604800000", "Roll a segment after this long.", _at_least(1), (("log.roll.ms", 1), ("log.roll.hours", _H))),
    ConfigDef("unclean.leader.election.enable", ConfigType.BOOLEAN, "false", "Allow out-of-ISR leaders.", None, (("unclean.leader.election.enable", 1),)),
    ConfigDef("segment.jitter.ms", ConfigType.LONG, "0", "Most time a segment's roll may come before segment.ms (random per segment).", _at_least(0), (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _H))),
    ConfigDef("min.compaction.lag.ms", ConfigType.LONG, "0", "A record stays uncompacted at least this long.", _at_least(0), (("log.cleaner.min.compaction.lag.ms", 1),)),
    ConfigDef("max.compaction.lag.ms", ConfigType.LONG, str(LONG_MAX), "A record becomes eligible for compaction at most this long after it is written.", _at_least(1), (("log.cleaner.max.compaction.lag.ms", 1),)),
    ConfigDef("message.timestamp.difference.max.ms", ConfigType.LONG, str(LONG_MAX), "[Deprecated] Largest difference between a CreateTime record's timestamp and the broker's clock (both ways) where the before/after limits are not set.", _at_least(0), (("log.message.timestamp.difference.max.ms", 1),)),
    ConfigDef("message.timestamp.before.max.ms", ConfigType.LONG, str(LONG_MAX), "Farthest a CreateTime record's timestamp may lie in the past (INVALID_TIMESTAMP beyond).", _at_least(0), (("log.message.timestamp.before.max.ms", 1),)),
    ConfigDef("message.timestamp.after.max.ms", ConfigType.LONG, str(LONG_MAX), "Farthest a CreateTime record's timestamp may lie in the future (INVALID_TIMESTAMP beyond).", _at_least(0), (("log.message.timestamp.after.max.ms", 1),)),
    # Accepted for Kafka's tools and clients, and ignored (README, "Topic configs"):
    ConfigDef("preallocate", ConfigType.BOOLEAN, "false", "Accepted and ignored: dmq does not preallocate segment files."),
    ConfigDef("message.downconversion.enable", ConfigType.BOOLEAN, "true", "Accepted and ignored: dmq serves Fetch v4 and later only, which never needs down-conversion."),
    ConfigDef("compression.gzip.level", ConfigType.INT, "-1", "The gzip level batches are recompressed with (compression.type=gzip; -1: the codec's default).", _gzip_level),
    ConfigDef("compression.lz4.level", ConfigType.INT, "9", "The lz4 level batches are recompressed with (compression.type=lz4).", _between(1, 17)),
    ConfigDef("compression.zstd.level", ConfigType.INT, "3", "The zstd level batches are recompressed with (compression.type=zstd).", _between(-131072, 22)),
    ConfigDef("leader.replication.throttled.replicas", ConfigType.LIST, "", "Accepted and ignored: dmq has no leader-side replication throttle.", _throttled_replicas),
    ConfigDef("follower.replication.throttled.replicas", ConfigType.LIST, "", "Accepted and ignored: dmq's follower throttle applies to the replicas a reassignment adds, listed or not.", _throttled_replicas),
    ConfigDef("remote.storage.enable", ConfigType.BOOLEAN, "false", "Tiered storage: dmq has none; only false is accepted.", _no_remote_storage),
    ConfigDef("remote.log.copy.disable", ConfigType.BOOLEAN, "false", "Accepted and ignored: applies to tiered storage only."),
    ConfigDef("remote.log.delete.on.disable", ConfigType.BOOLEAN, "false", "Accepted and ignored: applies to tiered storage only."),
    ConfigDef("local.retention.ms", ConfigType.LONG, "-2", "Accepted and ignored: applies to tiered storage only.", _at_least(-2)),
    ConfigDef("local.retention.bytes", ConfigType.LONG, "-2", "Accepted and ignored: applies to tiered storage only.", _at_least(-2)),
)

# Topic configs dmq accepts (so that Kafka's tools, MirrorMaker 2 and clients can set and
# remove them) and ignores: what each would do cannot happen here. Listed in the README.
IGNORED_TOPIC_CONFIGS = frozenset({
    "preallocate", "message.downconversion.enable", "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas", "remote.log.copy.disable", "remote.log.delete.on.disable",
    "local.retention.ms", "local.retention.bytes", "segment.index.bytes"})


_ISO_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?=\d)(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:[.,]\d{1,9})?)S)?)?",
    re.IGNORECASE)
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
BY_DURATION = "by_duration:"


def iso_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration as Java's ``Duration.parse`` reads it
    (``PnDTnHnMn.nS``, no sign: a negative duration is refused); ValueError otherwise."""
    m = _ISO_DURATION.fullmatch(text.strip())
    if m is None or text.strip().upper() in ("P", "PT") or not any(m.groupdict().values()):
        raise ValueError(f"{text!r} is not an ISO-8601 duration (PnDTnHnMn.nS)")
    days, hours, minutes = (int(m.group(k) or 0) for k in "dhm")
    seconds = float((m.group("s") or "0").replace(",", "."))
    return ((days * 24 + hours) * 60 + minutes) * 60_000 + int(round(seconds * 1000))


def _reset_strategy(v: Any) -> None:
    """share.auto.offset.reset: latest, earliest or by_duration:<ISO-8601 duration>."""
    if v in ("latest", "earliest"):
        return
    if isinstance(v, str) and v.startswith(BY_DURATION):
        try:
            iso_duration_ms(v[len(BY_DURATION):])
            return
        except ValueError as e:
            raise ConfigError(str(e)) from None
    raise ConfigError("must be latest, earliest or by_duration:<ISO-8601 duration>")


def _dead_letter_topic(v: Any) -> None:
    if v == "":
        return
    if not _LEGAL_TOPIC.fullmatch(v) or v in (".", ".."):
        raise ConfigError("must be a legal topic name (ASCII alphanumerics, '.', '_' and '-', at most 249)")
    if v.startswith("__"):
        raise ConfigError("must not be an internal topic")


# Group configs (IncrementalAlterConfigs/DescribeConfigs of a GROUP resource), Kafka's
# names: a group without an override takes the broker config named in the synonym (its
# ``group.share.*``). share.dead.letter.topic is dmq's (docs/share-groups.md).
GROUP_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef("share.session.timeout.ms", ConfigType.INT, None, "The timeout to detect client failures when using the share group protocol.", _at_least(1), (("group.share.session.timeout.ms", 1),)),
    ConfigDef("share.heartbeat.interval.ms", ConfigType.INT, None, "The heartbeat interval given to the members of a share group.", _at_least(1), (("group.share.heartbeat.interval.ms", 1),)),
    ConfigDef("share.record.lock.duration.ms", ConfigType.INT, None, "The record acquisition lock duration in milliseconds for share groups.", _at_least(1000), (("group.share.record.lock.duration.ms", 1),)),
    ConfigDef("share.delivery.count.limit", ConfigType.INT, None, "The maximum number of delivery attempts for a record delivered to a share group.", _at_least(2), (("group.share.delivery.count.limit", 1),)),
    ConfigDef("share.auto.offset.reset", ConfigType.STRING, "latest", "The strategy to initialize the share-partition start offset: earliest, latest, or by_duration:<ISO-8601 duration> (the first record at or after now less the duration).", _reset_strategy),
    ConfigDef("share.isolation.level", ConfigType.STRING, "read_uncommitted", "read_committed: deliver only records of committed transactions; read_uncommitted: every record.", _one_of("read_committed", "read_uncommitted")),
    ConfigDef("share.dead.letter.topic", ConfigType.STRING, "", "dmq: the topic records a REJECT archives, or that reach the delivery count limit, are written to (created if missing; empty: none).", _dead_letter_topic),
)

# group config -> (broker config of its smallest value, of its largest)
_GROUP_CONFIG_BOUNDS = {
    "share.session.timeout.ms": ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": ("group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"),
    "share.delivery.count.limit": ("group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
}


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-properties style ``key=value`` lines (``#``/``!`` comments)."""
    out: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        sep = min((i for i in (stripped.find("="), stripped.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise ConfigError(f"line {lineno}: expected key=value, got {stripped!r}")
        out[stripped[:sep].strip()] = stripped[sep + 1 :].strip()
    return out


class BrokerConfig:
    """Static broker configuration: Kafka defaults overlaid by file and overrides.

    Unknown keys are kept (and reported once at startup) so that a Kafka
    ``server.properties`` can be reused as it is.
    """

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        self.explicit: dict[str, str] = {}
        self.values: dict[str, Any] = {}
        self.unknown: list[str] = []
        # Dynamic layers (DYNAMIC_BROKER_CONFIGS only): this broker's, then the cluster default.
        self.dynamic: dict[str, str] = {}
        self.dynamic_default: dict[str, str] = {}
        for name, cdef in BROKER_CONFIGS.items():
            self.values[name] = None if cdef.default is None else parse_value(cdef, cdef.default)
        for key, raw in (props or {}).items():
            self.set(key, raw)

    def set(self, key: str, raw: str) -> None:
        if key == "node.id":
            key = "broker.id"
        cdef = BROKER_CONFIGS.get(key)
        if cdef is None:
            if not key.startswith(LISTENER_PREFIX):  # per-listener configs: read by listener_config
                self.unknown.append(key)
            self.explicit[key] = raw
            return
        self.values[key] = parse_value(cdef, raw)
        self.explicit[key] = raw

    def get(self, key: str) -> Any:
        return self.values[key]

    def apply_dynamic(self, per_broker: Mapping[str, str], default: Mapping[str, str]) -> list[str]:
        """Overlay dynamic configs (this broker's over the cluster default over static).

        Names outside DYNAMIC_BROKER_CONFIGS and bad values are skipped, so one bad
        znode cannot stop a broker; returns the names whose effective value changed.
        """
        changed = []
        self.dynamic = {k: v for k, v in per_broker.items() if k in DYNAMIC_BROKER_CONFIGS}
        self.dynamic_default = {k: v for k, v in default.items() if k in DYNAMIC_BROKER_CONFIGS}
        for name in DYNAMIC_BROKER_CONFIGS:
            cdef = BROKER_CONFIGS[name]
            value = None
            for layer in (self.dynamic, self.dynamic_default, self.explicit, {name: cdef.default}):
                raw = layer.get(name)
                if raw is None:
                    continue
                try:
                    value = parse_value(cdef, raw)
                    break
                except ConfigError:
                    layer.pop(name, None)  # unusable: fall through to the next layer
            if value != self.values[name]:
                self.values[name] = value
                changed.append(name)
        return changed

    def source(self, name: str) -> ConfigSource:
        if name in self.dynamic:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if name in self.dynamic_default:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        if name in self.explicit:
            return ConfigSource.STATIC_BROKER_CONFIG
        return ConfigSource.DEFAULT_CONFIG

    def synonyms(self, name: str) -> list[tuple[str, str, ConfigSource]]:
        """Every layer that sets ``name``, strongest first (DescribeConfigs synonyms)."""
        cdef = BROKER_CONFIGS[name]
        out = []
        for layer, source in ((self.dynamic, ConfigSource.DYNAMIC_BROKER_CONFIG),
                              (self.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                              (self.explicit, ConfigSource.STATIC_BROKER_CONFIG)):
            if name in layer:
                out.append((name, layer[name], source))
        if cdef.default is not None:
            out.append((name, cdef.default, ConfigSource.DEFAULT_CONFIG))
        return out

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def topic_default(self, name: str) -> tuple[Any, ConfigSource, list[tuple[str, str, ConfigSource]]]:
        """Effective default of topic config ``name`` with its source and synonym chain."""
        cdef = TOPIC_CONFIGS[name]
        synonyms: list[tuple[str, str, ConfigSource]] = []
        chosen: tuple[Any, ConfigSource] | None = None
        for syn, factor in cdef.synonyms:
            if syn in self.explicit:
                raw_value = self.values[syn]
                value = raw_value * factor if factor != 1 else raw_value
                synonyms.append((syn, self.explicit[syn], ConfigSource.STATIC_BROKER_CONFIG))
                if chosen is None:
                    chosen = (value, ConfigSource.STATIC_BROKER_CONFIG)
        for syn, factor in cdef.synonyms:
            bdef = BROKER_CONFIGS.get(syn)
            if bdef is not None and bdef.default is not None and syn not in self.explicit:
                synonyms.append((syn, bdef.default, ConfigSource.DEFAULT_CONFIG))
                if chosen is None:
                    value = parse_value(bdef, bdef.default)
                    chosen = (value * factor if factor != 1 else value, ConfigSource.DEFAULT_CONFIG)
        if chosen is None:
            assert cdef.default is not None
            chosen = (parse_value(cdef, cdef.default), ConfigSource.DEFAULT_CONFIG)
        return chosen[0], chosen[1], synonyms


def validate_topic_configs(configs: Mapping[str, str | None], broker: BrokerConfig | None = None) -> dict[str, Any]:
    """Validate topic config overrides; raise ConfigError naming the bad key. With ``broker``,
    also the values together, with the broker's defaults for those not overridden (Kafka's
    LogConfig.validateValues: min.compaction.lag.ms <= max.compaction.lag.ms)."""
    out: dict[str, Any] = {}
    for key, raw in configs.items():
        cdef = TOPIC_CONFIGS.get(key)
        if cdef is None:
            raise ConfigError(f"Unknown topic config name: {key}")
        if raw is None:
            raise ConfigError(f"Null value not supported for topic config {key}")
        out[key] = parse_value(cdef, raw)
    if broker is not None:
        def value(name: str) -> Any:
            return out[name] if name in out else broker.topic_default(name)[0]
        low, high = value("min.compaction.lag.ms"), value("max.compaction.lag.ms")
        if low > high:
            raise ConfigError(f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                              f"max.compaction.lag.ms ({high})")
    return out


def validate_dynamic_broker_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Validate dynamic broker config overrides; raise ConfigError naming the bad key."""
    out: dict[str, Any] = {}
    for key, raw in configs.items():
        if key not in DYNAMIC_BROKER_CONFIGS:
            if key in BROKER_CONFIGS:
                raise ConfigError(
                    f"Cannot update these configs dynamically: {key} is a static broker config in "
                    f"dmq; set it in the --config file or with --override and restart the broker. "
                    f"Dynamic broker configs: {', '.join(sorted(DYNAMIC_BROKER_CONFIGS))}")
            raise ConfigError(f"Unknown broker config name: {key}")
        if raw is None:
            raise ConfigError(f"Null value not supported for broker config {key}")
        out[key] = parse_value(BROKER_CONFIGS[key], raw)
    return out


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


_CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


class LogConfig:
    """Effective configuration of one topic's logs: topic overrides over broker defaults.

    Immutable once made (a change of the topic's configs makes a new one): its derived
    values are computed on first use and kept, as the append path reads several per
    produce."""

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, str] | None = None) -> None:
        self.broker = broker
        self.overrides: dict[str, str] = dict(overrides or {})
        parsed = validate_topic_configs(self.overrides)
        self._values: dict[str, Any] = {}
        for name in TOPIC_CONFIGS:
            self._values[name] = parsed[name] if name in parsed else broker.topic_default(name)[0]

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    @cached_property
    def segment_bytes(self) -> int:
        return int(self._values["segment.bytes"])

    @cached_property
    def file_delete_delay_s(self) -> float:
        """How long a deleted or replaced segment's descriptor stays open (file.delete.delay.ms)."""
        return int(self._values["file.delete.delay.ms"]) / 1000.0

    @cached_property
    def segment_ms(self) -> int:
        return int(self._values["segment.ms"])

    @cached_property
    def retention_ms(self) -> int:
        return int(self._values["retention.ms"])

    @cached_property
    def retention_bytes(self) -> int:
        return int(self._values["retention.bytes"])

    @cached_property
    def max_message_bytes(self) -> int:
        return int(self._values["max.message.bytes"])

    @cached_property
    def compression_codec(self) -> int | None:
        """The codec produced batches are stored with (compression.type: 0 uncompressed, 1
        gzip, 2 snappy, 3 lz4, 4 zstd); None for ``producer``: as the producer sent them."""
        return _CODECS.get(str(self._values["compression.type"]))

    @cached_property
    def compression_level(self) -> int | None:
        """The level of ``compression_codec`` (compression.gzip/lz4/zstd.level; None: the
        codec's default, or a codec without levels)."""
        name = str(self._values["compression.type"])
        if name not in ("gzip", "lz4", "zstd"):
            return None
        level = int(self._values[f"compression.{name}.level"])
        return None if name == "gzip" and level == -1 else level

    @cached_property
    def index_interval_bytes(self) -> int:
        return int(self._values["index.interval.bytes"])

    @cached_property
    def flush_messages(self) -> int:
        return int(self._values["flush.messages"])

    @cached_property
    def flush_ms(self) -> int:
        return int(self._values["flush.ms"])

    @cached_property
    def log_append_time(self) -> bool:
        return bool(self._values["message.timestamp.type"] == "LogAppendTime")

    @cached_property
    def timestamp_before_max_ms(self) -> int:
        """How far in the past a CreateTime record's timestamp may lie (Kafka's
        getMessageTimestampBeforeMaxMs: the deprecated difference limit where unset)."""
        before = int(self._values["message.timestamp.before.max.ms"])
        return before if before != LONG_MAX else int(self._values["message.timestamp.difference.max.ms"])

    @cached_property
    def timestamp_after_max_ms(self) -> int:
        """How far in the future a CreateTime record's timestamp may lie."""
        after = int(self._values["message.timestamp.after.max.ms"])
        return after if after != LONG_MAX else int(self._values["message.timestamp.difference.max.ms"])

    @cached_property
    def max_segment_ms(self) -> int:
        """segment.ms, capped at max.compaction.lag.ms on a compacted topic so that records
        leave the active segment (which is never cleaned) in time (Kafka's maxSegmentMs)."""
        if "compact" in self.cleanup_policy:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    def random_segment_jitter(self) -> int:
        """A new segment's roll jitter: random below min(segment.jitter.ms, segment.ms)
        (Kafka's randomSegmentJitter); its roll comes that much before segment.ms."""
        jitter = int(self._values["segment.jitter.ms"])
        return 0 if jitter == 0 else random.randrange(min(jitter, self.max_segment_ms))

    @cached_property
    def min_compaction_lag_ms(self) -> int:
        return int(self._values["min.compaction.lag.ms"])

    @cached_property
    def max_compaction_lag_ms(self) -> int:
        return int(self._values["max.compaction.lag.ms"])

    @cached_property
    def delayed_delivery_enable(self) -> bool:
        return bool(self._values["delayed.delivery.enable"])

    @cached_property
    def delayed_delivery_max_ms(self) -> int:
        return int(self._values["delayed.delivery.max.ms"])

    @cached_property
    def cleanup_policy(self) -> list[str]:
        return list(self._values["cleanup.policy"])

    def describe(self) -> Iterable[tuple[str, str, ConfigSource, list[tuple[str, str, ConfigSource]]]]:
        """(name, value, source, synonyms) for every topic config, as DescribeConfigs shows."""
        for name in TOPIC_CONFIGS:
            value, source, synonyms = self.broker.topic_default(name)
            if name in self.overrides:
                raw = format_value(self._values[name])
                synonyms = [(name, raw, ConfigSource.DYNAMIC_TOPIC_CONFIG), *synonyms]
                yield name, raw, ConfigSource.DYNAMIC_TOPIC_CONFIG, synonyms
            else:
                yield name, format_value(value), source, synonyms


def validate_group_configs(configs: Mapping[str, str | None], broker: BrokerConfig) -> dict[str, Any]:
    """Validate a group's config overrides as Kafka's GroupConfig does: known names, values
    of their type, each within the broker's ``group.share.min.*``/``max.*`` bounds, and a
    session timeout above the heartbeat interval (with the broker's values for the one not
    set). Raises ConfigError naming the config."""
    out: dict[str, Any] = {}
    for key, raw in configs.items():
        cdef = GROUP_CONFIGS.get(key)
        if cdef is None:
            raise ConfigError(f"Unknown group config name: {key}")
        if raw is None:
            raise ConfigError(f"Null value not supported for group config {key}")
        out[key] = parse_value(cdef, raw)
        bounds = _GROUP_CONFIG_BOUNDS.get(key)
        if bounds is not None:
            low, high = bounds
            if out[key] < broker[low]:
                raise ConfigError(f"{key} must be greater than or equal to {low} ({broker[low]})")
            if out[key] > broker[high]:
                raise ConfigError(f"{key} must be less than or equal to {high} ({broker[high]})")
    session = out.get("share.session.timeout.ms", broker["group.share.session.timeout.ms"])
    heartbeat = out.get("share.heartbeat.interval.ms", broker["group.share.heartbeat.interval.ms"])
    if ("share.session.timeout.ms" in out or "share.heartbeat.interval.ms" in out) and session <= heartbeat:
        raise ConfigError("share.session.timeout.ms must be greater than share.heartbeat.interval.ms")
    return out


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """A share group's effective configs: its overrides over the broker's ``group.share.*``."""
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    auto_offset_reset: str = "latest"  # latest, earliest or by_duration:<ISO-8601 duration>
    read_committed: bool = False
    dead_letter_topic: str | None = None

    @property
    def reset_by_duration_ms(self) -> int | None:
        """by_duration's duration in milliseconds; None for latest and earliest."""
        if self.auto_offset_reset.startswith(BY_DURATION):
            return iso_duration_ms(self.auto_offset_reset[len(BY_DURATION):])
        return None


def group_config_values(broker: BrokerConfig, overrides: Mapping[str, str]
                        ) -> dict[str, tuple[Any, ConfigSource, list[tuple[str, str, ConfigSource]]]]:
    """Every group config: (value, source, synonyms), as DescribeConfigs shows them. An
    override that no longer validates (the broker's bounds changed) is reported and used
    as it parses; one that does not parse falls back to the default."""
    out: dict[str, tuple[Any, ConfigSource, list[tuple[str, str, ConfigSource]]]] = {}
    for name, cdef in GROUP_CONFIGS.items():
        broker_synonyms = [(syn, broker.explicit.get(syn, format_value(broker[syn])), broker.source(syn))
                           for syn, _ in cdef.synonyms]
        default: Any = broker[cdef.synonyms[0][0]] if cdef.synonyms else parse_value(cdef, cdef.default or "")
        raw = overrides.get(name)
        if raw is not None:
            try:
                value = parse_value(cdef, raw)
            except ConfigError:
                value = None
            if value is not None:
                out[name] = (value, ConfigSource.GROUP_CONFIG,
                             [(name, format_value(value), ConfigSource.GROUP_CONFIG), *broker_synonyms])
                continue
        out[name] = (default, ConfigSource.DEFAULT_CONFIG,
                     [(name, format_value(default), ConfigSource.DEFAULT_CONFIG), *broker_synonyms])
    return out


def share_group_settings(broker: BrokerConfig, overrides: Mapping[str, str]) -> ShareGroupSettings:
    values = {name: v[0] for name, v in group_config_values(broker, overrides).items()}
    return ShareGroupSettings(
        session_timeout_ms=int(values["share.session.timeout.ms"]),
        heartbeat_interval_ms=int(values["share.heartbeat.interval.ms"]),
        record_lock_duration_ms=int(values["share.record.lock.duration.ms"]),
        delivery_count_limit=int(values["share.delivery.count.limit"]),
        auto_offset_reset=str(values["share.auto.offset.reset"]),
        read_committed=values["share.isolation.level"] == "read_committed",
        dead_letter_topic=str(values["share.dead.letter.topic"]) or None)


# ------------------------------------------------------------------ listeners

LISTENER_PREFIX = "listener.name."
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class ListenerEndpoint:
    """One entry of ``listeners``/``advertised.listeners``: its name (upper case), address
    and security protocol (from ``listener.security.protocol.map``)."""

    name: str
    host: str
    port: int
    security_protocol: str

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_endpoint(text: str, default_port: int = 9092) -> tuple[str, str, int]:
    """(listener name, host, port) of ``NAME://HOST:PORT`` or ``HOST:PORT`` (PLAINTEXT);
    an empty host is every interface. ValueError says what is wrong."""
    text = text.strip()
    name = "PLAINTEXT"
    scheme, sep, rest = text.partition("://")
    if sep:
        if not re.fullmatch(r"[A-Za-z0-9_]+", scheme):
            raise ValueError(f"invalid listener name in {text!r}")
        name, text = scheme.upper(), rest
        if name == "TCP":
            name = "PLAINTEXT"
    host, sep, port = text.rpartition(":")
    if not sep:
        return name, text, default_port
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid port in {text!r}: expected HOST:PORT")
    return name, host.strip("[]") or "0.0.0.0", int(port)


def security_protocol_map(config: BrokerConfig) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in str(config["listener.security.protocol.map"]).split(","):
        if not item.strip():
            continue
        name, sep, proto = item.partition(":")
        if not sep or proto.strip().upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid value {item.strip()!r} in listener.security.protocol.map: "
                              f"expected NAME:PROTOCOL with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        out[name.strip().upper()] = proto.strip().upper()
    return out


def listener_endpoints(config: BrokerConfig, key: str = "listeners") -> list[ListenerEndpoint]:
    """The endpoints of ``listeners`` (or ``advertised.listeners``), validated as Kafka does:
    each name once, each name in the protocol map. Raises ConfigError."""
    raw = config[key]
    if not raw:
        return []
    protocols = security_protocol_map(config)
    out: list[ListenerEndpoint] = []
    for item in str(raw).split(","):
        if not item.strip():
            continue
        try:
            name, host, port = parse_endpoint(item)
        except ValueError as e:
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: {e}") from None
        if name not in protocols:
            raise ConfigError(f"{key}: listener {name} has no security protocol in "
                              f"listener.security.protocol.map")
        if any(e.name == name for e in out):
            raise ConfigError(f"{key}: listener {name} appears more than once")
        out.append(ListenerEndpoint(name, host, port, protocols[name]))
    return out


def inter_broker_listener(config: BrokerConfig, endpoints: list[ListenerEndpoint]) -> ListenerEndpoint:
    """The listener brokers talk to each other on: ``inter.broker.listener.name``, else the
    first listener of ``security.inter.broker.protocol`` (else, for one broker alone, the
    first listener). Raises ConfigError."""
    name = config["inter.broker.listener.name"]
    if name:
        found = next((e for e in endpoints if e.name == str(name).upper()), None)
        if found is None:
            raise ConfigError(f"inter.broker.listener.name {name} is not one of the listeners "
                              f"({', '.join(e.name for e in endpoints)})")
        return found
    proto = str(config["security.inter.broker.protocol"])
    found = next((e for e in endpoints if e.security_protocol == proto), None)
    if found is None:
        if not config["zookeeper.connect"] and endpoints:
            return endpoints[0]
        raise ConfigError(f"no listener has security.inter.broker.protocol {proto}: set "
                          f"inter.broker.listener.name to one of the listeners")
    return found


def listener_config(config: BrokerConfig, listener: str, name: str) -> Any:
    """A config as one listener sees it: ``listener.name.<listener>.<name>`` over ``name``."""
    override = config.explicit.get(f"{LISTENER_PREFIX}{listener.lower()}.{name}")
    if override is not None:
        cdef = BROKER_CONFIGS.get(name)
        return parse_value(cdef, override) if cdef is not None else override
    return config.values.get(name)
