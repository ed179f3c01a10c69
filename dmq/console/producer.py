"""``dmq produce``: lines from stdin become records (like kafka-console-producer.sh).

Whatever happens after a line was read (a bad line further on, Ctrl-C, end of input), the
lines read before are delivered (flushed) or named as not produced: nothing is dropped
silently.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, Producer

from dmq.cli.common import client_config, ensure_reachable, fail, kafka_error_text
from dmq.client.producing import produce_waiting

FLUSH_TIMEOUT = 60
METADATA_TIMEOUT = 10
PROMPT = "> "


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def line_ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 7] -> 'lines 1-3, 7'."""
    spans: list[str] = []
    start = prev = numbers[0]
    for n in numbers[1:] + [0]:
        if n == prev + 1:
            prev = n
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    return ("line " if len(numbers) == 1 else "lines ") + ", ".join(spans)


class Deliveries:
    """Which lines read so far the broker has not acknowledged, and why."""

    def __init__(self) -> None:
        self.undelivered: set[int] = set()
        self.first_error: str | None = None

    def sending(self, lineno: int) -> Callable[[Any, Any], None]:
        self.undelivered.add(lineno)

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                self.undelivered.discard(lineno)
            elif self.first_error is None:
                self.first_error = kafka_error_text(err)
        return on_delivery

    def missing(self, read: int) -> list[int]:
        return sorted(n for n in self.undelivered if n <= read)


def _check_topic(producer: Producer, topic: str, partition: int | None) -> None:
    """Fail fast on a topic the broker will not have, rather than retry for minutes."""
    try:
        md = producer.list_topics(timeout=METADATA_TIMEOUT)  # all topics: creates nothing
        t: Any = md.topics.get(topic)
        if t is None or t.error is not None:
            # Naming the topic lets a broker with auto.create.topics.enable create it now.
            t = producer.list_topics(topic, timeout=METADATA_TIMEOUT).topics.get(topic)
    except Exception as e:  # noqa: BLE001
        fail(f"cannot read metadata for topic {topic}: {kafka_error_text(e)}")
    if t is not None and t.error is not None:
        code = t.error.code()
        if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
            fail(f"topic {topic} does not exist and the broker does not create topics "
                 f"(auto.create.topics.enable=false); create it with `dmq topics create {topic}`")
        if code != KafkaError.LEADER_NOT_AVAILABLE:  # that one: being created, the client waits
            fail(f"cannot produce to {topic}: {kafka_error_text(t.error)}")
    if partition is not None and t is not None and t.partitions and partition not in t.partitions:
        fail(f"topic {topic} has no partition {partition} (it has {len(t.partitions)})")


def run(bootstrap: str, topic: str, key_separator: str | None, headers: dict[str, str],
        partition: int | None, acks: str, compression: str, idempotence: bool) -> int:
    ensure_reachable(bootstrap)
    producer = Producer(client_config(bootstrap, **{
        "acks": acks, "compression.type": compression, "enable.idempotence": idempotence,
        "linger.ms": 5}))
    _check_topic(producer, topic, partition)
    header_list = [(k, v.encode()) for k, v in headers.items()]
    sep = key_separator.encode() if key_separator is not None else None
    stdin = sys.stdin.buffer
    prompt = os.isatty(stdin.fileno())
    deliveries = Deliveries()
    read = 0  # lines read and handed to the client
    problem: str | None = None
    interrupted = False
    try:
        while True:
            if prompt:
                print(PROMPT, end="", file=sys.stderr, flush=True)
            raw = stdin.readline()
            if not raw:
                if prompt:  # Ctrl-D: end the prompt's line
                    print(file=sys.stderr)
                break
            lineno = read + 1
            line = raw[:-1] if raw.endswith(b"\n") else raw
            key = None
            if sep is not None:
                if sep not in line:
                    problem = f"line {lineno} has no key separator {key_separator!r}"
                    break
                key, line = line.split(sep, 1)
            kwargs: dict[str, Any] = {"key": key, "value": line, "headers": header_list,
                                      "on_delivery": deliveries.sending(lineno)}
            if partition is not None:
                kwargs["partition"] = partition
            try:
                produce_waiting(producer, topic, **kwargs)
            except Exception as e:  # noqa: BLE001 - KafkaException: bad partition, too large, ...
                deliveries.undelivered.discard(lineno)
                problem = f"cannot produce line {lineno} to {topic}: {kafka_error_text(e)}"
                break
            read = lineno
            producer.poll(0)
    except KeyboardInterrupt:
        interrupted = True
        if prompt:
            print(file=sys.stderr)
    try:
        remaining = producer.flush(FLUSH_TIMEOUT)
        timed_out = remaining > 0
    except KeyboardInterrupt:  # a second Ctrl-C: stop waiting, say what is left
        interrupted, timed_out = True, False
    missing = deliveries.missing(read)
    why = deliveries.first_error or (
        f"not acknowledged within {FLUSH_TIMEOUT} s; is the broker at {bootstrap} up?"
        if timed_out else "interrupted before the broker acknowledged them")
    if problem is not None or interrupted:
        head = "interrupted" if problem is None else f"error: {problem}"
        if read == 0:
            tail = "nothing was produced"
        elif not missing:
            tail = (f"{_plural(read, 'line')} read before it {'was' if read == 1 else 'were'} "
                    f"produced to {topic}")
        else:
            tail = (f"of the {_plural(read, 'line')} read before it, {line_ranges(missing)} "
                    f"{'was' if len(missing) == 1 else 'were'} not produced to {topic} ({why})")
        print(f"{head}: {tail}" if problem is None else f"{head}; {tail}", file=sys.stderr)
        raise SystemExit(1 if problem is not None else 130)
    if missing:
        fail(f"{len(missing)} of {_plural(read, 'record')} were not produced to {topic}: "
             f"{line_ranges(missing)} ({why})")
    print(f"produced {_plural(read, 'record')} to {topic}", file=sys.stderr)
    return read
