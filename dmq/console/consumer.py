"""``dmq consume``: records to stdout (like kafka-console-consumer.sh)."""

from __future__ import annotations

import sys
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

from dmq.cli.common import (
    client_config,
    ensure_reachable,
    exit_on_broken_pipe,
    fail,
    kafka_error_text,
)

BATCH = 500
# Longest single wait for records: how often a --timeout-ms is checked; the wait itself
# sleeps in librdkafka, so an idle consumer costs next to no CPU.
WAIT_S = 1.0
METADATA_TIMEOUT = 10


def run(bootstrap: str, topic: str, from_beginning: bool, partition: int | None,
        offset: int | None, max_messages: int | None, print_key: bool, print_headers: bool,
        print_offset: bool, key_separator: str, timeout_ms: int | None) -> int:
    if offset is not None and partition is None:
        fail("--offset needs --partition", 2)
    ensure_reachable(bootstrap)
    consumer = Consumer(client_config(bootstrap, **{
        "group.id": "dmq-console", "enable.auto.commit": False, "enable.partition.eof": False,
        "fetch.wait.max.ms": 100}))
    try:
        count = _consume(consumer, topic, from_beginning, partition, offset, max_messages,
                         print_key, print_headers, print_offset, key_separator, timeout_ms)
    except BrokenPipeError:
        exit_on_broken_pipe()
    finally:
        consumer.close()
    # After close(): librdkafka logs from its own threads until then (with --verbose, a
    # broker gone away is retried during the close), and the summary is the last line.
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return count


def _consume(consumer: Consumer, topic: str, from_beginning: bool, partition: int | None,
             offset: int | None, max_messages: int | None, print_key: bool, print_headers: bool,
             print_offset: bool, key_separator: str, timeout_ms: int | None) -> int:
    try:
        md = consumer.list_topics(timeout=METADATA_TIMEOUT)  # all topics: naming one may auto-create it
    except Exception as e:  # noqa: BLE001
        fail(f"cannot list topics: {kafka_error_text(e)}")
    t: Any = md.topics.get(topic)
    if t is None or t.error is not None:
        fail(f"topic {topic} does not exist; create it with `dmq topics create {topic}`")
    if partition is not None and partition not in t.partitions:
        fail(f"topic {topic} has no partition {partition} (it has {len(t.partitions)})")
    parts = sorted(t.partitions) if partition is None else [partition]
    if offset is not None:
        assert partition is not None
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=METADATA_TIMEOUT)
        except Exception as e:  # noqa: BLE001
            fail(f"cannot read the offsets of {topic}-{partition}: {kafka_error_text(e)}")
        if not low <= offset <= high:
            fail(f"offset {offset} is out of range for {topic}-{partition}: pass an --offset "
                 f"from {low} (earliest) to {high} (latest)")
    start = offset if offset is not None else (OFFSET_BEGINNING if from_beginning else OFFSET_END)
    consumer.assign([TopicPartition(topic, p, start) for p in parts])
    count = 0
    out = sys.stdout.buffer
    sep = key_separator.encode()
    last_record = time.monotonic()
    try:
        while max_messages is None or count < max_messages:
            batch = BATCH if max_messages is None else min(BATCH, max_messages - count)
            wait = WAIT_S
            if timeout_ms is not None:
                left = timeout_ms / 1000 - (time.monotonic() - last_record)
                if left <= 0:
                    break
                wait = min(wait, left)
            msgs = consumer.consume(batch, wait)
            for m in msgs:
                msg: Any = m
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        fail(f"consume failed: {kafka_error_text(msg.error())}")
                    continue
                last_record = time.monotonic()
                parts_out: list[bytes] = []
                if print_offset:
                    parts_out.append(f"{msg.partition()}:{msg.offset()}".encode())
                if print_headers:
                    hs = msg.headers() or []
                    parts_out.append(b",".join(k.encode() + b"=" + (v or b"") for k, v in hs) or b"NO_HEADERS")
                if print_key:
                    parts_out.append(msg.key() if msg.key() is not None else b"null")
                parts_out.append(msg.value() if msg.value() is not None else b"null")
                out.write(sep.join(parts_out) + b"\n")
                count += 1
            if msgs:
                out.flush()
    except KeyboardInterrupt:
        pass
    return count
