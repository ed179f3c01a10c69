"""``dmq produce``: lines from stdin become records (like kafka-console-producer.sh)."""

from __future__ import annotations

import sys
from typing import Any

from confluent_kafka import KafkaException, Producer

from dmq.cli.common import fail
from dmq.client.producing import produce_waiting


def run(bootstrap: str, topic: str, key_separator: str | None, headers: dict[str, str],
        partition: int | None, acks: str, compression: str, idempotence: bool) -> int:
    errors: list[str] = []
    sent = 0

    def on_delivery(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            errors.append(err.str())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks,
                         "compression.type": compression, "enable.idempotence": idempotence,
                         "linger.ms": 5})
    header_list = [(k, v.encode()) for k, v in headers.items()]
    for raw in sys.stdin.buffer:
        line = raw.rstrip(b"\n")
        key = None
        if key_separator is not None:
            sep = key_separator.encode()
            if sep not in line:
                fail(f"line {sent + 1} has no key separator {key_separator!r}")
            key, line = line.split(sep, 1)
        kwargs: dict[str, Any] = {"key": key, "value": line, "headers": header_list, "on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        try:
            produce_waiting(producer, topic, **kwargs)
        except KafkaException as e:
            fail(f"cannot produce to {topic}: {e.args[0].str()}")
        producer.poll(0)
        sent += 1
    remaining = producer.flush(60)
    if remaining:
        fail(f"{remaining} records were not delivered within 60 s; is the broker at {bootstrap} up?")
    if errors:
        fail(f"{len(errors)} of {sent} records failed: {errors[0]}")
    print(f"produced {sent} records to {topic}", file=sys.stderr)
    return sent
