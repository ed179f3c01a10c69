"""Shared CLI helpers: the bootstrap option, key=value parsing, clear failures."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Annotated, Any, NoReturn

import typer
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from rich.console import Console

Bootstrap = Annotated[str, typer.Option(
    "--bootstrap-server", "-b", envvar="DMQ_BOOTSTRAP_SERVER",
    help="broker HOST:PORT to connect to")]


def fail(message: str, code: int = 1) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def parse_pairs(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"expected key=value, got {item!r}", 2)
        out[key.strip()] = value
    return out


def stdout_is_tty() -> bool:
    return os.isatty(sys.stdout.fileno())


def make_console() -> Console:
    """A console whose tables never truncate: wide when output goes to a pipe or file."""
    if stdout_is_tty():
        return Console()
    return Console(width=max(shutil.get_terminal_size((200, 24)).columns, 200))


ADMIN_TIMEOUT = 30


def admin_client(bootstrap: str) -> AdminClient:
    """An AdminClient; callers keep a reference until its futures resolve."""
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def result(fut: Any, what: str) -> Any:
    """Wait for an admin future; turn any failure into a clear error and exit 1."""
    try:
        return fut.result(ADMIN_TIMEOUT)
    except KafkaException as e:
        fail(f"{what}: {e.args[0].str()}")
    except Exception as e:  # noqa: BLE001 - transport errors and timeouts
        fail(f"{what}: {e}")
