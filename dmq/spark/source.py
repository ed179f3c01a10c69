"""The ``dmq`` data source for PySpark 4.2+ (Python Data Source API), like Spark's Kafka source.

Options (names and meanings of Spark's Kafka connector):

- ``bootstrap.servers`` or ``kafka.bootstrap.servers``;
- one of ``subscribe`` (comma-separated topics), ``subscribePattern`` (regex)
  or ``assign`` (JSON ``{"topic": [0, 1]}``);
- ``startingOffsets``: ``earliest``, ``latest`` or JSON
  ``{"topic": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest); default
  ``latest`` for streams, ``earliest`` for batch reads;
- ``startingTimestamp`` (ms, every partition) or ``startingOffsetsByTimestamp``
  (JSON ``{"topic": {"0": 1700000000000}}``); partitions a JSON option leaves
  out, and partitions added later, start at their earliest offset. Given
  together, startingTimestamp wins over startingOffsetsByTimestamp, and both
  over startingOffsets (Spark's order);
- ``endingOffsets`` (batch only; a stream refuses it): ``latest`` or JSON; as
  in Spark, a batch read refuses a start at ``latest`` and an end at
  ``earliest`` (-1 and -2 in JSON);
- ``maxOffsetsPerTrigger``, ``minPartitions``, ``failOnDataLoss`` (default
  true), ``includeHeaders`` (default false);
- ``commitOffsetsToGroup``: a consumer group to which the end offsets of each
  finished micro-batch are committed, so ``dmq groups describe`` shows the
  query's lag. Spark tells a source that a batch is done only when it plans a
  next batch, which never comes after the last one (``availableNow``, or a
  query stopped once caught up); so the source also commits the offsets a
  finished batch ended at as soon as Spark next asks for new data, which it
  does once more before an ``availableNow`` query ends and at every trigger of
  a running one. Spark's checkpoint stays the source of truth;
- ``kafkaConsumer.pollTimeoutMs`` (default 120000): an executor reading a range
  fails when no record arrives for this long (e.g. the broker went away),
  rather than wait forever.
- ``fetchOffset.numRetries`` (default 3) and ``fetchOffset.retryIntervalMs``
  (default 1000): a stream's partition whose latest offset went backwards or
  that vanished is asked for again this many times, this far apart, before it
  counts as data loss (Spark's: a partition gone, or an end below the start,
  say a topic deleted and re-created, fails the query unless
  failOnDataLoss=false, which goes on from the new end).

Offsets are ``{"topic": {"partition": next offset}}``. The driver plans with
confluent-kafka; executors fetch each offset range's raw record batches from the
partition's leader and decode them into Arrow in bulk (``dmq.spark.fetch``),
seeing only records below the high watermark (read_committed, librdkafka's
default: below the last stable offset, without aborted transactions).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

BASE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
               "timestamp timestamp, timestampType int")
HEADERS_FIELD = ", headers array<struct<key: string, value: binary>>"
EARLIEST, LATEST = -2, -1

Offsets = dict[str, dict[str, int]]
log = logging.getLogger(__name__)


class DmqSourceError(ValueError):
    pass


def _bool(options: Any, name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if str(raw).lower() not in ("true", "false"):
        raise DmqSourceError(f"option {name} must be true or false, got {raw!r}")
    return str(raw).lower() == "true"


def _int(options: Any, name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise DmqSourceError(f"option {name} must be an integer, got {raw!r}") from None
    if value <= 0:
        raise DmqSourceError(f"option {name} must be positive, got {value}")
    return value


class SourceConfig:
    """Validated options, shared by the batch and the streaming reader (picklable)."""

    def __init__(self, options: Any) -> None:
        self.bootstrap = options.get("bootstrap.servers") or options.get("kafka.bootstrap.servers")
        if not self.bootstrap:
            raise DmqSourceError("option bootstrap.servers (or kafka.bootstrap.servers) is required")
        chosen = [k for k in ("subscribe", "subscribePattern", "assign") if options.get(k)]
        if len(chosen) != 1:
            raise DmqSourceError("give exactly one of the options subscribe, subscribePattern, assign")
        self.subscribe = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
        if chosen == ["subscribe"] and not self.subscribe:
            raise DmqSourceError(f"No topics to subscribe to as specified value for option 'subscribe' is "
                                 f"{options['subscribe']!r}")
        self.pattern = options.get("subscribePattern")
        self.assign: dict[str, list[int]] | None = None
        if options.get("assign"):
            try:
                self.assign = {t: [int(p) for p in ps] for t, ps in json.loads(options["assign"]).items()}
            except (ValueError, TypeError, AttributeError):
                raise DmqSourceError('option assign must be JSON like {"topic": [0, 1]}') from None
        self.starting = options.get("startingOffsets")
        self.ending_given = options.get("endingOffsets") is not None
        self.ending = options.get("endingOffsets", "latest")
        self.starting_timestamp = options.get("startingTimestamp")
        self.starting_by_timestamp = options.get("startingOffsetsByTimestamp")
        self.max_per_trigger = _int(options, "maxOffsetsPerTrigger")
        self.min_partitions = _int(options, "minPartitions")
        self.fail_on_data_loss = _bool(options, "failOnDataLoss", True)
        self.include_headers = _bool(options, "includeHeaders", False)
        self.commit_group = options.get("commitOffsetsToGroup")
        self.poll_timeout_ms = _int(options, "kafkaConsumer.pollTimeoutMs") or 120_000
        self.offset_retries = _int(options, "fetchOffset.numRetries") or 3
        self.offset_retry_interval_ms = _int(options, "fetchOffset.retryIntervalMs") or 1000
        # kafka.<librdkafka setting> options go to the consumers, as in Spark's Kafka source.
        self.extra = {k[len("kafka."):]: v for k, v in options.items()
                      if k.lower().startswith("kafka.") and k.lower() not in
                      ("kafka.bootstrap.servers", "kafka.group.id", "kafka.enable.auto.commit")}
        # The executors' fetches honour these consumer settings (librdkafka's names and defaults,
        # except a larger fetch size).
        isolation = str(self.extra.get("isolation.level", "read_committed"))
        if isolation not in ("read_committed", "read_uncommitted"):
            raise DmqSourceError(f"option kafka.isolation.level must be read_committed or read_uncommitted, "
                                 f"got {isolation!r}")
        self.read_committed = isolation == "read_committed"
        self.fetch_wait_ms = _int(options, "kafka.fetch.wait.max.ms") or 50
        self.partition_max_bytes = _int(options, "kafka.max.partition.fetch.bytes") or 8 << 20

    def check_batch(self) -> None:
        """Refuse what Spark's Kafka source refuses for a batch read: a start at the latest
        offset or an end at the earliest (nothing would be read)."""
        timestamps = self.starting_timestamp or self.starting_by_timestamp  # these win over startingOffsets
        for text, name, bad, word in ((None if timestamps else self.starting, "startingOffsets", LATEST, "latest"),
                                      (self.ending, "endingOffsets", EARLIEST, "earliest")):
            if text is None:
                continue
            if text.strip() == word:
                raise DmqSourceError(f"{'starting' if bad == LATEST else 'ending'} offset can't be {word} "
                                     "for batch queries")
            try:
                raw = json.loads(text)
            except ValueError:
                continue  # resolve() says what is wrong with it
            for t, ps in raw.items() if isinstance(raw, dict) else ():
                for p, off in ps.items() if isinstance(ps, dict) else ():
                    if off == bad:
                        raise DmqSourceError(f"{name} for {t}-{p} can't be {word} for batch queries")

    def check_stream(self) -> None:
        """Refuse what Spark's Kafka source refuses for a stream."""
        if self.ending_given:
            raise DmqSourceError("ending offset not valid in streaming queries (option endingOffsets)")

    def client_conf(self) -> dict[str, Any]:
        # Quiet unless the user asks for librdkafka's log (kafka.log_level): errors reach
        # Spark as exceptions, not as raw client lines on the terminal.
        return {"socket.timeout.ms": 30000, "log_level": 0, **self.extra,
                "bootstrap.servers": self.bootstrap,
                "group.id": f"dmq-spark-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}


def schema_for(include_headers: bool) -> str:
    return BASE_SCHEMA + (HEADERS_FIELD if include_headers else "")


class Metadata:
    """Driver-side view of topics, partitions and offsets (one short-lived consumer)."""

    def __init__(self, config: SourceConfig) -> None:
        from confluent_kafka import Consumer

        self.config = config
        self.consumer = Consumer(config.client_conf())

    def close(self) -> None:
        self.consumer.close()

    def partitions(self) -> list[tuple[str, int]]:
        md = self.consumer.list_topics(timeout=30)
        topics = {name: sorted(t.partitions) for name, t in md.topics.items()
                  if t.error is None and not name.startswith("__")}
        cfg = self.config
        if cfg.assign is not None:
            missing = [t for t in cfg.assign if t not in topics]
            if missing:
                raise DmqSourceError(f"assigned topics do not exist: {', '.join(missing)}")
            return [(t, p) for t, ps in cfg.assign.items() for p in ps]
        if cfg.pattern:
            regex = re.compile(cfg.pattern)
            names = [n for n in sorted(topics) if regex.fullmatch(n)]
        else:
            names = cfg.subscribe
        return [(t, p) for t in names for p in topics.get(t, [])]

    def watermarks(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        from confluent_kafka import TopicPartition

        return {tp: self.consumer.get_watermark_offsets(TopicPartition(*tp), timeout=30) for tp in tps}

    def offsets_for_times(self, stamps: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        from confluent_kafka import TopicPartition

        if not stamps:
            return {}
        found = self.consumer.offsets_for_times([TopicPartition(t, p, ts) for (t, p), ts in stamps.items()],
                                                timeout=30)
        marks = self.watermarks(list(stamps))
        # No record at or after the timestamp: start at the end (Spark's 'latest' strategy).
        return {(r.topic, r.partition): (r.offset if r.offset >= 0 else marks[(r.topic, r.partition)][1])
                for r in found}

    def resolve(self, spec: str | None, default: str, tps: list[tuple[str, int]]) -> Offsets:
        """Offsets for ``startingOffsets``/``endingOffsets``-style specs (and timestamps)."""
        marks = self.watermarks(tps)
        cfg = self.config
        out: dict[tuple[str, int], int] = {}
        # Spark's precedence for where a read starts: startingTimestamp, then
        # startingOffsetsByTimestamp, then startingOffsets.
        starting = default != "latest-end"
        if starting and cfg.starting_timestamp:
            out = self.offsets_for_times({tp: int(cfg.starting_timestamp) for tp in tps})
        elif starting and cfg.starting_by_timestamp:
            stamps = {(t, int(p)): int(ts) for t, ps in json.loads(cfg.starting_by_timestamp).items()
                      for p, ts in ps.items()}
            out = self.offsets_for_times(stamps)
            for tp in tps:  # partitions left out start at their earliest, as in JSON offsets
                out.setdefault(tp, marks[tp][0])
        else:
            text = (spec or default).strip()
            if text == "latest-end":
                text = "latest"
            if text in ("earliest", "latest"):
                out = {tp: marks[tp][0 if text == "earliest" else 1] for tp in tps}
            else:
                try:
                    raw = json.loads(text)
                except ValueError:
                    raise DmqSourceError(f"offsets must be earliest, latest or JSON, got {text!r}") from None
                for t, ps in raw.items():
                    for p, off in ps.items():
                        tp = (t, int(p))
                        if tp not in marks:
                            marks.update(self.watermarks([tp]))
                        out[tp] = marks[tp][0] if off == EARLIEST else marks[tp][1] if off == LATEST else int(off)
                for tp in tps:
                    out.setdefault(tp, marks[tp][0])
        return to_offsets(out)


def to_offsets(flat: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (t, p), o in sorted(flat.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def flatten(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, ps in offsets.items() for p, o in ps.items()}


class RangePartition(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


def rate_limit(limit: int, frm: dict[tuple[str, int], int],
               until: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """``until`` cut to about ``limit`` offsets in all, shared in proportion to each
    partition's backlog (Spark's rateLimit): a share below one offset is rounded up, so a
    small partition beside a large backlog is never starved, and larger shares down."""
    sizes = {tp: e - frm[tp] for tp, e in until.items() if e - frm[tp] > 0}
    total = sum(sizes.values())
    if total <= limit:
        return dict(until)
    out = dict(until)
    for tp, size in sizes.items():
        share = limit * size // total
        out[tp] = frm[tp] + min(size, share if share >= 1 else 1)
    return out


def report_data_loss(config: SourceConfig, message: str) -> None:
    """Fail with ``message`` unless failOnDataLoss=false, which logs it and goes on."""
    if config.fail_on_data_loss:
        raise RuntimeError(f"{message}. Some data may have been lost because it is not available in the "
                           "topic any more: it was aged out or deleted, or the topic was deleted (and perhaps "
                           "re-created) before it was all read. Set failOnDataLoss=false to go on without it.")
    log.warning("%s. failOnDataLoss=false: going on without it.", message)


def split_ranges(start: Offsets, end: Offsets, min_partitions: int | None) -> list[RangePartition]:
    """One read task per partition's range [start, end), or, with ``minPartitions`` more than
    the ranges, at least that many: each range cut into even pieces, their number shared
    out in proportion to the ranges' sizes (a piece holds at least one offset)."""
    ranges = []
    s_flat = flatten(start)
    for tp, e in sorted(flatten(end).items()):
        s = s_flat.get(tp, 0)
        if e > s:
            ranges.append((tp, s, e))
    if not (min_partitions and ranges and len(ranges) < min_partitions):
        return [RangePartition(t, p, s, e) for (t, p), s, e in ranges]
    sizes = [e - s for _, s, e in ranges]
    total = sum(sizes)
    pieces = [max(1, min(size, min_partitions * size // total)) for size in sizes]
    while sum(pieces) < min(min_partitions, total):  # the largest pieces are cut again
        i = max((j for j in range(len(ranges)) if pieces[j] < sizes[j]), key=lambda j: sizes[j] / pieces[j])
        pieces[i] += 1
    out = []
    for ((t, p), s, e), n in zip(ranges, pieces, strict=True):
        bounds = [s + (e - s) * k // n for k in range(n + 1)]
        out += [RangePartition(t, p, lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]
    return out


def read_range(config: SourceConfig, part: RangePartition) -> Iterator[Any]:
    """Records with start <= offset < end of one partition (runs on an executor).

    Fetches raw record batches from the partition's leader and yields them as
    Arrow record batches, decoded in bulk (``dmq.spark.fetch``,
    ``dmq.spark.arrow_records``): one per fetch answer (up to
    ``kafka.max.partition.fetch.bytes``, default 8 MiB).
    """
    from dmq.spark.fetch import PartitionFetcher, connect_timeout, read_offsets

    fetcher = PartitionFetcher(
        config.bootstrap, part.topic, part.partition, client_id=str(config.extra.get("client.id", "dmq-spark")),
        read_committed=config.read_committed, max_wait_ms=config.fetch_wait_ms,
        partition_max_bytes=config.partition_max_bytes,
        timeout=connect_timeout(config.poll_timeout_ms) + config.fetch_wait_ms / 1000)
    yield from read_offsets(fetcher, part.start, part.end, include_headers=config.include_headers,
                            poll_timeout_ms=config.poll_timeout_ms,
                            data_loss=lambda why: _data_loss(config, part, why),
                            describe=f"{part.topic}-{part.partition}")


def _data_loss(config: SourceConfig, part: RangePartition, why: str) -> None:
    message = (f"data loss reading {part.topic}-{part.partition} offsets [{part.start}, {part.end}): "
               f"{why}. Set failOnDataLoss=false to skip missing records.")
    if config.fail_on_data_loss:
        raise RuntimeError(message)


class DmqBatchReader(DataSourceReader):
    def __init__(self, config: SourceConfig) -> None:
        self.config = config

    def partitions(self) -> Sequence[InputPartition]:
        md = Metadata(self.config)
        try:
            tps = md.partitions()
            start = md.resolve(self.config.starting, "earliest", tps)
            end = md.resolve(self.config.ending, "latest-end", tps)
        finally:
            md.close()
        return split_ranges(start, end, self.config.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        yield from read_range(self.config, partition)


class DmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self.available_now: dict[tuple[str, int], int] | None = None
        self.committed: dict[tuple[str, int], int] = {}
        self.initial: Offsets | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to what exists now, then stop."""
        md = Metadata(self.config)
        try:
            marks = md.watermarks(md.partitions())
        finally:
            md.close()
        self.available_now = {tp: hi for tp, (_lo, hi) in marks.items()}

    def initialOffset(self) -> dict:
        # Resolved once: Spark 4 asks twice for batch 0 (planning it, then running it), and with
        # startingOffsets=latest and a producer writing the two answers differ; the records
        # between them were in neither batch. Spark's Kafka source also writes them to the
        # checkpoint (sources/0); a Python data source is told no checkpoint location, so a
        # query restarted before its batch 0 is committed resolves them again.
        if self.initial is None:
            md = Metadata(self.config)
            try:
                self.initial = md.resolve(self.config.starting, "latest", md.partitions())
            finally:
                md.close()
        return self.initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.config.max_per_trigger:
            return ReadMaxRows(self.config.max_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        # Spark runs one micro-batch at a time and asks for new data only once the last
        # one finished (its commit log written): ``start`` is where that batch ended.
        self.commit_to_group(start)
        begin = flatten(start)
        tps, marks = self._current_offsets(begin)
        # New partitions (added to a topic or matching the pattern) start from their earliest.
        frm = {tp: begin.get(tp, marks[tp][0]) for tp in tps}
        # An end below the start (the topic re-created) is kept: partitions() reports it as data
        # loss, and the next batch starts there. Partitions gone from the topic are left out.
        latest = {tp: marks[tp][1] for tp in tps}
        if self.available_now is not None:
            latest = {tp: o if o < frm[tp] else max(frm[tp], min(o, self.available_now.get(tp, frm[tp])))
                      for tp, o in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(limit.max_rows, frm, latest)
        return to_offsets(latest)

    def _current_offsets(self, begin: dict[tuple[str, int], int]) -> tuple[
            list[tuple[str, int]], dict[tuple[str, int], tuple[int, int]]]:
        """The partitions and their (earliest, latest) offsets. A partition whose latest offset
        is below ``begin``, or one in ``begin`` that is gone, is asked for again up to
        ``fetchOffset.numRetries`` times (Spark's fetchLatestOffsets: a stale answer, such as
        KAFKA-7703's, is retried before it is taken for data loss)."""
        attempt = 0
        while True:
            md = Metadata(self.config)
            try:
                tps = md.partitions()
                marks = md.watermarks(tps)
            finally:
                md.close()
            attempt += 1
            suspect = [tp for tp, o in begin.items() if tp not in marks or marks[tp][1] < o]
            if not suspect or attempt >= self.config.offset_retries:
                return tps, marks
            time.sleep(self.config.offset_retry_interval_ms / 1000)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        # Spark's getOffsetRangesFromResolvedOffsets: partitions gone and ends moved backwards
        # are data loss (the range is empty; with failOnDataLoss=false the query goes on from
        # the end).
        begin, until = flatten(start), flatten(end)
        gone = sorted(tp for tp in begin if tp not in until)
        if gone:
            report_data_loss(self.config, f"{', '.join(f'{t}-{p}' for t, p in gone)} are gone. "
                                          "Some data may have been missed")
        for tp, e in sorted(until.items()):
            if tp in begin and e < begin[tp]:
                report_data_loss(self.config, f"Partition {tp[0]}-{tp[1]}'s offset was changed from {begin[tp]} "
                                              f"to {e}, some data may have been missed")
        return split_ranges(start, end, self.config.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        yield from read_range(self.config, partition)

    def commit(self, end: dict) -> None:
        self.commit_to_group(end)

    def commit_to_group(self, done: dict) -> None:
        """Commit offsets Spark has finished with to ``commitOffsetsToGroup`` (if set), once
        per change."""
        offsets = flatten(done)
        if not self.config.commit_group or not offsets or offsets == self.committed:
            return
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({**self.config.client_conf(), "group.id": self.config.commit_group})
        try:
            c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                     asynchronous=False)
        finally:
            c.close()
        self.committed = offsets


class DmqDataSource(DataSource):
    """``spark.read.format("dmq")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "dmq"

    def schema(self) -> str:
        return schema_for(_bool(self.options, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        config = SourceConfig(self.options)
        config.check_batch()
        return DmqBatchReader(config)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        config = SourceConfig(self.options)
        config.check_stream()
        return DmqStreamReader(config)

    # The sink is imported when used: the Python processes Spark starts to plan a read import
    # this module, and the sink's imports (its producer) added ~0.25 s to each one's start.
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from dmq.spark.sink import DmqWriter

        return DmqWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from dmq.spark.sink import DmqStreamWriter

        return DmqStreamWriter(dict(self.options), schema)
