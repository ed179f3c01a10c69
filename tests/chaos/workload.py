"""Clients of a chaos run, each a process inside the run's client namespace.

    python -m chaos.workload produce  --bootstrap B --topic T --partitions N --producer K --rate R --out F
    python -m chaos.workload consume  --bootstrap B --topic T --group G --out F
    python -m chaos.workload agent    --bootstrap B

``produce`` writes one JSON line per acknowledgement (``{"p", "o", "v"}``) or
error (``{"err", "v"}``) and sends "<producer>-<seq>" values round robin over
the partitions until its standard input closes, then flushes and exits.
``consume`` is a consumer group member that commits as it goes. ``agent``
answers JSON requests on standard input (metadata, watermarks, committed
offsets, a dump of a topic) so that the harness, outside the namespaces, can
see the cluster. Every loop is bounded by its caller closing stdin or a deadline.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient


def _stdin_closed() -> threading.Event:
    closed = threading.Event()

    def wait() -> None:
        sys.stdin.read()
        closed.set()

    threading.Thread(target=wait, daemon=True).start()
    return closed


def produce(args: argparse.Namespace) -> None:
    out = open(args.out, "a", buffering=1)  # noqa: SIM115 - for the process's life
    # socket.timeout.ms: a request in flight to a leader that the network cut off gets no
    # answer and no reset; librdkafka waits this long (60 s by default) before it gives the
    # connection up and sends the batch to the new leader. No broker can shorten that, so
    # the producers here use 10 s, as an application that wants fast failover would.
    # reconnect.backoff.max.ms: while a broker is unreachable librdkafka backs off its
    # reconnects up to 10 s by default, so it may come back to a healed broker 10 s late.
    p = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 600_000, "log_level": 0,
                  "topic.metadata.refresh.interval.ms": 1000, "socket.timeout.ms": 10_000,
                  "reconnect.backoff.max.ms": 1000})

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            out.write(json.dumps({"p": msg.partition(), "o": msg.offset(),
                                  "v": msg.value().decode(), "t": time.time()}) + "\n")
        else:
            out.write(json.dumps({"err": str(err), "v": msg.value().decode(), "t": time.time()}) + "\n")

    closed = _stdin_closed()
    seq = 0
    start = time.monotonic()
    while not closed.is_set():
        due = int((time.monotonic() - start) * args.rate)
        while seq < due and not closed.is_set():
            value = f"{args.producer}-{seq}".encode()
            try:
                p.produce(args.topic, value, partition=seq % args.partitions, on_delivery=delivered)
            except BufferError:
                break  # the local queue is full while the cluster is unavailable: wait
            seq += 1
        p.poll(0.05)
    p.flush(120)
    out.close()


def consume(args: argparse.Namespace) -> None:
    c = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0,
                  "session.timeout.ms": 10_000})
    c.subscribe([args.topic])
    closed = _stdin_closed()
    seen = 0
    while not closed.is_set():
        msg = c.poll(0.2)
        if msg is None or msg.error():
            continue
        seen += 1
        if seen % 50 == 0:
            try:
                c.commit(asynchronous=True)
            except Exception:  # noqa: BLE001 - a commit during a fault may fail; the next one retries
                pass
    try:
        c.commit(asynchronous=False)
    except Exception:  # noqa: BLE001
        pass
    c.close()
    with open(args.out, "w") as f:
        f.write(json.dumps({"consumed": seen}))


class Agent:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})

    def metadata(self, req: dict[str, Any]) -> dict[str, Any]:
        md = self.admin.list_topics(timeout=5)
        topics = {}
        for name, t in md.topics.items():
            if t.error is not None and not t.partitions:
                continue
            topics[name] = {str(p): {"leader": pm.leader, "replicas": list(pm.replicas),
                                     "isr": list(pm.isrs)} for p, pm in t.partitions.items()}
        return {"controller": md.controller_id, "brokers": sorted(md.brokers), "topics": topics}

    def _consumer(self) -> Consumer:
        return Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"chaos-check-{time.time_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 0})

    def watermarks(self, req: dict[str, Any]) -> dict[str, Any]:
        c = self._consumer()
        try:
            return {str(p): list(c.get_watermark_offsets(TopicPartition(req["topic"], p), timeout=5))
                    for p in range(req["partitions"])}
        finally:
            c.close()

    def committed(self, req: dict[str, Any]) -> dict[str, Any]:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": req["group"], "log_level": 0,
                      "enable.auto.commit": False})
        try:
            tps = c.committed([TopicPartition(req["topic"], p) for p in range(req["partitions"])], timeout=10)
            return {str(tp.partition): tp.offset for tp in tps}
        finally:
            c.close()

    def dump(self, req: dict[str, Any]) -> dict[str, Any]:
        """Every record of the topic up to the high watermarks, into ``out``."""
        ends = self.watermarks(req)
        c = self._consumer()
        c.assign([TopicPartition(req["topic"], p, 0) for p in range(req["partitions"])])
        got: dict[str, list[tuple[int, str]]] = {str(p): [] for p in range(req["partitions"])}
        remaining = {p for p in got if ends[p][1] > 0}
        deadline = time.monotonic() + req.get("timeout", 120)
        while remaining and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            key = str(msg.partition())
            got[key].append((msg.offset(), msg.value().decode()))
            if msg.offset() + 1 >= ends[key][1]:
                remaining.discard(key)
        c.close()
        with open(req["out"], "w") as f:
            json.dump({"records": got, "high_watermarks": {p: e[1] for p, e in ends.items()},
                       "incomplete": sorted(remaining)}, f)
        return {"count": sum(len(v) for v in got.values()), "incomplete": sorted(remaining)}


def agent(args: argparse.Namespace) -> None:
    a = Agent(args.bootstrap)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            resp: dict[str, Any] = getattr(a, req["op"])(req)
        except Exception as e:  # noqa: BLE001 - the harness decides what a failure means
            resp = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(resp) + "\n")
        sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("produce")
    pp.add_argument("--bootstrap", required=True)
    pp.add_argument("--topic", required=True)
    pp.add_argument("--partitions", type=int, required=True)
    pp.add_argument("--producer", type=int, required=True)
    pp.add_argument("--rate", type=float, default=200)
    pp.add_argument("--out", required=True)
    cp = sub.add_parser("consume")
    cp.add_argument("--bootstrap", required=True)
    cp.add_argument("--topic", required=True)
    cp.add_argument("--group", required=True)
    cp.add_argument("--out", required=True)
    ag = sub.add_parser("agent")
    ag.add_argument("--bootstrap", required=True)
    args = ap.parse_args()
    {"produce": produce, "consume": consume, "agent": agent}[args.cmd](args)


if __name__ == "__main__":
    main()
