"""``dmq groups``: list, describe, delete and reset consumer groups (like kafka-consumer-groups.sh)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from rich.table import Table

from dmq.cli.common import ADMIN_TIMEOUT as TIMEOUT
from dmq.cli.common import Bootstrap, admin_client, fail, make_console, result

app = typer.Typer(help="Manage consumer groups.", no_args_is_help=True)
console = make_console()


def _describe(a: AdminClient, group: str) -> Any:
    return result(a.describe_consumer_groups([group])[group], f"cannot describe group {group}")


def _committed(a: AdminClient, group: str) -> dict[tuple[str, int], int]:
    fut = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    res = result(fut, f"cannot fetch offsets of group {group}")
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions if tp.offset >= 0}


def _list_offsets(a: AdminClient, tps: list[tuple[str, int]], spec: OffsetSpec) -> dict[tuple[str, int], int]:
    if not tps:
        return {}
    futs = a.list_offsets({TopicPartition(t, p): spec for t, p in tps})
    return {(tp.topic, tp.partition): result(f, "cannot list offsets").offset for tp, f in futs.items()}


def _state_name(state: Any) -> str:
    name = getattr(state, "name", str(state))
    return {"STABLE": "Stable", "EMPTY": "Empty", "DEAD": "Dead", "PREPARING_REBALANCE": "PreparingRebalance",
            "COMPLETING_REBALANCE": "CompletingRebalance"}.get(name, name.title())


@app.command("list")
def list_groups(bootstrap_server: Bootstrap = "127.0.0.1:9092") -> None:
    """List consumer groups with their state."""
    a = admin_client(bootstrap_server)  # keep a reference: a collected client cancels its futures
    res = result(a.list_consumer_groups(), "cannot list groups")
    table = Table("group", "state")
    for g in sorted(res.valid, key=lambda g: g.group_id):
        table.add_row(g.group_id, _state_name(g.state))
    console.print(table)


@app.command()
def describe(group: str, bootstrap_server: Bootstrap = "127.0.0.1:9092") -> None:
    """State, members and per-partition committed offset, log end offset and lag."""
    a = admin_client(bootstrap_server)
    desc = _describe(a, group)
    committed = _committed(a, group)
    owner: dict[tuple[str, int], Any] = {}
    for m in desc.members:
        for tp in (m.assignment.topic_partitions if m.assignment else []):
            owner[(tp.topic, tp.partition)] = m
    tps = sorted(set(committed) | set(owner))
    ends = _list_offsets(a, tps, OffsetSpec.latest())
    state = _state_name(desc.state)
    if state == "Dead" and not committed:
        fail(f"group {group} does not exist")
    console.print(f"Group [bold]{group}[/bold]  state {state}  members {len(desc.members)}  "
                  f"protocol {desc.partition_assignor or '-'}")
    table = Table("topic", "partition", "current-offset", "log-end-offset", "lag", "consumer-id", "host",
                  "client-id")
    for t, p in tps:
        cur = committed.get((t, p))
        end = ends.get((t, p))
        lag = "-" if cur is None or end is None else str(max(0, end - cur))
        m = owner.get((t, p))
        table.add_row(t, str(p), "-" if cur is None else str(cur), "-" if end is None else str(end), lag,
                      m.member_id if m else "-", m.host if m else "-", m.client_id if m else "-")
    console.print(table)


@app.command()
def delete(group: str, bootstrap_server: Bootstrap = "127.0.0.1:9092") -> None:
    """Delete an empty group and its committed offsets."""
    a = admin_client(bootstrap_server)
    result(a.delete_consumer_groups([group])[group], f"cannot delete group {group}")
    console.print(f"Deleted group [bold]{group}[/bold].")


@app.command("reset-offsets")
def reset_offsets(
    group: Annotated[str, typer.Option("--group", "-g", help="the consumer group whose offsets move")],
    topic: Annotated[str, typer.Option("--topic", "-t", help="TOPIC or TOPIC:P1,P2")],
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="to each partition's log start offset")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="to each partition's log end offset")] = False,
    to_offset: Annotated[int | None, typer.Option("--to-offset", help="to this offset (clamped to each partition's range)")] = None,
    to_datetime: Annotated[str | None, typer.Option("--to-datetime", help="ISO 8601, e.g. 2026-01-02T03:04:05")] = None,
    shift_by: Annotated[int | None, typer.Option("--shift-by", help="by this many records from the committed offset (negative: back)")] = None,
    execute: Annotated[bool, typer.Option("--execute", help="apply; without it this is a dry run")] = False,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
) -> None:
    """Move a stopped group's committed offsets (dry run unless --execute)."""
    chosen = [to_earliest, to_latest, to_offset is not None, to_datetime is not None, shift_by is not None]
    if sum(chosen) != 1:
        fail("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by", 2)
    a = admin_client(bootstrap_server)
    name, _, parts = topic.partition(":")
    md = a.list_topics(timeout=TIMEOUT)
    if name not in md.topics or md.topics[name].error is not None:
        fail(f"topic {name} does not exist")
    try:
        partitions = [int(p) for p in parts.split(",")] if parts else sorted(md.topics[name].partitions)
    except ValueError:
        fail(f"--topic expects TOPIC or TOPIC:P1,P2 with partition numbers, got {topic!r}", 2)
    tps = [(name, p) for p in partitions]
    desc = _describe(a, group)
    state = _state_name(desc.state)
    if state not in ("Empty", "Dead"):
        fail(f"assignments can only be reset if the group '{group}' is inactive, but the current "
             f"state is {state}; stop its consumers first")
    earliest = _list_offsets(a, tps, OffsetSpec.earliest())
    latest = _list_offsets(a, tps, OffsetSpec.latest())
    committed = _committed(a, group)
    target: dict[tuple[str, int], int] = {}
    if to_datetime is not None:
        try:
            ts = int(datetime.fromisoformat(to_datetime).timestamp() * 1000)
        except ValueError:
            fail(f"cannot parse --to-datetime {to_datetime!r}: use ISO 8601 like 2026-01-02T03:04:05")
        by_time = _list_offsets(a, tps, OffsetSpec.for_timestamp(ts))
    for tp in tps:
        lo, hi = earliest[tp], latest[tp]
        if to_earliest:
            new = lo
        elif to_latest:
            new = hi
        elif to_offset is not None:
            new = to_offset
        elif shift_by is not None:
            new = committed.get(tp, lo) + shift_by
        else:
            new = by_time[tp] if by_time[tp] >= 0 else hi
        target[tp] = min(max(new, lo), hi)
    table = Table("topic", "partition", "current-offset", "new-offset")
    for (t, p), new in target.items():
        cur = committed.get((t, p))
        table.add_row(t, str(p), "-" if cur is None else str(cur), str(new))
    console.print(table)
    if not execute:
        console.print("Dry run: nothing changed. Add --execute to apply.")
        return
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in target.items()])
    result(a.alter_consumer_group_offsets([request])[group], f"cannot reset offsets of group {group}")
    console.print(f"Reset offsets of group [bold]{group}[/bold].")
