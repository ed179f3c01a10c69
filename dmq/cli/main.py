"""The ``dmq`` command line."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Annotated, Literal, NoReturn

import typer

from dmq.cli.common import (
    VERBOSITY,
    Acks,
    Bootstrap,
    Compression,
    ConsumerConfigOption,
    ProducerConfigOption,
    exit_on_broken_pipe,
    fail,
    parse_pairs,
    resolve_idempotence,
)
from dmq.cli.help import Typer
from dmq.config import ConfigError

# Plain help (rich markup would eat "[/chroot]" and "[default: ...]"), plain tracebacks
# (main() turns unexpected errors into one line; --debug shows them whole).
app = Typer(help="dmq: a Kafka-compatible message queue in Python.", no_args_is_help=True,
            add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)


def dmq_version() -> str:
    try:
        return package_version("dmq")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        print(f"dmq {dmq_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="show the Kafka client's own log lines (librdkafka: lost "
                                "connections, failed requests; quiet while all is well), and "
                                "Spark's log in `dmq pipeline run`")] = False,
    debug: Annotated[bool, typer.Option(
        "--debug", help="show the Kafka client's debug traces, and a traceback on an unexpected "
                        "error")] = False,
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="print dmq's version and exit")] = False,
) -> None:
    """dmq: a Kafka-compatible message queue in Python."""
    VERBOSITY.verbose = verbose
    VERBOSITY.debug = debug


LogLevel = Literal["debug", "info", "warning", "error", "critical"]


@app.command()
def server(
    listen: Annotated[str | None, typer.Option(
        "--listen", metavar="HOST:PORT", help="address to listen on (listeners; NAME://HOST:PORT,... for "
                                              "several, TLS and SASL: docs/security.md) [default: 127.0.0.1:9092]")] = None,
    advertised_listener: Annotated[str | None, typer.Option(
        "--advertised-listener", metavar="HOST:PORT", help="address given to clients (advertised.listeners) "
                                      "[default: the address listened on]")] = None,
    data_dir: Annotated[str | None, typer.Option(
        "--data-dir", metavar="DIR", help="data directory (log.dirs) [default: ./dmq-data]")] = None,
    config: Annotated[str | None, typer.Option(
        "--config", metavar="FILE", help="Kafka-style key=value broker config file (server.properties)")] = None,
    override: Annotated[list[str] | None, typer.Option(
        "--override", metavar="KEY=VALUE", help="broker config, repeatable")] = None,
    broker_id: Annotated[int | None, typer.Option(
        "--broker-id", metavar="ID", help="broker id (broker.id) [default: 0]")] = None,
    zookeeper: Annotated[str | None, typer.Option(
        "--zookeeper", metavar="HOST:PORT[/CHROOT]", help="HOST:PORT[,HOST:PORT...][/chroot]: join a ZooKeeper-coordinated "
                            "cluster (zookeeper.connect)")] = None,
    metrics: Annotated[str | None, typer.Option(
        "--metrics", metavar="HOST:PORT", help="serve Prometheus metrics at http://HOST:PORT/metrics "
                                               "(metrics.listener) [default: off]")] = None,
    log_level: Annotated[LogLevel, typer.Option(
        "--log-level", case_sensitive=False, metavar="[debug|info|warning|error|critical]",
        help="broker log level")] = "info",
    console: Annotated[str | None, typer.Option(
        "--console", metavar="HOST:PORT", help="also serve the web console there (docs/console.md) "
                                              "[default: off]")] = None,
) -> None:
    """Run a dmq broker: alone with embedded metadata, or in a cluster with --zookeeper."""
    from dmq.cli.server import build_config, parse_console, run_server

    try:
        cfg = build_config(listen, advertised_listener, data_dir, config, override or [], broker_id,
                           zookeeper, metrics)
        console_address = parse_console(console)
    except (ConfigError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    run_server(cfg, log_level, console_address)


@app.command()
def produce(
    topic: Annotated[str, typer.Argument(metavar="TOPIC", help="topic to produce to")],
    key_separator: Annotated[str | None, typer.Option(
        "--key-separator", metavar="SEP", help="split each line into key and value at the first SEP")] = None,
    header: Annotated[list[str] | None, typer.Option(
        "--header", "-H", metavar="KEY=VALUE", help="header on every record, repeatable")] = None,
    partition: Annotated[int | None, typer.Option(
        "--partition", "-p", min=0, metavar="PARTITION", help="produce every record to this partition [default: by key]")] = None,
    acks: Annotated[Acks, typer.Option(
        "--acks", metavar="[0|1|all|-1]", help="acknowledgements to wait for (-1 is all)")] = "all",
    compression: Annotated[Compression, typer.Option(
        "--compression", case_sensitive=False, metavar="[none|gzip|snappy|lz4|zstd]",
        help="compression codec")] = "none",
    idempotence: Annotated[bool | None, typer.Option(
        "--idempotence/--no-idempotence", show_default=False,
        help="idempotent producer: no duplicates on retry (needs --acks all) "
             "[default: on with --acks all, off otherwise]")] = None,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: ProducerConfigOption = None,
) -> None:
    """Read lines from stdin and produce them as records."""
    from dmq.console.producer import run

    if key_separator == "":
        fail("--key-separator must not be empty", 2)
    idempotence = resolve_idempotence(acks, idempotence)
    run(bootstrap_server, topic, key_separator, parse_pairs(header), partition, acks,
        compression, idempotence)


@app.command()
def consume(
    topic: Annotated[str, typer.Argument(metavar="TOPIC", help="topic to read")],
    from_beginning: Annotated[bool, typer.Option(
        "--from-beginning", help="start at the earliest record [default: only new records]")] = False,
    partition: Annotated[int | None, typer.Option(
        "--partition", "-p", min=0, metavar="PARTITION", help="read only this partition [default: all]")] = None,
    offset: Annotated[int | None, typer.Option(
        "--offset", "-o", metavar="OFFSET", help="start offset (with --partition)")] = None,
    max_messages: Annotated[int | None, typer.Option(
        "--max-messages", "-n", min=1, metavar="N", help="exit after this many records [default: no limit]")] = None,
    print_key: Annotated[bool, typer.Option("--print-key", help="print each record's key")] = False,
    print_headers: Annotated[bool, typer.Option(
        "--print-headers", help="print each record's headers as k=v,k=v")] = False,
    print_offset: Annotated[bool, typer.Option(
        "--print-offset", help="print each record's PARTITION:OFFSET")] = False,
    separator: Annotated[str, typer.Option(
        "--separator", show_default="TAB", metavar="SEP", help="between printed fields")] = "\t",
    timeout_ms: Annotated[int | None, typer.Option(
        "--timeout-ms", min=0, metavar="MS", help="exit after this long without records [default: never]")] = None,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: ConsumerConfigOption = None,
) -> None:
    """Print records to stdout."""
    from dmq.console.consumer import run

    run(bootstrap_server, topic, from_beginning, partition, offset, max_messages, print_key,
        print_headers, print_offset, separator, timeout_ms)


# Subcommand groups and their modules, imported only when needed: each pulls in kio, the
# wire client or Spark's helpers, which cost a second of CPU per command together.
SUBCOMMANDS = {
    "topics": "dmq.cli.topics", "groups": "dmq.cli.groups", "messages": "dmq.cli.messages",
    "configs": "dmq.cli.configs", "bench": "dmq.cli.bench", "pipeline": "dmq.cli.pipeline",
    "cluster": "dmq.cli.cluster", "partitions": "dmq.cli.partitions",
    "transactions": "dmq.cli.transactions", "retry": "dmq.cli.retry", "acls": "dmq.cli.acls",
    "users": "dmq.cli.users", "console": "dmq.cli.web",
}


def _register_subcommands(argv: list[str]) -> None:
    """Add the subcommand groups: only the one named on the command line (the root takes
    flags only, so it is the first word that is not one), none for a command of the root
    (``dmq server``), every one otherwise (``dmq --help``, a test importing ``app``)."""
    import importlib

    word = next((a for a in argv[1:] if not a.startswith("-")), None)
    own = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    if word in SUBCOMMANDS:
        names = [word]
    elif word in own:
        names = []
    else:
        names = list(SUBCOMMANDS)
    for name in names:
        app.add_typer(importlib.import_module(SUBCOMMANDS[name]).app, name=name)


_register_subcommands(sys.argv if sys.argv and sys.argv[0].endswith(("dmq", "__main__.py")) else [])


def _interrupted() -> NoReturn:
    print("interrupted", file=sys.stderr)
    raise SystemExit(130)


def main() -> None:
    """Run the command line: usage errors exit 2 (click), failed operations 1; an unexpected
    exception is one line and exit 1 (``dmq --debug`` re-raises it with its traceback)."""
    try:
        # Not standalone: click would turn Ctrl-C into "Aborted!" with exit 1 and a closed
        # pipe into exit 1; here Ctrl-C is exit 130 (128 + SIGINT) and a closed pipe exit 0.
        code = app(standalone_mode=False)
        if code == 130:  # typer's answer to Ctrl-C
            _interrupted()
        if isinstance(code, int) and code:
            raise SystemExit(code)
    except KeyboardInterrupt:
        _interrupted()
    except BrokenPipeError:
        exit_on_broken_pipe()
    except Exception as e:  # noqa: BLE001 - the last resort of a command line
        # click's own exceptions, matched by shape: typer may bring a vendored copy of click.
        if callable(getattr(e, "show", None)) and isinstance(getattr(e, "exit_code", None), int):
            e.show()  # type: ignore[attr-defined]  # a usage error: its message and exit 2
            raise SystemExit(e.exit_code) from None  # type: ignore[attr-defined]
        if type(e).__name__ == "Exit" and isinstance(getattr(e, "exit_code", None), int):
            raise SystemExit(e.exit_code) from None  # type: ignore[attr-defined]
        if type(e).__name__ == "Abort":
            _interrupted()
        if VERBOSITY.debug:
            raise
        text = " ".join(str(e).split()) or "(no message)"
        print(f"error: unexpected {type(e).__name__}: {text} (run with `dmq --debug ...` for the "
              f"traceback)", file=sys.stderr)
        raise SystemExit(1) from None
