"""Retries and a dead-letter topic for a classic consumer group (RocketMQ's consumer retry).

A ``RetryingConsumer`` is a confluent-kafka consumer of a group that also reads
the group's retry topic. The application takes each record with ``poll()`` and
says how it went:

- ``ack(record)``: done;
- ``retry(record, reason)``: consume it again later. The record goes to the
  retry topic ``<group>-retry`` with a ``dmq-delay-ms`` header from the backoff
  schedule (RocketMQ's: 10 s, 30 s, 1 min, 2 min, ... 2 h), so the broker's
  delayed delivery (docs/delayed-delivery.md) hands it back after the delay;
  after ``max.retries`` (16) it goes to the dead-letter topic ``<group>-dlq``
  instead, with its whole history.

Offsets: a record's offset is stored (and auto-committed, as
``enable.auto.offset.store=false`` does) only once it is acked or its copy in
the retry or dead-letter topic is acknowledged by the broker. A crash in
between consumes it again: at least once, never lost. Acks may come in any
order: the offset stored is the partition's lowest record polled and not yet
done (a later record's ack does not commit an earlier one). A retry-topic partition
the group has no committed offset for is read from its beginning, whatever
``auto.offset.reset`` says (as RocketMQ starts a %RETRY% queue at 0): copies
delivered while no member read it are not skipped.

Headers a retried record carries (the record's own headers are kept first):

    dmq-origin-topic / dmq-origin-partition / dmq-origin-offset   where it was first produced
    dmq-retry-count        attempts failed so far
    dmq-retry-history      one per failed attempt, the newest 8: "<epoch ms> <reason>" (200
                           characters of it); fewer when the record would be too large
    dmq-delay-ms           the wait before the next attempt (retry topic only)

``dmq retry redrive --group G`` (``redrive``) puts dead letters back into their
origin topics. Threads: one consumer, one thread, as confluent-kafka's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

log = logging.getLogger("dmq.client.retrying")

ORIGIN_TOPIC = "dmq-origin-topic"
ORIGIN_PARTITION = "dmq-origin-partition"
ORIGIN_OFFSET = "dmq-origin-offset"
RETRY_COUNT = "dmq-retry-count"
RETRY_HISTORY = "dmq-retry-history"
DELAY_MS = "dmq-delay-ms"
OWN_HEADERS = (ORIGIN_TOPIC, ORIGIN_PARTITION, ORIGIN_OFFSET, RETRY_COUNT, RETRY_HISTORY, DELAY_MS)
HISTORY_MAX = 8  # the newest entries of the history a record carries
HISTORY_REASON_CHARS = 200  # of each reason
# A record too large for its target topic (librdkafka's own check or the broker's).
TOO_LARGE = (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE)

# RocketMQ's delay levels from the third on (a consumer's first retry waits 10 s): 16 retries.
ROCKETMQ_RETRY_DELAYS_MS = (10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
                            420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000,
                            7_200_000)
OWN_KEYS = ("max.retries", "retry.delays.ms", "retry.topic", "dead.letter.topic")


def retry_topic(group: str) -> str:
    return f"{group}-retry"


def dead_letter_topic(group: str) -> str:
    return f"{group}-dlq"


@dataclass
class Record:
    """A record as the application sees it: from its source topic, or back from the retry
    topic with ``topic``/``partition``/``offset`` of where it was first produced and
    ``retries`` attempts failed so far."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: int
    retries: int
    history: list[str] = field(default_factory=list)
    message: Any = field(default=None, repr=False)  # the confluent-kafka Message as read


def _header(headers: list[tuple[str, bytes]], name: str) -> bytes | None:
    found = [v for k, v in headers if k == name]
    return found[-1] if found else None


def _record(m: Any) -> Record:
    headers = [(k, v if v is not None else b"") for k, v in (m.headers() or [])]
    origin = _header(headers, ORIGIN_TOPIC)
    own = [(k, v) for k, v in headers if k not in OWN_HEADERS]
    ts = m.timestamp()[1]
    if origin is None:
        return Record(m.topic(), m.partition(), m.offset(), m.key(), m.value(), own, ts, 0, [], m)
    return Record(origin.decode(), int(_header(headers, ORIGIN_PARTITION) or b"-1"),
                  int(_header(headers, ORIGIN_OFFSET) or b"-1"), m.key(), m.value(), own, ts,
                  int(_header(headers, RETRY_COUNT) or b"0"),
                  [v.decode(errors="replace") for k, v in headers if k == RETRY_HISTORY], m)


class RetryingConsumer:
    """``config``: confluent-kafka consumer settings (``bootstrap.servers`` and ``group.id``
    required) plus ``max.retries`` (16), ``retry.delays.ms`` (a list; the last one repeats;
    RocketMQ's by default), ``retry.topic`` and ``dead.letter.topic`` (``<group>-retry`` and
    ``<group>-dlq``). Both topics are created when missing, with the broker's default partitions
    and replication factor."""

    def __init__(self, config: dict[str, Any]) -> None:
        own = {k: config[k] for k in OWN_KEYS if k in config}
        conf = {k: v for k, v in config.items() if k not in OWN_KEYS}
        if "group.id" not in conf or "bootstrap.servers" not in conf:
            raise ValueError("RetryingConsumer needs bootstrap.servers and group.id")
        self.group = str(conf["group.id"])
        self.max_retries = int(own.get("max.retries", 16))
        delays = own.get("retry.delays.ms", ROCKETMQ_RETRY_DELAYS_MS)
        if isinstance(delays, str):
            delays = [int(d) for d in delays.split(",") if d.strip()]
        self.delays = [int(d) for d in delays]
        if self.max_retries < 0 or not self.delays or min(self.delays) < 0:
            raise ValueError("max.retries must be >= 0 and retry.delays.ms a list of delays >= 0")
        self.retry_topic = str(own.get("retry.topic", retry_topic(self.group)))
        self.dead_letter_topic = str(own.get("dead.letter.topic", dead_letter_topic(self.group)))
        self.bootstrap = str(conf["bootstrap.servers"])
        conf.setdefault("enable.auto.offset.store", False)
        self.consumer = Consumer(conf)
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                                  "linger.ms": 5, **{k: v for k, v in conf.items()
                                                     if k.startswith(("security.", "sasl.", "ssl."))}})
        self._topics: list[str] = []
        # Per partition read: the offsets polled and not yet acked or retried, and the
        # offset stored last. What is stored is the lowest still in flight (RocketMQ commits
        # the lowest offset being consumed), so acking a later record does not commit an
        # earlier one still being worked on.
        self._in_flight: dict[tuple[str, int], set[int]] = {}
        self._done_upto: dict[tuple[str, int], int] = {}
        # The rebalance callbacks assign incrementally under the cooperative protocols.
        self._incremental = "cooperative" in str(conf.get("partition.assignment.strategy", "")) \
            or str(conf.get("group.protocol", "classic")).lower() == "consumer"

    # ----------------------------------------------------------------- reading

    def subscribe(self, topics: Iterable[str], **kwargs: Any) -> None:
        """Subscribe to ``topics`` and this group's retry topic (created when missing).
        An ``on_assign`` callback given is called with the partitions, the retry topic's
        starting offsets already set, before they are assigned (unless it assigns them)."""
        self._topics = list(topics)
        self._ensure([self.retry_topic, self.dead_letter_topic])
        user_on_assign = kwargs.pop("on_assign", None)

        def on_assign(consumer: Any, partitions: list[TopicPartition]) -> None:
            for tp in partitions:  # read afresh from the committed offsets
                self._in_flight.pop((tp.topic, tp.partition), None)
                self._done_upto.pop((tp.topic, tp.partition), None)
            self._start_retry_partitions(partitions)
            if user_on_assign is not None:
                user_on_assign(consumer, partitions)
                assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
                if all((tp.topic, tp.partition) in assigned for tp in partitions):
                    return  # the application's callback assigned them
            if self._incremental:
                consumer.incremental_assign(partitions)
            else:
                consumer.assign(partitions)

        self.consumer.subscribe([*self._topics, self.retry_topic], on_assign=on_assign, **kwargs)

    def _start_retry_partitions(self, partitions: list[TopicPartition]) -> None:
        """Retry-topic partitions without a committed offset start at the beginning, not
        where ``auto.offset.reset`` (librdkafka's default: latest) would: the copies sent
        there while no member of the group read the partition are not skipped. When the
        committed offsets cannot be read, they start at the beginning too (records
        consumed again rather than lost)."""
        retry = [tp for tp in partitions if tp.topic == self.retry_topic and tp.offset < 0]
        if not retry:
            return
        committed: dict[int, int] | None = None
        for _ in range(3):
            try:
                found = self.consumer.committed([TopicPartition(tp.topic, tp.partition) for tp in retry],
                                                timeout=10)
            except KafkaException as e:
                log.warning("group %s: reading the committed offsets of %s failed: %s", self.group,
                            self.retry_topic, e)
                continue
            committed = {tp.partition: tp.offset for tp in found if tp.error is None}
            break
        for tp in retry:
            offset = committed.get(tp.partition, -1) if committed is not None else -1
            tp.offset = offset if offset >= 0 else OFFSET_BEGINNING

    def poll(self, timeout: float = 1.0) -> Record | None:
        """The next record, or None; errors are raised as KafkaException (end of partition
        events are skipped)."""
        m = self.consumer.poll(timeout)
        if m is None:
            return None
        err = m.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return None
            raise KafkaException(err)
        polled: Any = m
        self._in_flight.setdefault((polled.topic(), polled.partition()), set()).add(polled.offset())
        return _record(m)

    # -------------------------------------------------------------- outcomes

    def ack(self, record: Record) -> None:
        """The record is done: its offset may be committed."""
        self._store(record)

    def retry(self, record: Record, reason: str = "") -> str:
        """Consume ``record`` again after the next delay of the schedule, or send it to the
        dead-letter topic once it failed ``max.retries`` times; returns the topic it went
        to. Blocks until the broker has it, then stores the offset."""
        failed = record.retries + 1
        entry = f"{int(time.time() * 1000)} {reason[:HISTORY_REASON_CHARS]}".strip()
        history = [*record.history, entry][-HISTORY_MAX:]
        if failed > self.max_retries:
            target = self.dead_letter_topic
            delay: list[tuple[str, bytes]] = []
        else:
            target = self.retry_topic
            delay = [(DELAY_MS, str(self.delays[min(failed - 1, len(self.delays) - 1)]).encode())]
        # A record near its topic's size limit may not take its history along: then it goes
        # with the newest entry alone, then with none, rather than not at all.
        for kept in (history, history[-1:], []):
            headers: list[tuple[str, bytes]] = [
                *record.headers, (ORIGIN_TOPIC, record.topic.encode()),
                (ORIGIN_PARTITION, str(record.partition).encode()), (ORIGIN_OFFSET, str(record.offset).encode()),
                (RETRY_COUNT, str(failed).encode()), *((RETRY_HISTORY, h.encode()) for h in kept), *delay]
            try:
                self._send(target, record, headers)
                break
            except KafkaException as e:
                if e.args[0].code() not in TOO_LARGE or not kept:
                    raise
                log.warning("group %s: %s[%d] offset %d is too large for %s with %d history entries; "
                            "sending it with fewer", self.group, record.topic, record.partition, record.offset,
                            target, len(kept))
        self._store(record)
        return target

    def commit(self, asynchronous: bool = False) -> None:
        """Commit the stored offsets now (they are also committed automatically)."""
        try:
            if asynchronous:
                self.consumer.commit(asynchronous=True)
            else:
                self.consumer.commit(asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NO_OFFSET:
                raise

    def close(self) -> None:
        try:
            self.commit()
        finally:
            self.producer.flush(30)
            self.consumer.close()

    # --------------------------------------------------------------- helpers

    def _store(self, record: Record) -> None:
        """``record`` is done: store the partition's offset up to the lowest record still in
        flight (or past every record done when none is)."""
        m: Any = record.message
        if m is None:
            return
        key = (m.topic(), m.partition())
        in_flight = self._in_flight.get(key, set())
        in_flight.discard(m.offset())
        done = max(self._done_upto.get(key, -1), m.offset() + 1)
        self._done_upto[key] = done
        target = min(in_flight) if in_flight else done
        self.consumer.store_offsets(offsets=[TopicPartition(m.topic(), m.partition(), target)])

    def _send(self, topic: str, record: Record, headers: list[tuple[str, bytes]]) -> None:
        errors: list[Any] = []
        out_headers: Any = headers
        self.producer.produce(topic, key=record.key, value=record.value, headers=out_headers,
                              on_delivery=lambda err, _msg: errors.append(err))
        deadline = time.monotonic() + 60
        while not errors and time.monotonic() < deadline:
            self.producer.poll(0.1)
        if not errors:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{topic}: no acknowledgement in 60 s"))
        if errors[0] is not None:
            raise KafkaException(errors[0])

    def _ensure(self, topics: list[str]) -> None:
        ensure_topics(self.bootstrap, topics)


def ensure_topics(bootstrap: str, topics: list[str]) -> None:
    """Create the topics that do not exist (the broker's default partitions and replication)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=15).topics
    missing = [t for t in topics if t not in existing]
    if not missing:
        return
    for topic, fut in admin.create_topics([NewTopic(t, -1, -1) for t in missing]).items():
        try:
            fut.result(30)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaException(KafkaError(e.args[0].code(), f"cannot create {topic}: {e.args[0].str()}")) from None


def redrive(bootstrap: str, dead_letter: str, progress: Callable[[int, int], None] | None = None,
            limit: int | None = None, dry_run: bool = False,
            config: dict[str, Any] | None = None) -> dict[str, int]:
    """Produce the dead letters not yet re-driven back to their origin topics (own headers
    removed); progress is kept in the consumer group ``<dead letter topic>-redrive``, so a
    second run sends only what arrived since. Returns {origin topic: records sent}.
    ``progress(done, total)`` is called as it goes; ``config``: more client settings
    (security) for the consumer and the producer."""
    group = f"{dead_letter}-redrive"
    extra = config or {}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True, "log_level": 0, **extra})
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, "log_level": 0,
                  **extra})
    sent: dict[str, int] = {}
    try:
        md = c.list_topics(dead_letter, timeout=15).topics.get(dead_letter)
        if md is None or md.error is not None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"topic {dead_letter} does not exist"))
        parts = [TopicPartition(dead_letter, p_) for p_ in md.partitions]
        committed = {tp.partition: tp.offset for tp in c.committed(parts, timeout=15)}
        total = 0
        positions = []
        for tp in parts:
            low, high = c.get_watermark_offsets(tp, timeout=15)
            start = committed.get(tp.partition, -1001)
            start = low if start < 0 else max(start, low)
            total += max(0, high - start)
            positions.append(TopicPartition(dead_letter, tp.partition, start))
        if limit is not None:
            total = min(total, limit)
        c.assign(positions)
        done = 0
        ended: set[int] = set()
        errors: list[Any] = []
        last_offsets: dict[int, int] = {}
        while done < total and len(ended) < len(parts):
            m: Any = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    ended.add(m.partition())
                    continue
                raise KafkaException(m.error())
            headers = m.headers() or []
            origin = _header([(k, v or b"") for k, v in headers], ORIGIN_TOPIC)
            target = origin.decode() if origin else None
            if target is None:
                continue  # not a dead letter of RetryingConsumer: left where it is
            if not dry_run:
                p.produce(target, key=m.key(), value=m.value(),
                          headers=[(k, v) for k, v in headers if k not in OWN_HEADERS],
                          on_delivery=lambda err, _msg: errors.append(err) if err else None)
                p.poll(0)
            sent[target] = sent.get(target, 0) + 1
            last_offsets[m.partition()] = m.offset()
            done += 1
            if progress is not None:
                progress(done, total)
        if not dry_run:
            if p.flush(60):
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "re-driven records not acknowledged in 60 s"))
            if errors:
                raise KafkaException(errors[0])
            if last_offsets:
                c.commit(offsets=[TopicPartition(dead_letter, part, off + 1)
                                  for part, off in last_offsets.items()], asynchronous=False)
    finally:
        c.close()
    return sent
