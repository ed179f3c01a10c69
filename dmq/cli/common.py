"""Shared CLI helpers: the bootstrap option, key=value parsing, clear failures."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Annotated, NoReturn

import typer
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
