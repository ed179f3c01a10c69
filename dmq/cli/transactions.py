"""``dmq transactions``: list, describe, find hanging and abort transactions (like
kafka-transactions.sh).

Kafka's admin APIs over dmq's wire client: ListTransactions to every broker,
FindCoordinator + DescribeTransactions for one transactional id, DescribeProducers
to a partition's leader (or to one broker, for ``find-hanging --broker-id``), and
WriteTxnMarkers(ABORT) to the leader for ``abort``.

A *hanging* transaction (KIP-664) is open on a partition while its coordinator
does not know it: left behind when a marker was lost, or written while the
brokers did not verify transactions (``transaction.partition.verification.enable``
off, or before dmq verified them). It holds the
partition's last stable offset, so ``read_committed`` consumers stop at it for
ever. ``find-hanging`` takes the open transactions whose producer last wrote
more than ``--max-transaction-timeout`` minutes ago (no live transaction can be
older than ``transaction.max.timeout.ms``) and keeps those the coordinator does
not show as in progress for that producer and partition; ``abort`` ends one.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from kio.schema.errors import ErrorCode

from dmq.cli.common import (
    ANSWER_TIMEOUT,
    Bootstrap,
    CommandConfigOption,
    client_security,
    fail,
    make_console,
    make_table,
    reach_reason,
    wire_client,
)
from dmq.cli.help import Typer
from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module
from dmq.protocol.extensions import CheckTransactionsRequest, Resolution
from dmq.protocol.lenient import epoch_ms
from dmq.transaction.records import half_group

app = Typer(help="Inspect transactions, find hanging ones and abort them.", no_args_is_help=True)
console = make_console()

# States in which the coordinator still has the transaction's partitions to finish.
IN_PROGRESS = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
# Seconds the broker may take to replicate an abort marker (WriteTxnMarkers), on top of
# ANSWER_TIMEOUT.
MARKER_WAIT = 30.0
# Seconds to wait for a transaction coordinator being elected or loaded.
COORDINATOR_WAIT = 15.0
RETRIABLE = (ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
             ErrorCode.not_coordinator)


def _code(error: ErrorCode) -> str:
    return error.name.upper()


def _when(ms: int, timespec: str = "milliseconds") -> str:
    """An instant in epoch milliseconds as ISO 8601 UTC; "-" for none (-1)."""
    if ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Partition:
    topic: str
    index: int
    leader: int
    replicas: tuple[int, ...]


class Brokers:
    """The cluster as the bootstrap broker's metadata shows it, with a connection to each
    broker opened when first asked; a broker that cannot be reached or stops answering is
    one line and exit 1."""

    def __init__(self, boot: WireClient, topics: list[str] | None = None) -> None:
        self.boot = boot
        md = boot.request(make(request_class(3, 12), topics=None if topics is None else tuple(
            make(request_module(3, 12).MetadataRequestTopic, name=t, topic_id=None) for t in topics),
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False))
        self.addresses = {b.node_id: (b.host, b.port) for b in md.brokers}
        self.partitions: dict[str, list[Partition] | None] = {}  # None: the topic does not exist
        for t in md.topics:
            if t.error_code != ErrorCode.none:
                self.partitions[t.name] = None
                continue
            self.partitions[t.name] = sorted((Partition(t.name, p.partition_index, p.leader_id,
                                                        tuple(p.replica_nodes)) for p in t.partitions),
                                             key=lambda p: p.index)
        self._clients: dict[int, WireClient] = {}

    def topic(self, name: str) -> list[Partition]:
        parts = self.partitions.get(name)
        if parts is None:
            fail(f"topic {name} does not exist")
        return parts

    def partition(self, topic: str, index: int) -> Partition:
        parts = self.topic(topic)
        found = next((p for p in parts if p.index == index), None)
        if found is None:
            fail(f"topic {topic} has no partition {index} (it has {len(parts)})")
        return found

    def check_broker(self, broker_id: int) -> None:
        if broker_id not in self.addresses:
            fail(f"broker {broker_id} is not in the cluster (brokers: "
                 f"{', '.join(map(str, sorted(self.addresses)))})")

    def ask(self, broker_id: int, request: Any, wait: float = 0.0) -> Any:
        """``request`` to broker ``broker_id``; ``wait``: seconds the broker may take on top."""
        self.check_broker(broker_id)
        host, port = self.addresses[broker_id]
        where = f"broker {broker_id} at {host}:{port}"
        c = self._clients.get(broker_id)
        if c is None:
            try:
                c = self._clients[broker_id] = WireClient(host, port, client_id="dmq-transactions",
                                                          timeout=ANSWER_TIMEOUT,
                                                          security=client_security())
            except OSError as e:
                fail(f"cannot reach {where}: {reach_reason(e, host)}")
        c.sock.settimeout(ANSWER_TIMEOUT + wait)
        try:
            return c.request(request)
        except TimeoutError:
            fail(f"{where} did not answer within {ANSWER_TIMEOUT + wait:g} s; is it overloaded or stopped?")
        except OSError as e:
            fail(f"lost the connection to {where}: {(e.strerror or str(e) or type(e).__name__).lower()}")

    def ask_listing(self, broker_id: int, request: Any) -> Any:
        """``ask`` a listing (ListGroups, ListTransactions) of every coordinator shard of
        the broker: one whose coordinator is loading is asked again, for up to
        COORDINATOR_WAIT seconds; the last answer is returned."""
        deadline = time.monotonic() + COORDINATOR_WAIT
        while True:
            resp = self.ask(broker_id, request)
            if resp.error_code not in RETRIABLE or time.monotonic() > deadline:
                return resp
            time.sleep(0.2)

    def close(self) -> None:
        for c in self._clients.values():
            c.close()


@contextlib.contextmanager
def _brokers(bootstrap: str, topics: list[str] | None = None) -> Iterator[Brokers]:
    with wire_client(bootstrap, "dmq-transactions") as boot:
        brokers = Brokers(boot, topics)
        try:
            yield brokers
        finally:
            brokers.close()


# ----------------------------------------------------------------------- requests


def _list_transactions(b: Brokers, producer_ids: tuple[int, ...] = ()) -> list[tuple[str, int, int, str]]:
    """(transactional id, coordinator, producer id, state) from every broker."""
    out = []
    for broker_id in sorted(b.addresses):
        resp = b.ask_listing(broker_id, make(request_class(66, 0), state_filters=(),
                                             producer_id_filters=producer_ids))
        if resp.error_code != ErrorCode.none:
            fail(f"broker {broker_id} cannot list transactions: {_code(resp.error_code)}")
        out += [(t.transactional_id, broker_id, t.producer_id, t.transaction_state) for t in resp.transaction_states]
    return sorted(out)


def _describe_transaction(b: Brokers, txn_id: str) -> tuple[int, Any]:
    """(coordinator, DescribeTransactions state) of one transactional id; a coordinator
    being elected or loaded is waited for."""
    deadline = time.monotonic() + COORDINATOR_WAIT
    while True:
        found = b.boot.request(make(request_class(10, 4), key_type=1, coordinator_keys=(txn_id,))).coordinators[0]
        error = found.error_code
        if error == ErrorCode.none:
            state = b.ask(found.node_id, make(request_class(65, 0), transactional_ids=(txn_id,))).transaction_states[0]
            error = state.error_code
            if error == ErrorCode.none:
                return found.node_id, state
        if error == ErrorCode.transactional_id_not_found:
            fail(f"transactional id {txn_id} does not exist")
        if error not in RETRIABLE or time.monotonic() > deadline:
            fail(f"cannot describe transactional id {txn_id}: {_code(error)}")
        time.sleep(0.2)


def _half_checks(b: Brokers, coordinator: int, txn_id: str) -> tuple[str, Any | None] | None:
    """(producer group, check state) of a half-message transactional id (docs/half-messages.md),
    None for other ids."""
    group = half_group(txn_id)
    if group is None:
        return None
    resp = b.ask(coordinator, make(CheckTransactionsRequest, producer_group=group, describe_only=True, answers=()))
    if resp.error_code != ErrorCode.none:
        fail(f"cannot read the checks of {txn_id}: {_code(resp.error_code)}")
    return group, next((t for t in resp.transactions if t.transactional_id == txn_id), None)


def _describe_producers(b: Brokers, broker_id: int, partitions: list[tuple[str, int]]
                        ) -> dict[tuple[str, int], tuple[ErrorCode, tuple[Any, ...]]]:
    mod = request_module(61, 0)
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    resp = b.ask(broker_id, make(request_class(61, 0), topics=tuple(
        make(mod.TopicRequest, name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())))
    return {(t.name, p.partition_index): (p.error_code, p.active_producers) for t in resp.topics for p in t.partitions}


def _partition_producers(b: Brokers, topic: str, index: int, broker_id: int | None) -> tuple[int, tuple[Any, ...]]:
    """(broker asked, active producers) of one partition: its leader's unless ``broker_id``."""
    part = b.partition(topic, index)
    target = part.leader if broker_id is None else broker_id
    if target < 0:
        fail(f"{topic}-{index} has no leader")
    error, producers = _describe_producers(b, target, [(topic, index)])[(topic, index)]
    if error != ErrorCode.none:
        fail(f"broker {target} cannot describe the producers of {topic}-{index}: {_code(error)}")
    return target, producers


# ----------------------------------------------------------------------- commands


@app.command("list")
def list_transactions(bootstrap_server: Bootstrap = "127.0.0.1:9092",
                command_config: CommandConfigOption = None) -> None:
    """List the transactional ids every broker coordinates, with their producer ids and states."""
    with _brokers(bootstrap_server, topics=[]) as b:
        rows = _list_transactions(b)
    if not rows:
        console.print("No transactional ids.")
        return
    table = make_table("transactional-id", "coordinator", "producer-id", "state",
                       numbers=("coordinator", "producer-id"))
    for txn_id, coordinator, pid, state in rows:
        table.add_row(txn_id, str(coordinator), str(pid), state)
    console.print(table)


@app.command()
def describe(
    transactional_id: Annotated[str, typer.Option(
        "--transactional-id", metavar="ID", help="the transactional id to describe")],
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Show a transactional id's coordinator, producer id and epoch, state, timeout, and the
    start and partitions of its transaction."""
    with _brokers(bootstrap_server, topics=[]) as b:
        coordinator, s = _describe_transaction(b, transactional_id)
        checks = _half_checks(b, coordinator, transactional_id)
    start = epoch_ms(s.transaction_start_time)
    parts = [f"{t.topic}-{p}" for t in s.topics for p in t.partitions]
    rows = [
        ("transactional-id", s.transactional_id), ("coordinator", str(coordinator)),
        ("producer-id", str(s.producer_id)), ("producer-epoch", str(s.producer_epoch)),
        ("state", s.transaction_state),
        ("timeout-ms", str(int(s.transaction_timeout.total_seconds() * 1000))),
        ("start-time", _when(start)), ("duration-ms", "-" if start < 0 else str(max(0, _now_ms() - start))),
        ("partitions", ", ".join(parts) or "-"),
    ]
    if checks is not None:
        group, half = checks
        answer = "-" if half is None or half.last_answer < 0 else Resolution(half.last_answer).name
        rows += [("producer-group", group), ("checks-made", str(half.checks) if half is not None else "0"),
                 ("last-answer", answer),
                 ("last-check", _when(int(half.last_check_ms)) if half is not None else "-")]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        console.print(f"{key.ljust(width)}  {value}", highlight=False, soft_wrap=True)


def _producers_table(producers: tuple[Any, ...]) -> Any:
    table = make_table("producer\nid", "epoch", "coordinator\nepoch", "last\nsequence", "last write (UTC)",
                       "txn start\noffset",
                       numbers=("producer\nid", "epoch", "coordinator\nepoch", "last\nsequence", "txn start\noffset"))
    for p in producers:
        table.add_row(str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch), str(p.last_sequence),
                      _when(p.last_timestamp, "seconds"), str(p.current_txn_start_offset))
    return table


@app.command("describe-producers")
def describe_producers(
    topic: Annotated[str, typer.Option("--topic", "-t", metavar="TOPIC", help="topic of the partition")],
    partition: Annotated[int, typer.Option("--partition", "-p", min=0, metavar="PARTITION", help="the partition")],
    broker_id: Annotated[int | None, typer.Option(
        "--broker-id", metavar="ID", help="ask this replica [default: the leader]")] = None,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Show a partition's active producers: id, epoch, coordinator epoch, last sequence and
    timestamp, and the first offset of an open transaction (-1: none)."""
    with _brokers(bootstrap_server, topics=[topic]) as b:
        target, producers = _partition_producers(b, topic, partition, broker_id)
    console.print(f"Partition {topic}-{partition}  broker {target}  active producers {len(producers)}",
                  highlight=False)
    if producers:
        console.print(_producers_table(producers))


@dataclass
class OpenTransaction:
    topic: str
    partition: int
    producer: Any  # DescribeProducers' ProducerState


def _is_hanging(txn: OpenTransaction, state: Any | None) -> bool:
    """Whether the coordinator's view (DescribeTransactions, None: no transactional id has
    the producer id) fails to account for an open transaction on a partition."""
    if state is None or state.error_code != ErrorCode.none:
        return True
    p = txn.producer
    if state.producer_id != p.producer_id or state.transaction_state not in IN_PROGRESS:
        return True
    if state.transaction_state == "Ongoing" and state.producer_epoch != p.producer_epoch:
        return True
    return (txn.topic, txn.partition) not in {(t.topic, i) for t in state.topics for i in t.partitions}


@app.command("find-hanging")
def find_hanging(
    broker_id: Annotated[int | None, typer.Option(
        "--broker-id", metavar="ID",
        help="look at the partitions with a replica on this broker, as that broker sees them")] = None,
    topic: Annotated[str | None, typer.Option(
        "--topic", "-t", metavar="TOPIC", help="look at this topic's partitions only")] = None,
    partition: Annotated[int | None, typer.Option(
        "--partition", "-p", min=0, metavar="PARTITION", help="only this partition of --topic")] = None,
    max_transaction_timeout: Annotated[int, typer.Option(
        "--max-transaction-timeout", min=0, metavar="MINUTES",
        help="the brokers' transaction.max.timeout.ms in minutes: an open transaction whose "
             "producer wrote nothing for longer is a candidate")] = 15,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Find open transactions the transaction coordinator does not know (KIP-664): they hold
    the last stable offset, and read_committed consumers, for ever."""
    if partition is not None and topic is None:
        fail("--partition needs --topic", 2)
    with _brokers(bootstrap_server, topics=None if topic is None else [topic]) as b:
        if broker_id is not None:
            b.check_broker(broker_id)
        if topic is not None:
            parts = [b.partition(topic, partition)] if partition is not None else b.topic(topic)
        else:
            parts = [p for t in sorted(b.partitions) for p in b.partitions[t] or []]
        by_broker: dict[int, list[tuple[str, int]]] = {}
        for p in parts:
            if broker_id is not None:
                if broker_id in p.replicas:
                    by_broker.setdefault(broker_id, []).append((p.topic, p.index))
            elif p.leader < 0:
                print(f"warning: {p.topic}-{p.index} has no leader; not looked at", file=sys.stderr)
            else:
                by_broker.setdefault(p.leader, []).append((p.topic, p.index))
        now, limit = _now_ms(), max_transaction_timeout * 60_000
        candidates: list[OpenTransaction] = []
        for target, tps in sorted(by_broker.items()):
            for (t, i), (error, producers) in sorted(_describe_producers(b, target, tps).items()):
                if error != ErrorCode.none:
                    print(f"warning: broker {target} cannot describe the producers of {t}-{i}: "
                          f"{_code(error)}", file=sys.stderr)
                candidates += [OpenTransaction(t, i, p) for p in producers
                               if p.current_txn_start_offset >= 0 and now - p.last_timestamp > limit]
        states: dict[int, Any] = {}
        if candidates:
            pids = tuple(sorted({c.producer.producer_id for c in candidates}))
            for txn_id, coordinator, pid, _ in _list_transactions(b, pids):
                state = b.ask(coordinator, make(request_class(65, 0), transactional_ids=(txn_id,)))
                states[pid] = state.transaction_states[0]
        hanging = [c for c in candidates if _is_hanging(c, states.get(c.producer.producer_id))]
    if not hanging:
        console.print("No hanging transactions.")
        return
    # Minutes since the producer last wrote to the partition (Kafka's "Duration(min)").
    table = make_table("topic", "partition", "producer\nid", "epoch", "coordinator\nepoch", "start\noffset",
                       "idle\nminutes", numbers=("partition", "producer\nid", "epoch", "coordinator\nepoch",
                                                  "start\noffset", "idle\nminutes"))
    for h in hanging:
        p = h.producer
        table.add_row(h.topic, str(h.partition), str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
                      str(p.current_txn_start_offset), str((now - p.last_timestamp) // 60_000))
    console.print(table)
    first = hanging[0]
    console.print(f"Abort one with: dmq transactions abort --topic {first.topic} --partition {first.partition} "
                  f"--start-offset {first.producer.current_txn_start_offset}", highlight=False, soft_wrap=True)


@app.command()
def abort(
    topic: Annotated[str, typer.Option("--topic", "-t", metavar="TOPIC", help="topic of the partition")],
    partition: Annotated[int, typer.Option("--partition", "-p", min=0, metavar="PARTITION", help="the partition")],
    start_offset: Annotated[int, typer.Option(
        "--start-offset", min=0, metavar="OFFSET", help="first offset of the open transaction to abort")],
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Abort the open transaction that starts at OFFSET on a partition: an ABORT marker from
    its producer id and epoch, written by the partition's leader. Its records vanish for
    read_committed consumers and the last stable offset moves past it."""
    with _brokers(bootstrap_server, topics=[topic]) as b:
        leader, producers = _partition_producers(b, topic, partition, None)
        match = next((p for p in producers if p.current_txn_start_offset == start_offset), None)
        if match is None:
            starts = sorted(p.current_txn_start_offset for p in producers if p.current_txn_start_offset >= 0)
            fail(f"no open transaction starts at offset {start_offset} of {topic}-{partition} ("
                 + (f"open ones start at {', '.join(map(str, starts))})" if starts else "it has none)"))
        mod = request_module(27, 1)
        resp = b.ask(leader, make(request_class(27, 1), markers=(make(
            mod.WritableTxnMarker, producer_id=match.producer_id, producer_epoch=match.producer_epoch,
            transaction_result=False, coordinator_epoch=max(match.coordinator_epoch, 0),
            topics=(make(mod.WritableTxnMarkerTopic, name=topic, partition_indexes=(partition,)),)),)),
            wait=MARKER_WAIT)
        error = resp.markers[0].topics[0].partitions[0].error_code
        if error != ErrorCode.none:
            fail(f"cannot abort the transaction of producer {match.producer_id} on {topic}-{partition}: "
                 f"{_code(error)}")
    console.print(f"Aborted the transaction of producer {match.producer_id} (epoch {match.producer_epoch}) "
                  f"that started at offset {start_offset} of {topic}-{partition}.", highlight=False)

