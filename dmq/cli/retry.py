"""``dmq retry``: the retry and dead-letter topics of RetryingConsumer groups (docs/retries.md)."""

from __future__ import annotations

from typing import Annotated

import typer
from confluent_kafka import KafkaException
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dmq.cli.common import (
    COMMAND_CONFIG,
    Bootstrap,
    CommandConfigOption,
    ensure_reachable,
    fail,
    kafka_error_text,
    make_console,
    make_table,
)
from dmq.cli.help import Typer

app = Typer(help="Retry and dead-letter topics of consumer groups (dmq.client.RetryingConsumer).",
            no_args_is_help=True)
console = make_console()


@app.command()
def redrive(
    group: Annotated[str | None, typer.Option(
        "--group", "-g", metavar="GROUP", help="the group whose dead letters to re-drive (<group>-dlq)")] = None,
    topic: Annotated[str | None, typer.Option(
        "--topic", "-t", metavar="TOPIC", help="a dead-letter topic by name, instead of --group")] = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", "-n", min=1, metavar="N", help="re-drive at most N records")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="count what would be re-driven; send nothing, remember nothing")] = False,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Send dead letters back to the topics they came from (their dmq headers removed).

    Progress is kept in the consumer group <dead-letter topic>-redrive: a second run sends
    only the dead letters that arrived since."""
    from dmq.client.retrying import dead_letter_topic
    from dmq.client.retrying import redrive as run_redrive

    if (group is None) == (topic is None):
        fail("give either --group GROUP or --topic DEAD_LETTER_TOPIC", 2)
    dlq = topic if topic is not None else dead_letter_topic(str(group))
    ensure_reachable(bootstrap_server)  # with --command-config: it also logs in
    with Progress(TextColumn(f"{'counting' if dry_run else 're-driving'} {dlq}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("redrive", total=None)

        def step(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        try:
            sent = run_redrive(bootstrap_server, dlq, step, limit, dry_run,
                               dict(COMMAND_CONFIG.settings.librdkafka))
        except KafkaException as e:
            fail(f"cannot re-drive {dlq}: {kafka_error_text(e)}")
    if not sent:
        console.print(f"No dead letters to re-drive in {dlq}.")
        return
    table = make_table("topic", "records", numbers=("records",))
    for name, count in sorted(sent.items()):
        table.add_row(name, str(count))
    console.print(table)
    total = sum(sent.values())
    console.print(f"{'would re-drive' if dry_run else 're-drove'} {total} record{'s' * (total != 1)}"
                  f"{' (nothing sent)' if dry_run else ''}.")
