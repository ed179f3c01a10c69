"""``dmq partitions``: reassign partitions and elect preferred leaders (like
kafka-reassign-partitions.sh and kafka-leader-election.sh).

Both speak Kafka's admin APIs (AlterPartitionReassignments,
ListPartitionReassignments, ElectLeaders) to any broker. ``reassign
--throttle`` limits how fast new replicas copy data by setting the dynamic
broker config ``follower.replication.throttled.rate`` on the receiving brokers
(IncrementalAlterConfigs) and removes it when the move is done, as
kafka-reassign-partitions.sh does with ``--throttle`` and ``--verify``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from datetime import timedelta
from typing import Annotated, Any

import typer
from kio.schema.errors import ErrorCode
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dmq.cli.common import (
    ANSWER_TIMEOUT,
    Bootstrap,
    CommandConfigOption,
    fail,
    make_console,
    wire_client,
)
from dmq.cli.help import Typer
from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module

app = Typer(help="Move partitions between brokers and elect leaders.", no_args_is_help=True,
            pretty_exceptions_enable=False)
console = make_console()


# Seconds the broker may take for requests that make it wait (ElectLeaders,
# AlterPartitionReassignments), on top of ANSWER_TIMEOUT.
BROKER_WAIT = 30.0


def _client(bootstrap: str) -> contextlib.AbstractContextManager[WireClient]:
    return wire_client(bootstrap, "dmq-partitions")


def _waiting_request(c: WireClient, request: Any) -> Any:
    """A request the broker answers only after up to BROKER_WAIT seconds of its own."""
    c.sock.settimeout(BROKER_WAIT + ANSWER_TIMEOUT)
    try:
        return c.request(request)
    finally:
        c.sock.settimeout(ANSWER_TIMEOUT)


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


def ongoing(c: WireClient, wanted: set[tuple[str, int]]) -> dict[tuple[str, int], Any]:
    R = request_class(46, 0)
    resp = c.request(make(R, timeout=timedelta(seconds=10), topics=None))
    return {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions
            if (t.name, p.partition_index) in wanted}


THROTTLE_CONFIG = "follower.replication.throttled.rate"
SET, DELETE = 0, 1


def set_throttle(c: WireClient, brokers: list[int], rate: int | None) -> None:
    """SET (or, with ``rate`` None, DELETE) the follower throttle on each broker."""
    mod = request_module(44, 0)
    resources = tuple(make(mod.AlterConfigsResource, resource_type=4, resource_name=str(b), configs=(
        make(mod.AlterableConfig, name=THROTTLE_CONFIG, config_operation=DELETE if rate is None else SET,
             value=None if rate is None else str(rate)),)) for b in brokers)
    resp = c.request(make(request_class(44, 0), resources=resources, validate_only=False))
    failed = [f"broker {r.resource_name}: {r.error_code.name.upper()} {r.error_message or ''}"
              for r in resp.responses if r.error_code != ErrorCode.none]
    if failed:
        fail("cannot change the replication throttle: " + "; ".join(failed))


def _moving_to(c: WireClient, targets: dict[tuple[str, int], list[int]]) -> list[int]:
    """Brokers that receive a new replica of some partition in ``targets``."""
    md = c.request(make(request_class(3, 12), topics=tuple(
        make(request_module(3, 12).MetadataRequestTopic, name=t, topic_id=None) for t in {t for t, _ in targets}),
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False))
    current = {(t.name, p.partition_index): set(p.replica_nodes) for t in md.topics for p in t.partitions}
    return sorted({b for tp, r in targets.items() for b in r if b not in current.get(tp, set())})


@app.command()
def reassign(
    topic: Annotated[str | None, typer.Option(
        "--topic", "-t", metavar="TOPIC", help="topic of the partition to move")] = None,
    partition: Annotated[int | None, typer.Option(
        "--partition", "-p", min=0, metavar="PARTITION", help="partition to move")] = None,
    replicas: Annotated[str | None, typer.Option(
        "--replicas", "-r", metavar="IDS",
        help="new replicas' broker ids, e.g. 2,3,4 (the first is the preferred leader)")] = None,
    plan: Annotated[str | None, typer.Option(
        "--plan", metavar="FILE",
        help='a reassignment plan in Kafka\'s JSON (kafka-reassign-partitions.sh '
             '--reassignment-json-file): {"partitions": [{"topic": T, "partition": P, '
             '"replicas": [IDS]}, ...]}')] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="show progress until done")] = True,
    timeout_s: Annotated[float, typer.Option(
        "--timeout", metavar="SECONDS", help="seconds to wait for completion")] = 600,
    throttle: Annotated[int | None, typer.Option(
        "--throttle", min=1, metavar="BYTES_PER_S",
        help="bytes/s each receiving broker may copy; removed when done")] = None,
    cancel: Annotated[bool, typer.Option(
        "--cancel", help="stop the moves in progress of these partitions; they go back to their "
                         "replicas before the move")] = False,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Move partitions to other brokers while they keep serving."""
    targets: dict[tuple[str, int], list[int] | None] = {}
    if plan:
        try:
            with open(plan) as f:
                for e in json.load(f)["partitions"]:
                    targets[(str(e["topic"]), int(e["partition"]))] = (
                        None if cancel else [int(r) for r in e["replicas"]])
        except (OSError, ValueError, KeyError, TypeError) as e:
            fail(f"cannot read the plan {plan}: {e}", 2)
    elif cancel and topic is not None and partition is not None:
        if replicas or throttle is not None:
            fail("--cancel takes no --replicas or --throttle: the partition goes back where it was", 2)
        targets[(topic, partition)] = None
    elif topic is not None and partition is not None and replicas:
        try:
            targets[(topic, partition)] = [int(r) for r in replicas.split(",")]
        except ValueError:
            fail(f"--replicas expects broker ids like 2,3,4, got {replicas!r}", 2)
    else:
        fail("give --topic, --partition and --replicas (or --cancel), or --plan FILE", 2)
    mod = request_module(45, 0)
    by_topic: dict[str, list[Any]] = {}
    for (t, p), r in targets.items():
        by_topic.setdefault(t, []).append(make(mod.ReassignablePartition, partition_index=p,
                                               replicas=None if r is None else tuple(r)))
    with _client(bootstrap_server) as c:
        moves = {tp: r for tp, r in targets.items() if r is not None}
        receiving = _moving_to(c, moves) if throttle is not None and moves else []
        if receiving:
            set_throttle(c, receiving, throttle)
            console.print(f"throttled replication to {throttle:,} B/s on broker(s) "
                          f"{', '.join(map(str, receiving))}")
        resp = _waiting_request(c, make(request_class(45, 0), timeout=timedelta(seconds=BROKER_WAIT), topics=tuple(
            make(mod.ReassignableTopic, name=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
        failed = [(t.name, p.partition_index, p.error_code, p.error_message)
                  for t in resp.responses for p in t.partitions if p.error_code != ErrorCode.none]
        for t, p, code, message in failed:
            _error(f"{t}-{p}: {code.name.upper()}" + (f" {message}" if message else ""))
        if failed:
            if receiving:
                set_throttle(c, receiving, None)
            raise SystemExit(1)
        console.print(f"accepted {len(targets)} partition {'cancellation' if cancel else 'move'}(s)")
        if not wait:
            if receiving:
                console.print("the throttle stays until you run: dmq partitions throttle --clear "
                              f"--brokers {','.join(map(str, receiving))}")
            return
        wanted = set(targets)
        deadline = time.monotonic() + timeout_s
        with Progress(TextColumn("moving partitions"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console) as progress:
            task = progress.add_task("move", total=len(wanted))
            while True:
                left = ongoing(c, wanted)
                progress.update(task, completed=len(wanted) - len(left))
                if not left:
                    break
                if time.monotonic() > deadline:
                    fail(f"still moving after {timeout_s:.0f}s: "
                         + ", ".join(f"{t}-{p} (adding {list(x.adding_replicas)})" for (t, p), x in left.items()))
                time.sleep(0.5)
        if receiving:
            set_throttle(c, receiving, None)
            console.print("removed the replication throttle")
    console.print("[green]done[/green]: " + ("every move is cancelled" if cancel else
                                             "every partition is on its new replicas"))


@app.command()
def throttle(
    brokers: Annotated[str, typer.Option("--brokers", metavar="IDS", help="broker ids, e.g. 2,3")],
    rate: Annotated[int | None, typer.Option(
        "--rate", min=1, metavar="BYTES_PER_S", help="bytes/s for replicas being added")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="remove the throttle")] = False,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Set or clear follower.replication.throttled.rate on brokers (a dynamic broker config)."""
    if (rate is None) == (not clear):
        fail("give either --rate BYTES_PER_SECOND or --clear", 2)
    try:
        ids = [int(b) for b in brokers.split(",")]
    except ValueError:
        fail(f"--brokers expects broker ids like 2,3, got {brokers!r}", 2)
    with _client(bootstrap_server) as c:
        set_throttle(c, ids, rate)
    console.print(f"{'cleared' if clear else f'set {rate:,} B/s'} on broker(s) {', '.join(map(str, ids))}")


@app.command("elect-leaders")
def elect_leaders(
    topic: Annotated[str | None, typer.Option(
        "--topic", "-t", metavar="TOPIC", help="only this topic [default: every topic]")] = None,
    partition: Annotated[int | None, typer.Option(
        "--partition", "-p", min=0, metavar="PARTITION",
        help="only this partition of --topic [default: all of them]")] = None,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Move leadership back to each partition's preferred (first) replica."""
    if partition is not None and topic is None:
        fail("--partition needs --topic", 2)
    mod = request_module(43, 2)
    parts = None
    if topic is not None:
        with _client(bootstrap_server) as c:
            md = c.request(make(request_class(3, 12), topics=(make(
                request_module(3, 12).MetadataRequestTopic, name=topic, topic_id=None),),
                allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False))
        found = [p.partition_index for t in md.topics for p in t.partitions]
        if not found:
            fail(f"topic {topic} does not exist")
        chosen = [partition] if partition is not None else found
        parts = (make(mod.TopicPartitions, topic=topic, partitions=tuple(chosen)),)
    with _client(bootstrap_server) as c:
        resp = _waiting_request(c, make(request_class(43, 2), election_type=0,
                                        timeout=timedelta(seconds=BROKER_WAIT), topic_partitions=parts))
    table_rows = sorted((r.topic, p.partition_id, p.error_code) for r in resp.replica_election_results
                        for p in r.partition_result)
    elected = [r for r in table_rows if r[2] == ErrorCode.none]
    failed = [r for r in table_rows if r[2] not in (ErrorCode.none, ErrorCode.election_not_needed)]
    for t, p, _ in elected:
        console.print(f"{t}-{p}: preferred leader elected")
    for t, p, code in failed:
        _error(f"{t}-{p}: {code.name.upper()}")
    console.print(f"{len(elected)} elected, {len(table_rows) - len(elected) - len(failed)} already "
                  f"led by their preferred replica, {len(failed)} failed")
    if failed:
        raise SystemExit(1)
