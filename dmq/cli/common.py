"""Shared CLI helpers: the bootstrap option, key=value parsing, clear failures."""

from __future__ import annotations

import os
import sys
from typing import Annotated, NoReturn

import typer

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
