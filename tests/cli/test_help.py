"""Every command's --help works and documents every option and argument, with metavars a
Kafka or rpk user reads at a glance (TOPIC, HOST:PORT, KEY=VALUE), wrapped between words
(issue 10)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from dmq.cli.main import app

# Every option has help text; no exceptions are left.
KNOWN_MISSING_HELP: set[str] = set()


def _commands(cmd: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _commands(sub, [*path, name])


def _options(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if p.param_type_name == "option" and p.name != "help"]


def _arguments(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if p.param_type_name == "argument"]


# What typer shows for a parameter without a metavar of its own: <str>, <int>, <list[str]>,
# <int range>, <float>; and {name} for a required argument in the usage line.
TYPE_METAVAR = re.compile(r"<(?:str|int|float|bool|list\[\w+\]|\w+ range|path)>")
BRACED_ARGUMENT = re.compile(r"\{\w+\}")


def test_every_command_help() -> None:
    root = typer.main.get_command(app)
    runner = CliRunner()
    missing: set[str] = set()
    problems: list[str] = []
    commands = list(_commands(root, []))
    assert len(commands) > 20
    for path, cmd in commands:
        where = " ".join(path) or "(root)"
        res = runner.invoke(app, [*path, "--help"])
        if res.exit_code != 0:
            problems.append(f"{where} --help exited {res.exit_code}: {res.output[-300:]} {res.exception!r}")
            continue
        if "<bool>" in res.output:
            problems.append(f"{where} --help shows <bool>")
        for found in sorted(set(TYPE_METAVAR.findall(res.output))):
            problems.append(f"{where} --help shows the type metavar {found}")
        usage = res.output.split("\n\n", 1)[0]
        if BRACED_ARGUMENT.search(usage):
            problems.append(f"{where} --help usage shows {BRACED_ARGUMENT.search(usage).group()}: {usage!r}")
        if "\\[" in res.output:  # a Rich markup escape, printed literally in plain help
            problems.append(f"{where} --help shows a stray backslash: {res.output[res.output.index(chr(92)) - 40:][:80]!r}")
        ctx = cmd.context_class(cmd, info_name=path[-1] if path else "dmq")
        for opt in _options(cmd):
            name = f"{' '.join(path)} {opt.opts[0]}".strip()
            if not (opt.help or "").strip():
                missing.add(name)
            if not opt.is_flag and not opt.count and not opt.metavar:
                problems.append(f"{name} has no metavar (typer shows its type)")
            default = opt.default
            if default is not None and not opt.is_flag and not (opt.multiple and not default):
                record = opt.get_help_record(ctx)
                text = record[1] if record else ""
                # "[default: X]", or "[env var: NAME; default: X]"
                if "default: " not in text or "default: " not in " ".join(res.output.split()):
                    problems.append(f"{name} has default {default!r} but its help does not show it")
        for arg in _arguments(cmd):
            name = f"{' '.join(path)} {arg.name}"
            if not (arg.help or "").strip():
                missing.add(name)
            if not arg.metavar or not arg.metavar.isupper():
                problems.append(f"{name}: an argument is named by an upper-case metavar like TOPIC, "
                                f"got {arg.metavar!r}")
            elif not re.search(rf"^  {re.escape(arg.metavar)}  \S", res.output, re.MULTILINE):
                problems.append(f"{where} --help does not list argument {arg.metavar} with its help")
    assert not problems, "\n".join(problems)
    assert missing <= KNOWN_MISSING_HELP, f"options or arguments without help: {sorted(missing - KNOWN_MISSING_HELP)}"
    assert not KNOWN_MISSING_HELP - missing, (
        f"now documented, drop from KNOWN_MISSING_HELP: {sorted(KNOWN_MISSING_HELP - missing)}")


def test_server_help_and_version_as_a_user_runs_them() -> None:
    res = subprocess.run([sys.executable, "-m", "dmq", "server", "--help"], capture_output=True,
                         timeout=60, text=True)
    assert res.returncode == 0, res.stderr
    assert "[/chroot]" in res.stdout and "127.0.0.1:9092]" in res.stdout
    assert "[default: info]" in res.stdout and "Traceback" not in res.stderr
    res = subprocess.run([sys.executable, "-m", "dmq", "--version"], capture_output=True,
                         timeout=60, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("dmq ") and res.stdout.split()[1][0].isdigit()


def test_help_at_80_columns_wraps_between_words() -> None:
    """Click wraps at hyphens: '[default: ./dmq-' / 'data]', '--broker-' / 'defaults'."""
    root = typer.main.get_command(app)
    runner = CliRunner()
    problems: list[str] = []
    for path, _ in _commands(root, []):
        res = runner.invoke(app, [*path, "--help"], terminal_width=80)
        assert res.exit_code == 0, res.output
        for line in res.output.splitlines():
            if len(line) > 80:
                problems.append(f"dmq {' '.join(path)} --help: a line of {len(line)} characters: {line!r}")
            if re.search(r"\w-$", line):
                problems.append(f"dmq {' '.join(path)} --help: a word broken at a hyphen: {line!r}")
    assert not problems, "\n".join(problems)
    server = runner.invoke(app, ["server", "--help"], terminal_width=80).output
    assert "./dmq-data]" in server, server
    usage = runner.invoke(app, ["topics", "create", "--help"], terminal_width=80).output
    assert " topics create [OPTIONS] TOPIC\n" in usage, usage
    assert re.search(r"^  TOPIC  name of the topic to create  \[required\]$", usage, re.MULTILINE), usage
    assert "-c, --config KEY=VALUE" in usage and "-b, --bootstrap-server HOST:PORT" in usage, usage


def test_command_lists_show_each_summary_whole() -> None:
    """Click cut a command's summary to what fits one line: 'server  Run a dmq broker: alone
    with embedded metadata, or in a...'; rpk and Kafka's tools show it whole."""
    root = typer.main.get_command(app)
    runner = CliRunner()
    problems: list[str] = []
    for path, cmd in _commands(root, []):
        if not getattr(cmd, "commands", None):
            continue
        out = runner.invoke(app, [*path, "--help"], terminal_width=80).output
        listed = " ".join(out.split("Commands:\n", 1)[1].split())
        if "..." in listed:
            problems.append(f"dmq {' '.join(path)} --help cuts a summary short: {listed!r}")
        for name, sub in cmd.commands.items():
            first = " ".join((sub.help or "").split("\n\n")[0].split())
            summary = first.split(". ")[0].rstrip(".")
            if f"{name} {summary}" not in listed:
                problems.append(f"dmq {' '.join(path)} --help lists {name} without {summary!r}")
    assert not problems, "\n".join(problems)
