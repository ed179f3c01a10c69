"""A confluent-kafka group member as a separate process (so tests can SIGKILL it).

Writes one line per record, ``partition offset value``, to OUT and flushes it
before committing that batch synchronously (at-least-once: commit after
processing). Assignment changes go to OUT.assign. Stops when OUT.stop exists
or after --max-seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from confluent_kafka import Consumer


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("group")
    ap.add_argument("topic")
    ap.add_argument("out")
    ap.add_argument("--strategy", default="range")
    ap.add_argument("--instance-id", default=None)
    ap.add_argument("--session-ms", type=int, default=6000)
    ap.add_argument("--max-seconds", type=float, default=90)
    args = ap.parse_args()
    conf = {"bootstrap.servers": args.bootstrap, "group.id": args.group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": args.session_ms, "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": args.strategy, "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000}
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    c = Consumer(conf)
    assign_log = open(args.out + ".assign", "a", buffering=1)  # noqa: SIM115

    def on_assign(consumer, parts) -> None:  # noqa: ANN001
        assign_log.write("assign " + " ".join(str(p.partition) for p in parts) + "\n")

    def on_revoke(consumer, parts) -> None:  # noqa: ANN001
        assign_log.write("revoke " + " ".join(str(p.partition) for p in parts) + "\n")

    c.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    out = open(args.out, "a", buffering=1)  # noqa: SIM115
    deadline = time.monotonic() + args.max_seconds
    while time.monotonic() < deadline and not os.path.exists(args.out + ".stop"):
        msgs = [m for m in c.consume(500, 0.2) if m.error() is None]
        if not msgs:
            continue
        out.write("".join(f"{m.partition()} {m.offset()} {m.value().decode()}\n" for m in msgs))
        out.flush()
        os.fsync(out.fileno())
        c.commit(asynchronous=False)
    c.close()
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
