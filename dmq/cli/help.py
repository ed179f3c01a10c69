"""How ``dmq ... --help`` reads: as Kafka's tools and rpk write theirs.

Typer alone shows an argument as ``{topic}`` in the usage line and as ``topic <str>`` in
its list, and wraps help text at hyphens (``[default: ./dmq-`` / ``data]``,
``--broker-`` / ``defaults``). Here an argument is its metavar (``TOPIC``, or
``[TOPIC]`` when optional) in both places, and help text wraps between words only.
Options get their metavars (``HOST:PORT``, ``KEY=VALUE``, ``N``) where they are declared.

Every ``dmq`` command group is a :class:`Typer` of this module, so every command has
this help.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

# A hyphen the wrapping code does not break at (U+2011); written out as "-".
_NO_BREAK_HYPHEN = "\u2011"
_BaseFormatter: Any = typer.Context.formatter_class


def _nobreak(text: str) -> str:
    return text.replace("-", _NO_BREAK_HYPHEN)


class HelpFormatter(_BaseFormatter):  # type: ignore[misc]
    """Click's formatter, wrapping help text between words, never at a hyphen inside one."""

    def write_text(self, text: str) -> None:
        super().write_text(_nobreak(text))

    def write_dl(self, rows: Sequence[tuple[str, str]], col_max: int = 30,
                 col_spacing: int = 2) -> None:
        super().write_dl([(term, _nobreak(text)) for term, text in rows], col_max, col_spacing)

    def write(self, string: str) -> None:
        super().write(string.replace(_NO_BREAK_HYPHEN, "-"))


class Context(typer.Context):
    formatter_class = HelpFormatter


def argument_name(param: Any) -> str:
    """An argument as help shows it: its metavar (TOPIC), else its name in capitals."""
    return str(param.metavar or param.name.upper())


class Command(TyperCommand):
    context_class = Context

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments: list[tuple[str, str]] = []
        options: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append((argument_name(param), record[1]))
            elif param.param_type_name == "option":
                options.append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        if options:
            with formatter.section("Options"):
                formatter.write_dl(options)


class Group(TyperGroup):
    context_class = Context

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """Each command with its summary whole, wrapped (Click cut it to one line with "...",
        as in 'Run a dmq broker: alone with embedded metadata, or in a...')."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class Typer(typer.Typer):
    """A command group whose commands (and itself) have dmq's help."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", Group)
        # Plain help: rich markup would eat "[/chroot]" and "[default: ...]".
        kwargs.setdefault("rich_markup_mode", None)
        super().__init__(**kwargs)

    def command(self, name: str | None = None, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs.setdefault("cls", Command)
        return super().command(name, **kwargs)
