"""``dmq topics``: create, list, describe, alter and delete topics (like kafka-topics.sh)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from rich.table import Table

from dmq.cli.common import ADMIN_TIMEOUT as TIMEOUT
from dmq.cli.common import Bootstrap, admin_client, fail, make_console, parse_pairs, result

app = typer.Typer(help="Manage topics.", no_args_is_help=True)
console = make_console()


def _wait(futures: dict, what: str) -> None:
    for key, fut in futures.items():
        name = getattr(key, "name", key)  # a ConfigResource names its topic; show only that
        result(fut, f"{what} {name} failed")


@app.command()
def create(
    name: str,
    partitions: Annotated[int, typer.Option("--partitions", "-p", help="number of partitions (-1: broker default)")] = -1,
    replication_factor: Annotated[int, typer.Option("--replication-factor", "-r", help="-1: broker default")] = -1,
    config: Annotated[list[str] | None, typer.Option("--config", "-c", help="topic config key=value, repeatable")] = None,
    if_not_exists: Annotated[bool, typer.Option("--if-not-exists", help="succeed when the topic already exists")] = False,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
) -> None:
    """Create a topic."""
    a = admin_client(bootstrap_server)
    topic = NewTopic(name, partitions, replication_factor, config=parse_pairs(config))
    fut = a.create_topics([topic])[name]
    try:
        fut.result(TIMEOUT)
    except KafkaException as e:
        if if_not_exists and e.args[0].name() == "TOPIC_ALREADY_EXISTS":
            console.print(f"Topic {name} already exists.")
            return
        fail(f"cannot create topic {name}: {e.args[0].str()}")
    console.print(f"Created topic [bold]{name}[/bold].")


@app.command("list")
def list_topics(bootstrap_server: Bootstrap = "127.0.0.1:9092") -> None:
    """List topic names."""
    try:
        md = admin_client(bootstrap_server).list_topics(timeout=TIMEOUT)
    except KafkaException as e:
        fail(f"cannot reach {bootstrap_server}: {e.args[0].str()}")
    for name in sorted(md.topics):
        print(name)


@app.command()
def describe(
    name: Annotated[str | None, typer.Argument(help="topic (all topics when left out)")] = None,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
) -> None:
    """Show partitions (leader, replicas, ISR) and config overrides."""
    a = admin_client(bootstrap_server)
    try:
        # Ask for all topics: a request naming one may auto-create it.
        md = a.list_topics(timeout=TIMEOUT)
    except KafkaException as e:
        fail(f"cannot reach {bootstrap_server}: {e.args[0].str()}")
    names = [name] if name else sorted(md.topics)
    for topic_name in names:
        t: Any = md.topics.get(topic_name)
        if t is None or t.error is not None:
            fail(f"topic {topic_name} does not exist" if t is None or t.error.code() == 3
                 else f"topic {topic_name}: {t.error.str()}")
        assert t is not None
        res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
        try:
            configs = a.describe_configs([res])[res].result(TIMEOUT)
        except KafkaException:
            configs = {}
        overrides = {k: v.value for k, v in configs.items() if v.source == 1}
        table = Table(title=f"{topic_name}  ({len(t.partitions)} partitions)",
                      title_justify="left")
        for col in ("partition", "leader", "replicas", "isr"):
            table.add_column(col, justify="right" if col in ("partition", "leader") else "left")
        for p in sorted(t.partitions.values(), key=lambda x: x.id):
            table.add_row(str(p.id), str(p.leader), ",".join(map(str, p.replicas)),
                          ",".join(map(str, p.isrs)))
        console.print(table)
        if overrides:
            console.print("configs: " + ", ".join(f"{k}={v}" for k, v in sorted(overrides.items())))


@app.command()
def delete(name: str, bootstrap_server: Bootstrap = "127.0.0.1:9092") -> None:
    """Delete a topic and its data."""
    a = admin_client(bootstrap_server)  # keep a reference: a collected client cancels its futures
    _wait(a.delete_topics([name]), "deleting topic")
    console.print(f"Deleted topic [bold]{name}[/bold].")


@app.command()
def alter(
    name: str,
    partitions: Annotated[int | None, typer.Option("--partitions", "-p", help="new (larger) partition count")] = None,
    config: Annotated[list[str] | None, typer.Option("--config", "-c", help="set key=value, repeatable")] = None,
    delete_config: Annotated[list[str] | None, typer.Option("--delete-config", help="remove an override, repeatable")] = None,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
) -> None:
    """Add partitions or change config overrides."""
    if partitions is None and not config and not delete_config:
        fail("nothing to alter: give --partitions, --config or --delete-config")
    a = admin_client(bootstrap_server)
    if partitions is not None:
        _wait(a.create_partitions([NewPartitions(name, partitions)]), "adding partitions to")
        console.print(f"Topic {name} now has {partitions} partitions.")
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in parse_pairs(config).items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                for k in delete_config or []]
    if entries:
        res = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=entries)
        _wait(a.incremental_alter_configs([res]), "altering configs of")
        console.print(f"Updated configs of {name}.")
