"""A consume-transform-produce worker, run as its own OS process by
tests/integration/test_transactions_crash.py.

    python ctp_worker.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID TAG [--pause-at N]

confluent-kafka Consumer (read_committed, no auto commit) in GROUP plus a
transactional Producer. Each transaction consumes a batch, produces every
record to OUTPUT (same partition, same key, value ``<input value>|TAG|<txn>``),
sends the consumed offsets to the transaction and commits. It ends when the
group's committed offsets reach the input's end offsets.

Lines on stdout (the test reads them):
  ``COMMITTED <txn> <records>``  a transaction was committed
  ``MID <json>``   with ``--pause-at N``: transaction N has produced its records
                   (flushed: on the broker) and sent its offsets, and is not
                   committed. The worker then waits for a line on stdin; on
                   ``resume`` it sends more records (``...|TAG-late|N``; not with
                   ``--resume commit``) and commits, as a zombie that wakes up would.
  ``FENCED <json>``  that resumed transaction failed: the errors seen (exit 3)
  ``RESUMED-COMMIT`` it committed: the zombie was not fenced (exit 4)
  ``DONE <json>``  all input consumed and committed (exit 0)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition


def say(line: str) -> None:
    print(line, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    for name in ("bootstrap", "input", "output", "group", "transactional_id", "tag"):
        ap.add_argument(name)
    ap.add_argument("--pause-at", type=int, default=0)
    ap.add_argument("--resume", choices=("send", "commit"), default="send")
    ap.add_argument("--batch", type=int, default=250)
    ap.add_argument("--seconds", type=float, default=120)
    args = ap.parse_args()

    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
                         "log_level": 3})
    # Before consuming: this fences an earlier instance and aborts its open transaction,
    # and with it the offsets that transaction sent.
    producer.init_transactions(60)
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 1000, "log_level": 3})
    metadata = consumer.list_topics(args.input, timeout=10).topics[args.input]
    partitions = sorted(metadata.partitions)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(args.input, p), timeout=10, cached=False)[1]
            for p in partitions}
    consumer.subscribe([args.input])

    def all_committed() -> bool:
        committed = consumer.committed([TopicPartition(args.input, p) for p in partitions], timeout=10)
        return all(tp.offset == ends[tp.partition] for tp in committed)

    deadline = time.monotonic() + args.seconds
    txn = 0
    while time.monotonic() < deadline:
        msgs: list[Message] = []
        for m in consumer.consume(args.batch, 0.5):
            if m.error() is None:
                msgs.append(m)
            else:
                print(f"consumer error: {m.error()}", file=sys.stderr, flush=True)
        if not msgs:
            if all_committed():
                consumer.close()
                say("DONE " + json.dumps({str(p): o for p, o in ends.items()}))
                return 0
            continue
        txn += 1
        producer.begin_transaction()
        offsets: dict[int, int] = {}
        for m in msgs:
            producer.produce(args.output, key=m.key(), value=m.value() + f"|{args.tag}|{txn}".encode(),
                             partition=m.partition())
            offsets[m.partition()] = m.offset() + 1
        positions = [TopicPartition(args.input, p, o) for p, o in sorted(offsets.items())]
        if txn == args.pause_at:
            assert producer.flush(30) == 0
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            say("MID " + json.dumps({"txn": txn, "ids": [m.value().decode() for m in msgs],
                                     "offsets": {str(p): o for p, o in offsets.items()}}))
            command = sys.stdin.readline().strip()
            if command != "resume":
                return 5
            return resume_as_zombie(producer, args, msgs, txn)
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        say(f"COMMITTED {txn} {len(msgs)}")
    say("TIMEOUT")
    return 2


def resume_as_zombie(producer: Producer, args: argparse.Namespace, msgs: list[Message], txn: int) -> int:
    """Send more records in the paused transaction (unless ``--resume commit``), then commit it;
    report what failed."""
    failures: list[tuple[str, KafkaError]] = []
    if args.resume == "send":
        try:
            for m in msgs:
                producer.produce(args.output, key=m.key(), value=m.value() + f"|{args.tag}-late|{txn}".encode(),
                                 partition=m.partition())
            producer.flush(30)
        except KafkaException as e:
            failures.append(("send", e.args[0]))
    try:
        producer.commit_transaction(30)
    except KafkaException as e:
        failures.append(("commit", e.args[0]))
    errors: list[dict[str, Any]] = [{"source": source, "code": err.code(), "name": err.name(), "str": err.str(),
                                     "fatal": err.fatal()} for source, err in failures]
    if errors:
        say("FENCED " + json.dumps(errors))
        return 3
    say("RESUMED-COMMIT")
    return 4


if __name__ == "__main__":
    sys.exit(main())
