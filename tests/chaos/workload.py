"""Clients of a chaos run, each a process inside the run's client namespace.

    python -m chaos.workload produce  --bootstrap B --topic T --partitions N --producer K --rate R --out F
    python -m chaos.workload txn-produce --bootstrap B --topic T --partitions N --producer K --rate R --size S --out F
    python -m chaos.workload consume  --bootstrap B --topic T --group G --out F
    python -m chaos.workload agent    --bootstrap B

``produce`` writes one JSON line per acknowledgement (``{"p", "o", "v"}``) or
error (``{"err", "v"}``) and sends "<producer>-<seq>" values round robin over
the partitions until its standard input closes, then flushes and exits.
``txn-produce`` is a transactional producer (``transactional.id`` chaos-txn-K):
transactions of ``--size`` records "<producer>-t<txn>-<i>" over consecutive
partitions, one JSON line per outcome (see ``txn_produce``).
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

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec


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


def _txn_producer(args: argparse.Namespace) -> Producer:
    # The existing producer's failover settings (see produce). transaction.timeout.ms bounds how
    # long a transaction its producer abandoned keeps the last stable offset back: the
    # coordinator aborts it after that (plus its sweep interval). message.timeout.ms may not
    # exceed it; a record not delivered by then makes the transaction abortable.
    return Producer({"bootstrap.servers": args.bootstrap, "transactional.id": f"chaos-txn-{args.producer}",
                     "acks": "all", "linger.ms": 5, "log_level": 0,
                     "transaction.timeout.ms": args.txn_timeout_ms, "message.timeout.ms": args.txn_timeout_ms,
                     "topic.metadata.refresh.interval.ms": 1000,
                     "socket.timeout.ms": min(10_000, args.txn_timeout_ms),  # librdkafka: at most that
                     "reconnect.backoff.max.ms": 1000})


def txn_produce(args: argparse.Namespace) -> None:
    """Transactions until stdin closes (or ``--max-seconds``), one JSON line per outcome:

    - ``{"txn", "outcome": "committed", "values"}``: commit_transaction returned;
    - ``"aborted"``: an error before the commit was sent, or an abortable error from it, and
      abort_transaction returned (or the transaction was never committed: nothing was sent);
    - ``"unknown"``: commit (or the abort after it) raised an error that leaves the outcome
      open (fatal, fenced, timed out): a new producer with the same transactional.id then
      fences the old one and completes or aborts its transaction (init_transactions).

    Also ``{"init": ...}`` lines for each init_transactions and ``{"exit": true}`` last, after
    a clean end: no transaction of this id is left open (a discarded producer's is fenced by
    a new one's init_transactions, which completes or aborts it)."""
    out = open(args.out, "a", buffering=1)  # noqa: SIM115 - for the process's life
    closed = _stdin_closed()
    deadline = time.monotonic() + args.max_seconds
    timeout = args.txn_timeout_ms / 1000

    def done() -> bool:
        return closed.is_set() or time.monotonic() > deadline

    def write(entry: dict[str, Any]) -> None:
        out.write(json.dumps({**entry, "t": time.time()}) + "\n")

    def new_producer(final: bool = False) -> Producer | None:
        """A producer whose init_transactions succeeded; retried (a fresh client after a fatal
        error) until done, or for a final one for 60 s more."""
        until = min(deadline, time.monotonic() + 60) if final else deadline
        while time.monotonic() < until and (final or not closed.is_set()):
            p = _txn_producer(args)
            while time.monotonic() < until:
                try:
                    p.init_transactions(timeout)
                    write({"init": True})
                    return p
                except KafkaException as e:
                    err = e.args[0]
                    write({"init": False, "err": str(err)})
                    if not err.retriable() or (closed.is_set() and not final):
                        break
            _discard(p)
        return None

    p = new_producer()
    txn = 0
    unresolved = False  # a discarded producer's transaction may be open: fence it before leaving
    next_at = time.monotonic()
    while p is not None and not done():
        if time.monotonic() < next_at:
            time.sleep(min(next_at - time.monotonic(), 0.2))
            continue
        next_at = max(next_at + 1 / args.rate, time.monotonic())  # no burst after an outage
        values: list[str] = []
        stage = "begin"
        try:
            p.begin_transaction()
            stage = "produce"
            for i in range(args.size):
                value = f"{args.producer}-t{txn}-{i}"
                p.produce(args.topic, value.encode(), partition=(txn * args.size + i) % args.partitions)
                values.append(value)
                p.poll(0)
            stage = "commit"
            _retrying(p.commit_transaction, timeout, done)
            write({"txn": txn, "outcome": "committed", "values": values})
        except (KafkaException, BufferError) as e:
            err: Any = e.args[0] if isinstance(e, KafkaException) else e
            abortable = isinstance(e, BufferError) or err.txn_requires_abort()
            # Before commit_transaction nothing can commit the records: no EndTxn was sent.
            # After it, only an abort that succeeds (the coordinator refuses to abort a
            # committed transaction) tells the outcome.
            entry = {"txn": txn, "values": values, "stage": stage, "err": str(err)}
            if abortable or stage != "commit":
                try:
                    _retrying(p.abort_transaction, timeout, done)
                    write({**entry, "outcome": "aborted"})
                    txn += 1
                    continue
                except KafkaException as abort_error:
                    entry["abort_err"] = str(abort_error.args[0])
            outcome = "unknown" if stage == "commit" else "aborted"
            write({**entry, "outcome": outcome})
            _discard(p)
            p = new_producer()
            unresolved = p is None  # no new producer fenced the old one's transaction yet
        txn += 1
    if p is None and unresolved:
        p = new_producer(final=True)  # fence the old producer: its transaction ends now
        unresolved = p is None
    if p is not None:
        _discard(p)
    write({"exit": True, "last_unresolved": unresolved})
    out.close()


def _retrying(call: Any, timeout: float, done: Any) -> None:
    """A transactional call, made again while it fails retriably (librdkafka allows that: a
    timed-out commit or abort goes on in the background), up to three attempts."""
    for attempt in range(3):
        try:
            call(timeout)
            return
        except KafkaException as e:
            err = e.args[0]
            if not err.retriable() or err.txn_requires_abort() or err.fatal() or attempt == 2 or done():
                raise


def _discard(p: Producer) -> None:
    """Drop a producer without waiting for what it still holds."""
    try:
        p.purge()
        p.flush(0)
    except Exception:  # noqa: BLE001 - a producer in a fatal state may refuse; it is dropped anyway
        pass


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

    def end_offsets(self, req: dict[str, Any]) -> dict[str, Any]:
        """[high watermark, last stable offset] per partition: ListOffsets for the latest
        offset at read_uncommitted and at read_committed."""
        specs = {TopicPartition(req["topic"], p): OffsetSpec.latest() for p in range(req["partitions"])}
        out: dict[str, list[int]] = {str(p): [-1, -1] for p in range(req["partitions"])}
        for k, level in enumerate((IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED)):
            for tp, future in self.admin.list_offsets(specs, isolation_level=level, request_timeout=10).items():
                out[str(tp.partition)][k] = future.result(timeout=15).offset
        return out

    def read_committed(self, req: dict[str, Any]) -> dict[str, Any]:
        """Every record a read_committed consumer gets from the start of each partition to its
        end (partition EOF: the last stable offset), into ``out``."""
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"chaos-check-{time.time_ns()}",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 0,
                      "isolation.level": "read_committed", "enable.partition.eof": True})
        c.assign([TopicPartition(req["topic"], p, 0) for p in range(req["partitions"])])
        got: dict[str, list[tuple[int, str]]] = {str(p): [] for p in range(req["partitions"])}
        remaining = set(got)
        deadline = time.monotonic() + req.get("timeout", 120)
        while remaining and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    remaining.discard(str(msg.partition()))
                continue
            got[str(msg.partition())].append((int(msg.offset() or 0), (msg.value() or b"").decode()))
        positions = {str(tp.partition): tp.offset for tp in c.position(
            [TopicPartition(req["topic"], p) for p in range(req["partitions"])])}
        c.close()
        with open(req["out"], "w") as f:
            json.dump({"records": got, "positions": positions, "incomplete": sorted(remaining)}, f)
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
    tp = sub.add_parser("txn-produce")
    tp.add_argument("--bootstrap", required=True)
    tp.add_argument("--topic", required=True)
    tp.add_argument("--partitions", type=int, required=True)
    tp.add_argument("--producer", type=int, required=True)
    tp.add_argument("--rate", type=float, default=5, help="transactions/s")
    tp.add_argument("--size", type=int, default=4, help="records per transaction")
    tp.add_argument("--txn-timeout-ms", type=int, default=20_000)
    tp.add_argument("--max-seconds", type=float, default=3600)
    tp.add_argument("--out", required=True)
    cp = sub.add_parser("consume")
    cp.add_argument("--bootstrap", required=True)
    cp.add_argument("--topic", required=True)
    cp.add_argument("--group", required=True)
    cp.add_argument("--out", required=True)
    ag = sub.add_parser("agent")
    ag.add_argument("--bootstrap", required=True)
    args = ap.parse_args()
    {"produce": produce, "txn-produce": txn_produce, "consume": consume, "agent": agent}[args.cmd](args)


if __name__ == "__main__":
    main()
