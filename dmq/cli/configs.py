"""``dmq configs``: describe and alter topic and broker configs (like kafka-configs.sh).

The cluster-wide broker defaults are the BROKER resource with an empty name, which
confluent-kafka refuses to send (``Invalid ConfigResource``); ``--broker-defaults`` asks
with dmq's own wire client instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

from dmq.cli.common import (
    Bootstrap,
    CommandConfigOption,
    admin_client,
    fail,
    make_console,
    make_table,
    result,
    wire_client,
)
from dmq.cli.help import Typer

app = Typer(help="Describe and alter topic and broker configs.", no_args_is_help=True)
console = make_console()

Topic = Annotated[str | None, typer.Option("--topic", "-t", metavar="TOPIC", help="a topic's configs")]
Broker = Annotated[int | None, typer.Option(
    "--broker", metavar="ID", help="a broker's configs (--broker-defaults for the cluster-wide defaults)")]
BrokerDefaults = Annotated[bool, typer.Option(
    "--broker-defaults", help="the dynamic defaults every broker of the cluster uses")]


def _resource(topic: str | None, broker: int | None, broker_defaults: bool) -> tuple[ConfigResource, str]:
    if [topic is not None, broker is not None, broker_defaults].count(True) != 1:
        fail("pass exactly one of --topic, --broker, --broker-defaults", 2)
    if topic is not None:
        return ConfigResource(ConfigResource.Type.TOPIC, topic), f"topic {topic}"
    if broker is not None:
        return ConfigResource(ConfigResource.Type.BROKER, str(broker)), f"broker {broker}"
    return ConfigResource(ConfigResource.Type.BROKER, ""), "the cluster-wide broker defaults"


BROKER = 4  # DescribeConfigs / IncrementalAlterConfigs resource type
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations


@dataclass
class _Entry:
    """A config as confluent-kafka's ConfigEntry has it, read with dmq's wire client (its
    synonyms keyed by source and name: a broker config's layers share its name)."""

    name: str
    value: str | None
    source: int
    is_sensitive: bool = False
    synonyms: dict[str, _Entry] = field(default_factory=dict)


def _describe_defaults(bootstrap: str, what: str) -> dict[str, _Entry]:
    from kio.schema.errors import ErrorCode

    from dmq.protocol.codec import make, request_class, request_module

    mod = request_module(32, 4)
    with wire_client(bootstrap, "dmq-configs") as c:
        resp = c.request(make(request_class(32, 4), resources=(make(
            mod.DescribeConfigsResource, resource_type=BROKER, resource_name="",
            configuration_keys=None),), include_synonyms=True, include_documentation=False))
    (res,) = resp.results
    if res.error_code != ErrorCode.none:
        fail(f"cannot describe the configs of {what}: "
             f"{res.error_message or res.error_code.name.upper()}")
    return {e.name: _Entry(e.name, e.value, int(e.config_source), e.is_sensitive, {
        f"{int(s.source)}:{s.name}": _Entry(s.name, s.value, int(s.source), e.is_sensitive)
        for s in e.synonyms}) for e in res.configs}


def _set_as_defaults(configs: dict[str, _Entry]) -> dict[str, _Entry]:
    """The configs set as cluster-wide defaults: the entries (or, from a broker that answers
    the defaults' resource with its own config, as dmq did before, the synonyms) whose source
    is DYNAMIC_DEFAULT_BROKER_CONFIG. dmq now answers with the defaults alone, as Kafka."""
    out: dict[str, _Entry] = {}
    for e in configs.values():
        for layer in (e, *e.synonyms.values()):
            if layer.name == e.name and layer.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value:
                out[e.name] = _Entry(e.name, layer.value, layer.source, e.is_sensitive)
                break
    return out


def _alter_defaults(bootstrap: str, what: str, entries: list[ConfigEntry]) -> None:
    from kio.schema.errors import ErrorCode

    from dmq.protocol.codec import make, request_class, request_module

    mod = request_module(44, 0)
    configs = tuple(make(mod.AlterableConfig, name=e.name, value=e.value,
                         config_operation=SET if e.value is not None else DELETE) for e in entries)
    with wire_client(bootstrap, "dmq-configs") as c:
        resp = c.request(make(request_class(44, 0), validate_only=False, resources=(make(
            mod.AlterConfigsResource, resource_type=BROKER, resource_name="", configs=configs),)))
    (res,) = resp.responses
    if res.error_code != ErrorCode.none:
        fail(f"cannot alter the configs of {what}: "
             f"{res.error_message or res.error_code.name.upper()}")


def _source(entry: Any) -> str:
    try:
        return ConfigSource(entry.source).name
    except ValueError:
        return str(entry.source)


def _value(entry: Any) -> str:
    if entry.is_sensitive:
        return "[hidden]"
    return "null" if entry.value is None else str(entry.value)


@app.command()
def describe(
    topic: Topic = None,
    broker: Broker = None,
    broker_defaults: BrokerDefaults = False,
    all_: Annotated[bool, typer.Option(
        "--all", help="every config with its source and synonyms, defaults included")] = False,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Configs set on a topic or broker (with --all: every config, its source and synonyms)."""
    res, what = _resource(topic, broker, broker_defaults)
    if broker_defaults:
        configs: dict[str, Any] = _describe_defaults(bootstrap_server, what)
        if not all_:
            configs = _set_as_defaults(configs)
    else:
        a = admin_client(bootstrap_server)  # keep a reference: a collected client cancels its futures
        configs = result(a.describe_configs([res])[res], f"cannot describe the configs of {what}")
    entries = sorted(configs.values(), key=lambda e: e.name)
    if not all_:
        entries = [e for e in entries if _source(e) != "DEFAULT_CONFIG"]
    console.print(f"Configs of {what}" + (" (all; ↳ its synonyms, by precedence)" if all_ else
                                          " (set explicitly; --all for every config)"),
                  highlight=False)
    if not entries:
        console.print("none")
        return
    # Synonyms (name, value, source: kafka-configs.sh's SOURCE:name=value) go in rows of their
    # own under their config, so three columns fit an 80-column terminal.
    table = make_table("name", "value", "source")
    table.columns[2].no_wrap = True  # one word, at most 29 characters: the room goes to the rest
    for e in entries:
        table.add_row(_ConfigName(e.name), _value(e), _source(e))
        if all_:
            for syn in (e.synonyms or {}).values():
                table.add_row(_synonym_name(syn.name), _value(syn), _source(syn), style="dim")
    console.print(table)


class _ConfigName:
    """A config name in the table's name column, ``prefix`` before it, wrapped at its dots
    when the column is narrower, every line after the first indented by ``HANG`` spaces:
    wrapped as plain text, the rest of a long name (``replicas`` of
    ``follower.replication.throttled.replicas``, or a synonym's after its arrow) started
    the next line like a config of its own."""

    HANG = 4

    def __init__(self, name: str, prefix: str = "") -> None:
        self.name = name
        self.prefix = prefix

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        longest = max(len(part) for part in self.name.split("."))
        return Measurement(min(self.HANG + longest + 1, len(self.prefix) + len(self.name)),
                           len(self.prefix) + len(self.name))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text("\n".join(self.lines(options.max_width)))

    def lines(self, width: int) -> list[str]:
        """The name's lines in ``width`` columns (a piece longer than a line is cut)."""
        width = max(width, self.HANG + 1)
        pieces = [p + "." for p in self.name.split(".")]
        pieces[-1] = pieces[-1][:-1]
        lines: list[str] = []
        line = self.prefix
        for piece in pieces:
            while piece:
                if len(line) + len(piece) <= width:
                    line, piece = line + piece, ""
                elif line.strip() and line.strip() != self.prefix.strip():
                    lines.append(line)
                    line = " " * self.HANG
                else:  # one piece longer than a line: cut it
                    room = width - len(line)
                    line, piece = line + piece[:room], piece[room:]
                    if piece:
                        lines.append(line)
                        line = " " * self.HANG
        lines.append(line)
        return lines


def _synonym_name(name: str) -> _ConfigName:
    return _ConfigName(name, "  ↳ ")


@app.command()
def alter(
    topic: Topic = None,
    broker: Broker = None,
    broker_defaults: BrokerDefaults = False,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", metavar="KEY=VALUE", help="config to set, repeatable (kafka-configs.sh --add-config)")] = None,
    delete: Annotated[list[str] | None, typer.Option(
        "--delete", metavar="KEY", help="config to remove so its default applies, repeatable (--delete-config)")] = None,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Set or delete configs of a topic or broker (incrementally: others stay as they are)."""
    res, what = _resource(topic, broker, broker_defaults)
    entries: list[ConfigEntry] = []
    for item in set_ or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--set expects key=value, got {item!r}", 2)
        entries.append(ConfigEntry(key.strip(), value, incremental_operation=AlterConfigOpType.SET))
    for key in delete or []:
        entries.append(ConfigEntry(key.strip(), None, incremental_operation=AlterConfigOpType.DELETE))
    if not entries:
        fail("nothing to change: pass --set key=value or --delete key", 2)
    if broker_defaults:
        _alter_defaults(bootstrap_server, what, entries)
    else:
        change = ConfigResource(res.restype, res.name, incremental_configs=entries)
        a = admin_client(bootstrap_server)
        result(a.incremental_alter_configs([change])[change], f"cannot alter the configs of {what}")
    done = [f"{e.name}={e.value}" for e in entries if e.value is not None] + \
        [f"{e.name} (deleted)" for e in entries if e.value is None]
    console.print(f"Altered {what}: {', '.join(done)}", highlight=False)
