"""``dmq consume``: records to stdout (like kafka-console-consumer.sh)."""

from __future__ import annotations

import sys
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

from dmq.cli.common import fail


def run(bootstrap: str, topic: str, from_beginning: bool, partition: int | None,
        offset: int | None, max_messages: int | None, print_key: bool, print_headers: bool,
        print_offset: bool, key_separator: str, timeout_ms: int | None) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dmq-console",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "fetch.wait.max.ms": 100})
    try:
        md = consumer.list_topics(timeout=10)  # all topics: naming one may auto-create it
    except Exception as e:  # noqa: BLE001
        fail(f"cannot reach {bootstrap}: {e}")
    t: Any = md.topics.get(topic)
    if t is None or t.error is not None:
        fail(f"topic {topic} does not exist; create it with `dmq topics create {topic}`")
    parts = sorted(t.partitions) if partition is None else [partition]
    if partition is not None and partition not in t.partitions:
        fail(f"topic {topic} has no partition {partition} (it has {len(t.partitions)})")
    if offset is not None and partition is None:
        fail("--offset needs --partition")
    start = offset if offset is not None else (OFFSET_BEGINNING if from_beginning else OFFSET_END)
    consumer.assign([TopicPartition(topic, p, start) for p in parts])
    count = 0
    out = sys.stdout.buffer
    last_record = time.monotonic()
    try:
        while max_messages is None or count < max_messages:
            msgs = consumer.consume(min(500, (max_messages or 500) - count), 0.2)
            if not msgs:
                if timeout_ms is not None and (time.monotonic() - last_record) * 1000 > timeout_ms:
                    break
                continue
            for m in msgs:
                msg: Any = m
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        fail(f"consume failed: {msg.error().str()}")
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
                out.write(key_separator.encode().join(parts_out) + b"\n")
                count += 1
            out.flush()
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return count
