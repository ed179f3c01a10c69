"""``dmq groups``: list, describe, delete and reset consumer groups (like kafka-consumer-groups.sh),
classic and share groups (like kafka-share-groups.sh: ``dmq.cli.share_groups``)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated, Any

import typer
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from dmq.cli.common import (
    Bootstrap,
    CommandConfigOption,
    admin_client,
    fail,
    kafka_error_text,
    list_topics,
    make_console,
    make_table,
    result,
)
from dmq.cli.help import Typer
from dmq.cli.share_groups import COORDINATOR_WAIT, ShareGroupView, share_groups

app = Typer(help="Manage consumer groups.", no_args_is_help=True)
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


# A broker still loading its coordinator partitions answers ListGroups with one of these,
# and librdkafka passes it on; Kafka's admin client asks again, and so does this.
_LIST_RETRIABLE = (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE)


def _list_groups(a: AdminClient) -> list[Any]:
    """Every group the brokers know; a broker that did not answer is a failure (the client
    reports it beside an empty list, which would read as "no groups"). A broker whose
    coordinator is loading is asked again, for up to COORDINATOR_WAIT seconds."""
    deadline = time.monotonic() + COORDINATOR_WAIT
    while True:
        res = result(a.list_consumer_groups(), "cannot list groups")
        if not res.errors:
            return list(res.valid)
        if any(e.code() not in _LIST_RETRIABLE for e in res.errors) or time.monotonic() > deadline:
            fail(f"cannot list groups: {kafka_error_text(res.errors[0])}")
        time.sleep(0.2)


@app.command("list")
def list_groups(bootstrap_server: Bootstrap = "127.0.0.1:9092",
                command_config: CommandConfigOption = None) -> None:
    """List consumer groups, classic and share, with their state."""
    a = admin_client(bootstrap_server)  # keep a reference: a collected client cancels its futures
    rows = [(g.group_id, "classic", _state_name(g.state)) for g in _list_groups(a)]
    with share_groups(bootstrap_server) as sg:
        rows += [(group, "share", state) for group, state in sg.list()]
    if not rows:
        console.print("No consumer groups.")
        return
    table = make_table("group", "type", "state")
    for row in sorted(rows):
        table.add_row(*row)
    console.print(table)


def _share_view(view: ShareGroupView, members: bool, state: bool) -> None:
    """``dmq groups describe`` of a share group: per partition its start offset, the records
    in flight and acquired at its leader, and its lag (a TOTAL-LAG line); --members, --state."""
    if state:
        host, port = view.coordinator_address
        table = make_table("group", "type", "state", "assignor", "members", "epoch", "coordinator",
                           numbers=("members", "epoch"))
        table.add_row(view.group_id, "share", view.state, view.assignor or "-", str(len(view.members)),
                      str(view.group_epoch), f"{view.coordinator} ({host}:{port})")
        console.print(table)
        return
    if members:
        console.print(f"Group {view.group_id}  type share  state {view.state}  members {len(view.members)}",
                      highlight=False)
        table = make_table("consumer-id", "host", "client-id", "partitions", "assignment", numbers=("partitions",))
        for m in sorted(view.members, key=lambda m: m.member_id):
            tps = m.assignment.topic_partitions
            table.add_row(m.member_id, m.client_host, m.client_id, str(sum(len(t.partitions) for t in tps)),
                          "\n".join(f"{t.topic_name}:{','.join(map(str, sorted(t.partitions)))}"
                                    for t in sorted(tps, key=lambda t: t.topic_name)))
        console.print(table)
        return
    console.print(f"Group {view.group_id}  type share  state {view.state}  members {len(view.members)}  "
                  f"assignor {view.assignor or '-'}", highlight=False)
    table = make_table("topic", "partition", "start\noffset", "in-flight", "acquired", "lag", "members",
                       numbers=("partition", "start\noffset", "in-flight", "acquired", "lag", "members"))
    for p in view.partitions:
        table.add_row(p.topic, str(p.partition), _num(p.start_offset), _num(p.in_flight), _num(p.acquired),
                      _num(p.lag), str(len(p.members)))
    console.print(table)
    console.print(f"TOTAL-LAG {view.total_lag}", highlight=False)


def _offsets_view(a: AdminClient, group: str, desc: Any) -> tuple[list[Any], int]:
    """Rows (topic, partition, committed, log end, lag, consumer id) and the total lag."""
    committed = _committed(a, group)
    owner: dict[tuple[str, int], Any] = {}
    for m in desc.members:
        for tp in (m.assignment.topic_partitions if m.assignment else []):
            owner[(tp.topic, tp.partition)] = m
    tps = sorted(set(committed) | set(owner))
    ends = _list_offsets(a, tps, OffsetSpec.latest())
    rows, total = [], 0
    for t, p in tps:
        cur, end = committed.get((t, p)), ends.get((t, p))
        lag = None if cur is None or end is None else max(0, end - cur)
        total += lag or 0
        m = owner.get((t, p))
        rows.append((t, p, cur, end, lag, m.member_id if m else None))
    return rows, total


def _num(v: int | None) -> str:
    return "-" if v is None else str(v)


@app.command()
def describe(
    group: Annotated[str | None, typer.Argument(
        metavar="GROUP", help="consumer group to describe (or --all-groups)")] = None,
    all_groups: Annotated[bool, typer.Option("--all-groups", help="describe every group")] = False,
    members: Annotated[bool, typer.Option(
        "--members", help="show the members (id, host, client id, partitions) instead of offsets")] = False,
    state: Annotated[bool, typer.Option(
        "--state", help="show one line per group: state, assignor, members, coordinator")] = False,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Per-partition committed offset, log end offset and lag with a TOTAL-LAG line (like
    kafka-consumer-groups.sh --describe); --members or --state for the other views."""
    if (group is None) == (not all_groups):
        fail("name one group or pass --all-groups", 2)
    if members and state:
        fail("--members and --state are different views: pass one of them", 2)
    a = admin_client(bootstrap_server)
    classic = [g.group_id for g in _list_groups(a)] if all_groups else []
    with share_groups(bootstrap_server) as sg:
        if all_groups:
            names = sorted(set(classic) | {g for g, _ in sg.list()})
            if not names:
                console.print("No consumer groups.")
                return
        else:
            assert group is not None
            names = [group]
        for i, name in enumerate(names):
            view = sg.describe(name)
            if view is not None:
                if i:
                    console.print()
                _share_view(view, members, state)
                continue
            _describe_classic(a, name, i, all_groups, members, state)


def _describe_classic(a: AdminClient, name: str, i: int, all_groups: bool, members: bool, state: bool) -> None:
    """``dmq groups describe`` of a classic group (the ``i``th described)."""
    desc = _describe(a, name)
    state_name = _state_name(desc.state)
    if state_name == "Dead" and not all_groups and not _committed(a, name):
        fail(f"group {name} does not exist")
    if i:
        console.print()
    if state:
        coord = desc.coordinator
        table = make_table("group", "state", "assignor", "members", "coordinator",
                           numbers=("members",))
        table.add_row(name, state_name, desc.partition_assignor or "-", str(len(desc.members)),
                      f"{coord.id} ({coord.host}:{coord.port})" if coord else "-")
        console.print(table)
        return
    if members:
        console.print(f"Group {name}  state {state_name}  members {len(desc.members)}", highlight=False)
        table = make_table("consumer-id", "host", "client-id", "partitions", "assignment",
                           numbers=("partitions",))
        for m in sorted(desc.members, key=lambda m: m.member_id):
            tps = m.assignment.topic_partitions if m.assignment else []
            by_topic: dict[str, list[int]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            table.add_row(m.member_id, m.host, m.client_id, str(len(tps)),
                          "\n".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items())))
        console.print(table)
        return
    rows, total = _offsets_view(a, name, desc)
    console.print(f"Group {name}  state {state_name}  members {len(desc.members)}  "
                  f"protocol {desc.partition_assignor or '-'}", highlight=False)
    table = make_table("topic", "partition", "current\noffset", "log-end\noffset", "lag",
                       "consumer-id", numbers=("partition", "current\noffset", "log-end\noffset", "lag"))
    for t, p, cur, end, lag, member in rows:
        table.add_row(t, str(p), _num(cur), _num(end), _num(lag), member or "-")
    console.print(table)
    console.print(f"TOTAL-LAG {total}", highlight=False)


@app.command()
def delete(
    group: Annotated[str, typer.Argument(metavar="GROUP", help="consumer group to delete")],
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Delete an empty group and its committed offsets."""
    a = admin_client(bootstrap_server)
    result(a.delete_consumer_groups([group])[group], f"cannot delete group {group}")
    console.print(f"Deleted group [bold]{group}[/bold].")


def _timestamp_ms(text: str) -> int:
    """An ISO 8601 date-time (local time unless it names its offset) in epoch milliseconds;
    anything else is a usage error (exit 2)."""
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        fail(f"cannot parse --to-datetime {text!r}: use ISO 8601 like 2026-01-02T03:04:05 "
             f"(local time) or 2026-01-02T03:04:05Z", 2)


@app.command("reset-offsets")
def reset_offsets(
    group: Annotated[str, typer.Option(
        "--group", "-g", metavar="GROUP", help="the consumer group whose offsets move")],
    topic: Annotated[str, typer.Option(
        "--topic", "-t", metavar="TOPIC[:P1,P2]", help="the topic, or some of its partitions")],
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="to each partition's log start offset")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="to each partition's log end offset")] = False,
    to_offset: Annotated[int | None, typer.Option(
        "--to-offset", metavar="OFFSET", help="to this offset (clamped to each partition's range)")] = None,
    to_datetime: Annotated[str | None, typer.Option(
        "--to-datetime", metavar="DATETIME",
        help="to the first offset at or after this time, ISO 8601 like 2026-01-02T03:04:05 "
             "(local time unless it ends in Z or +HH:MM)")] = None,
    shift_by: Annotated[int | None, typer.Option(
        "--shift-by", metavar="N",
        help="by N records from the committed (share groups: start) offset (negative: back)")] = None,
    execute: Annotated[bool, typer.Option("--execute", help="apply; without it this is a dry run")] = False,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Move a stopped group's committed offsets, or a share group's start offsets (dry run
    unless --execute)."""
    chosen = [to_earliest, to_latest, to_offset is not None, to_datetime is not None, shift_by is not None]
    if sum(chosen) != 1:
        fail("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by", 2)
    # Everything the command line alone can tell is checked before the broker is asked.
    ts = _timestamp_ms(to_datetime) if to_datetime is not None else None
    name, _, parts = topic.partition(":")
    try:
        chosen_partitions = [int(p) for p in parts.split(",")] if parts else None
    except ValueError:
        chosen_partitions = None
    if not name or (parts and (chosen_partitions is None or min(chosen_partitions) < 0)):
        fail(f"--topic expects TOPIC or TOPIC:P1,P2 with partition numbers, got {topic!r}", 2)
    a = admin_client(bootstrap_server)
    try:
        md = list_topics(a)
    except KafkaException as e:
        fail(f"cannot list topics: {kafka_error_text(e)}")
    if name not in md.topics or md.topics[name].error is not None:
        fail(f"topic {name} does not exist")
    existing = sorted(md.topics[name].partitions)
    missing = sorted(set(chosen_partitions or []) - set(existing))
    if missing:
        fail(f"topic {name} has no partition {', '.join(map(str, missing))} (it has {len(existing)})")
    tps = [(name, p) for p in (chosen_partitions or existing)]
    with share_groups(bootstrap_server) as sg:
        share = sg.describe_raw(group)
        if share is not None:  # as kafka-share-groups.sh --reset-offsets: the start offsets move
            coordinator, described = share
            if described.group_state != "Empty":
                fail(f"offsets can only be reset if the share group '{group}' is inactive, but the "
                     f"current state is {described.group_state}; stop its consumers first")
            current = {tp: start for tp, (_, start, _) in sg.offsets(coordinator, group).items() if start >= 0}
            target = _targets(a, tps, current, to_earliest, to_latest, to_offset, ts, shift_by)
            _show_targets(target, current, "start\noffset")
            if not execute:
                console.print("Dry run: nothing changed. Add --execute to apply.")
                return
            sg.alter(coordinator, group, target)
            console.print(f"Reset the start offsets of share group [bold]{group}[/bold].")
            return
    desc = _describe(a, group)
    state = _state_name(desc.state)
    if state not in ("Empty", "Dead"):
        fail(f"assignments can only be reset if the group '{group}' is inactive, but the current "
             f"state is {state}; stop its consumers first")
    committed = _committed(a, group)
    target = _targets(a, tps, committed, to_earliest, to_latest, to_offset, ts, shift_by)
    _show_targets(target, committed, "current\noffset")
    if not execute:
        console.print("Dry run: nothing changed. Add --execute to apply.")
        return
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in target.items()])
    result(a.alter_consumer_group_offsets([request])[group], f"cannot reset offsets of group {group}")
    console.print(f"Reset offsets of group [bold]{group}[/bold].")


def _targets(a: AdminClient, tps: list[tuple[str, int]], current: dict[tuple[str, int], int],
             to_earliest: bool, to_latest: bool, to_offset: int | None, ts: int | None,
             shift_by: int | None) -> dict[tuple[str, int], int]:
    """Each partition's new offset, clamped to its log start and end offsets."""
    earliest = _list_offsets(a, tps, OffsetSpec.earliest())
    latest = _list_offsets(a, tps, OffsetSpec.latest())
    by_time = _list_offsets(a, tps, OffsetSpec.for_timestamp(ts)) if ts is not None else {}
    target: dict[tuple[str, int], int] = {}
    for tp in tps:
        lo, hi = earliest[tp], latest[tp]
        if to_earliest:
            new = lo
        elif to_latest:
            new = hi
        elif to_offset is not None:
            new = to_offset
        elif shift_by is not None:
            new = current.get(tp, lo) + shift_by
        else:
            new = by_time[tp] if by_time[tp] >= 0 else hi
        target[tp] = min(max(new, lo), hi)
    return target


def _show_targets(target: dict[tuple[str, int], int], current: dict[tuple[str, int], int], heading: str) -> None:
    table = make_table("topic", "partition", heading, "new\noffset", numbers=("partition", heading, "new\noffset"))
    for (t, p), new in target.items():
        cur = current.get((t, p))
        table.add_row(t, str(p), "-" if cur is None else str(cur), str(new))
    console.print(table)
