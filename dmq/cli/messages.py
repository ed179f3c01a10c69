"""``dmq messages query``: the records with a key, newest first, or the records of a time
range or from an offset, oldest first (RocketMQ's message query; docs/message-query.md).

Each partition's leader answers through dmq's QueryRecords API (``dmq.client.query``),
with its key indexes; the table shows partition, offset, timestamp, key, headers and
value, a value that parses as a JSON object or array pretty-printed. By default only
what a read_committed consumer reads is shown; ``--isolation-level read_uncommitted``
adds the records of aborted and open transactions (aborted ones marked).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Annotated, Literal

import typer
from rich.console import Console

from dmq.cli.common import (
    ANSWER_TIMEOUT,
    Bootstrap,
    CommandConfigOption,
    client_security,
    ensure_reachable,
    fail,
    make_console,
    make_table,
)
from dmq.cli.help import Typer

app = Typer(help="Find records by key, time or offset.", no_args_is_help=True)
console = make_console()

Isolation = Literal["read_committed", "read_uncommitted"]


def _timestamp_ms(option: str, text: str) -> int:
    """An ISO 8601 date-time (local time unless it names its offset) in epoch milliseconds;
    anything else is a usage error (exit 2)."""
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        fail(f"cannot parse {option} {text!r}: use ISO 8601 like 2026-11-22T10:00 (local time) "
             f"or 2026-11-22T10:00:00Z", 2)


def when(ms: int) -> str:
    """Epoch milliseconds as local ISO 8601 with its offset (what --from and --to take)."""
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="milliseconds")


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\n\t" for c in text)


def show_bytes(data: bytes | None) -> str:
    """Bytes as text when they are printable UTF-8, else 0x and their hex; null as null."""
    if data is None:
        return "null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data.hex()
    return text if _printable(text) else "0x" + data.hex()


def show_value(data: bytes | None) -> str:
    """A value: a JSON object or array pretty-printed, anything else as ``show_bytes``."""
    text = show_bytes(data)
    if data is not None and text[:1] in ("{", "["):
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return text


@app.command()
def query(
    topic: Annotated[str, typer.Option("--topic", "-t", metavar="TOPIC", help="topic to search")],
    key: Annotated[str | None, typer.Option(
        "--key", "-k", metavar="KEY", help="the records with this key (UTF-8), newest first")] = None,
    from_time: Annotated[str | None, typer.Option(
        "--from", metavar="DATETIME",
        help="records at or after this time, ISO 8601 like 2026-11-22T10:00 (local time unless "
             "it ends in Z or +HH:MM)")] = None,
    to_time: Annotated[str | None, typer.Option(
        "--to", metavar="DATETIME", help="records before this time (as --from)")] = None,
    partition: Annotated[int | None, typer.Option(
        "--partition", "-p", min=0, metavar="PARTITION", help="only this partition [default: all]")] = None,
    offset: Annotated[int | None, typer.Option(
        "--offset", "-o", min=0, metavar="OFFSET", help="records from this offset on (with --partition)")] = None,
    max_messages: Annotated[int, typer.Option(
        "--max-messages", "-n", min=1, metavar="N", help="show at most N records")] = 100,
    isolation_level: Annotated[Isolation, typer.Option(
        "--isolation-level", case_sensitive=False, metavar="[read_committed|read_uncommitted]",
        help="read_uncommitted adds records of aborted (marked) and open transactions")] = "read_committed",
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Find records by key (newest first), or by time range or offset (oldest first)."""
    if key is None and from_time is None and to_time is None and offset is None:
        fail("give --key KEY, --from/--to DATETIME, or --partition with --offset", 2)
    if offset is not None and partition is None:
        fail("--offset needs --partition: offsets are per partition", 2)
    if offset is not None and (key is not None or from_time is not None or to_time is not None):
        fail("--offset reads from an offset on: leave out --key, --from and --to", 2)
    start = _timestamp_ms("--from", from_time) if from_time is not None else None
    end = _timestamp_ms("--to", to_time) if to_time is not None else None
    if start is not None and end is not None and end < start:
        fail(f"--to {to_time} is before --from {from_time}", 2)

    # kio: imported by the commands that use it
    from dmq.client.query import QueryError, query_records

    ensure_reachable(bootstrap_server)
    progress = Console(stderr=True)
    try:
        with progress.status(f"querying {topic} ...") as status:
            def shown(requests: int, records: int) -> None:
                status.update(f"querying {topic}: {requests} requests, {records} records found")

            found = query_records(bootstrap_server, topic, key=None if key is None else key.encode(),
                                  partition=partition, start_offset=offset, start_timestamp=start,
                                  end_timestamp=end, max_records=max_messages,
                                  read_committed=isolation_level.lower() == "read_committed",
                                  timeout=ANSWER_TIMEOUT, progress=shown, client_id="dmq-messages",
                                  security=client_security())
    except QueryError as e:
        fail(str(e))
    where = topic if partition is None else f"{topic}-{partition}"
    what = (f"with key {key!r}" if key is not None else f"from offset {offset}" if offset is not None
            else "in that time range")
    if not found.records:
        print(f"No record {what} in {where}.", file=sys.stderr)
        return
    aborted = any(r.aborted for r in found.records)
    headers = ["partition", "offset", "timestamp", "key", "headers", "value"] + (["aborted"] if aborted else [])
    table = make_table(*headers, numbers=("partition", "offset"))
    table.columns[2].no_wrap = True  # a timestamp is read whole
    for r in found.records:
        row = [str(r.partition), str(r.offset), when(r.timestamp), show_bytes(r.key),
               "\n".join(f"{k}={show_bytes(v)}" for k, v in r.headers), show_value(r.value)]
        table.add_row(*row, *(["aborted" if r.aborted else ""] if aborted else []))
    console.print(table)
    order = "newest first" if key is not None else "oldest first"
    more = f"; more match (raise --max-messages, now {max_messages})" if found.more else ""
    plural = "record" if len(found.records) == 1 else "records"
    print(f"{len(found.records)} {plural} {what} in {where}, {order}{more}.", file=sys.stderr)
