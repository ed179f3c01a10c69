"""``dmq topics``: create, list, describe, alter and delete topics (like kafka-topics.sh)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from dmq.cli.common import ADMIN_TIMEOUT as TIMEOUT
from dmq.cli.common import (
    Bootstrap,
    CommandConfigOption,
    admin_client,
    client_security,
    fail,
    format_bytes,
    kafka_error_text,
    list_topics,
    make_console,
    make_table,
    parse_pairs,
    result,
)
from dmq.cli.help import Typer

app = Typer(help="Manage topics.", no_args_is_help=True)
console = make_console()


def _wait(futures: dict, what: str) -> None:
    for key, fut in futures.items():
        name = getattr(key, "name", key)  # a ConfigResource names its topic; show only that
        result(fut, f"{what} {name} failed")


@app.command()
def create(
    name: Annotated[str, typer.Argument(metavar="TOPIC", help="name of the topic to create")],
    partitions: Annotated[int, typer.Option(
        "--partitions", "-p", metavar="N", help="number of partitions (-1: the broker's num.partitions)")] = -1,
    replication_factor: Annotated[int, typer.Option(
        "--replication-factor", "-r", metavar="N",
        help="copies of each partition (-1: the broker's default.replication.factor)")] = -1,
    config: Annotated[list[str] | None, typer.Option(
        "--config", "-c", metavar="KEY=VALUE", help="topic config, repeatable")] = None,
    if_not_exists: Annotated[bool, typer.Option("--if-not-exists", help="succeed when the topic already exists")] = False,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Create a topic."""
    for flag, value in (("--partitions", partitions), ("--replication-factor", replication_factor)):
        if value == 0 or value < -1:
            fail(f"{flag} must be at least 1 (or -1 for the broker's default), got {value}", 2)
    topic = NewTopic(name, partitions, replication_factor, config=parse_pairs(config))
    a = admin_client(bootstrap_server)
    fut = a.create_topics([topic])[name]
    try:
        fut.result(TIMEOUT)
    except KafkaException as e:
        if if_not_exists and e.args[0].name() == "TOPIC_ALREADY_EXISTS":
            console.print(f"Topic {name} already exists.")
            return
        fail(f"cannot create topic {name}: {e.args[0].str()}")
    console.print(f"Created topic [bold]{name}[/bold].")


def _internal(name: str) -> bool:
    return name.startswith("__")


@app.command("list")
def list_names(
    exclude_internal: Annotated[bool, typer.Option(
        "--exclude-internal", help="leave out internal topics (__consumer_offsets)")] = False,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """List topic names."""
    try:
        md = list_topics(admin_client(bootstrap_server))
    except KafkaException as e:
        fail(f"cannot list topics: {kafka_error_text(e)}")
    for name in sorted(md.topics):
        if not (exclude_internal and _internal(name)):
            print(name)


def _topic_ids(a: Any, names: list[str]) -> dict[str, str]:
    """Topic ids (base64, as kafka-topics.sh shows them); empty when the broker cannot say."""
    if not names:
        return {}
    try:
        futures = a.describe_topics(TopicCollection(names))
        return {n: str(f.result(TIMEOUT).topic_id) for n, f in futures.items()}
    except Exception:  # noqa: BLE001 - the ids are extra information, the rest still shows
        return {}


def _delayed_records(md: Any, topic: str, parts: list[Any]) -> dict[int, str]:
    """Records waiting for their delivery time per partition (DescribeDelayedRecords, asked of
    each leader; "+N" for those waiting for their transaction to commit); a partition whose
    leader does not answer is left out."""
    from dmq.client.wire import WireClient
    from dmq.protocol.codec import make, request_class, request_module
    from dmq.protocol.extensions import DESCRIBE_DELAYED_KEY

    by_leader: dict[int, list[int]] = {}
    for p in parts:
        if p.leader >= 0:
            by_leader.setdefault(p.leader, []).append(p.id)
    out: dict[int, str] = {}
    module = request_module(DESCRIBE_DELAYED_KEY, 0)
    for leader, ids in by_leader.items():
        broker = md.brokers.get(leader)
        if broker is None:
            continue
        try:
            with WireClient(broker.host, broker.port, client_id="dmq-topics", timeout=5,
                            security=client_security()) as c:
                resp = c.request(make(request_class(DESCRIBE_DELAYED_KEY, 0), topics=(
                    make(module.DelayedTopicRequest, name=topic, partitions=tuple(ids)),)))
        except (OSError, ValueError):
            continue
        for t in resp.topics:
            for r in t.partitions:
                if r.error_code == 0:
                    awaiting = f" +{r.awaiting_commit}" if r.awaiting_commit else ""
                    out[int(r.partition_index)] = f"{r.pending}{awaiting}"
    return out


def _sizes(md: Any, topic: str, parts: list[Any]) -> dict[int, int]:
    """Bytes of each partition's log on its leader (DescribeLogDirs, asked of each leader);
    a partition whose leader does not answer is left out."""
    from dmq.client.wire import WireClient
    from dmq.protocol.codec import make, request_class, request_module

    by_leader: dict[int, list[int]] = {}
    for p in parts:
        if p.leader >= 0:
            by_leader.setdefault(p.leader, []).append(p.id)
    out: dict[int, int] = {}
    module = request_module(35, 4)
    for leader, ids in by_leader.items():
        broker = md.brokers.get(leader)
        if broker is None:
            continue
        try:
            with WireClient(broker.host, broker.port, client_id="dmq-topics", timeout=5,
                            security=client_security()) as c:
                resp = c.request(make(request_class(35, 4), topics=(
                    make(module.DescribableLogDirTopic, topic=topic, partitions=tuple(ids)),)))
        except (OSError, ValueError):
            continue
        wanted = set(ids)
        for log_dir in resp.results:
            for t in log_dir.topics if log_dir.error_code == 0 else ():
                for r in t.partitions:
                    if t.name == topic and r.partition_index in wanted:
                        out[int(r.partition_index)] = int(r.partition_size)
    return out


@app.command()
def describe(
    name: Annotated[str | None, typer.Argument(
        metavar="TOPIC", help="topic to describe [default: all topics]", show_default=False)] = None,
    under_replicated: Annotated[bool, typer.Option(
        "--under-replicated-partitions", help="only partitions whose ISR is smaller than their replicas")] = False,
    unavailable: Annotated[bool, typer.Option(
        "--unavailable-partitions", help="only partitions without a leader")] = False,
    exclude_internal: Annotated[bool, typer.Option(
        "--exclude-internal", help="leave out internal topics when no topic is named")] = False,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Show each topic's id, replication factor, size, partitions (leader, replicas, ISR,
    records waiting for their delivery time, size of the leader's log) and config overrides."""
    a = admin_client(bootstrap_server)
    try:
        # Ask for all topics: a request naming one may auto-create it.
        md = list_topics(a)
    except KafkaException as e:
        fail(f"cannot list topics: {kafka_error_text(e)}")
    names = [name] if name else sorted(n for n in md.topics if not (exclude_internal and _internal(n)))
    filtering = under_replicated or unavailable
    ids = _topic_ids(a, names)
    shown = 0
    for topic_name in names:
        t: Any = md.topics.get(topic_name)
        if t is None or t.error is not None:
            fail(f"topic {topic_name} does not exist" if t is None or t.error.code() == 3
                 else f"topic {topic_name}: {t.error.str()}")
        assert t is not None
        parts = sorted(t.partitions.values(), key=lambda x: x.id)
        if filtering:
            parts = [p for p in parts
                     if (under_replicated and len(p.isrs) < len(p.replicas))
                     or (unavailable and p.leader < 0)]
            if not parts:
                continue
        shown += 1
        rf = max((len(p.replicas) for p in t.partitions.values()), default=0)
        sizes = _sizes(md, topic_name, parts)
        total = format_bytes(sum(sizes.values())) if len(sizes) == len(parts) else "?"
        title = (f"{topic_name}  id {ids.get(topic_name, '-')}  {len(t.partitions)} partitions  "
                 f"replication factor {rf}  size {total}")
        console.print(title, highlight=False)
        delayed = _delayed_records(md, topic_name, parts)
        table = make_table("partition", "leader", "replicas", "isr", "delayed", "size",
                           numbers=("partition", "leader", "delayed", "size"))
        for p in parts:
            size = sizes.get(p.id)
            table.add_row(str(p.id), str(p.leader) if p.leader >= 0 else "none",
                          ",".join(map(str, p.replicas)), ",".join(map(str, p.isrs)),
                          delayed.get(p.id, "?"), "?" if size is None else format_bytes(size))
        console.print(table)
        if filtering:
            continue
        res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
        try:
            configs = a.describe_configs([res])[res].result(TIMEOUT)
        except KafkaException:
            configs = {}
        overrides = {k: v.value for k, v in configs.items() if v.source == 1}
        if overrides:
            console.print("configs: " + ", ".join(f"{k}={v}" for k, v in sorted(overrides.items())))
    if filtering and not shown:
        what = " or ".join(w for w, on in (("under-replicated", under_replicated),
                                           ("unavailable", unavailable)) if on)
        console.print(f"No {what} partitions.")


@app.command()
def delete(
    name: Annotated[str, typer.Argument(metavar="TOPIC", help="topic to delete")],
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Delete a topic and its data."""
    a = admin_client(bootstrap_server)  # keep a reference: a collected client cancels its futures
    _wait(a.delete_topics([name]), "deleting topic")
    console.print(f"Deleted topic [bold]{name}[/bold].")


@app.command()
def alter(
    name: Annotated[str, typer.Argument(metavar="TOPIC", help="topic to change")],
    partitions: Annotated[int | None, typer.Option(
        "--partitions", "-p", metavar="N", help="new (larger) partition count")] = None,
    config: Annotated[list[str] | None, typer.Option(
        "--config", "-c", metavar="KEY=VALUE", help="config override to set, repeatable")] = None,
    delete_config: Annotated[list[str] | None, typer.Option(
        "--delete-config", metavar="KEY", help="config override to remove, repeatable")] = None,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Add partitions or change config overrides."""
    if partitions is None and not config and not delete_config:
        fail("nothing to alter: give --partitions, --config or --delete-config", 2)
    if partitions is not None and partitions < 1:
        fail(f"--partitions must be at least 1, got {partitions}", 2)
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in parse_pairs(config).items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                for k in delete_config or []]
    a = admin_client(bootstrap_server)
    if partitions is not None:
        _wait(a.create_partitions([NewPartitions(name, partitions)]), "adding partitions to")
        console.print(f"Topic {name} now has {partitions} partitions.")
    if entries:
        res = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=entries)
        _wait(a.incremental_alter_configs([res]), "altering configs of")
        console.print(f"Updated configs of {name}.")
