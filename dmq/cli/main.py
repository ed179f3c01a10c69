"""The ``dmq`` command line."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from dmq.cli.common import Bootstrap, parse_pairs
from dmq.config import ConfigError

app = typer.Typer(help="dmq: a Kafka-compatible message queue in Python.", no_args_is_help=True,
                  add_completion=False)


@app.callback()
def _root() -> None:
    """dmq: a Kafka-compatible message queue in Python."""


@app.command()
def server(
    listen: Annotated[str | None, typer.Option("--listen", help="HOST:PORT to listen on [default: 127.0.0.1:9092]")] = None,
    advertised_listener: Annotated[str | None, typer.Option("--advertised-listener", help="HOST:PORT given to clients")] = None,
    data_dir: Annotated[str | None, typer.Option("--data-dir", help="data directory [default: ./dmq-data]")] = None,
    config: Annotated[str | None, typer.Option("--config", help="Kafka-style key=value broker config file")] = None,
    override: Annotated[list[str] | None, typer.Option("--override", help="key=value broker config, repeatable")] = None,
    broker_id: Annotated[int | None, typer.Option("--broker-id", help="broker id [default: 0]")] = None,
    zookeeper: Annotated[str | None, typer.Option("--zookeeper", help="HOST:PORT[,HOST:PORT...][/chroot]: join a ZooKeeper-coordinated cluster")] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="DEBUG, INFO, WARNING or ERROR")] = "INFO",
) -> None:
    """Run a dmq broker: alone with embedded metadata, or in a cluster with --zookeeper."""
    from dmq.cli.server import build_config, run_server

    try:
        cfg = build_config(listen, advertised_listener, data_dir, config, override or [], broker_id,
                           zookeeper)
    except (ConfigError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    run_server(cfg, log_level)


@app.command()
def produce(
    topic: str,
    key_separator: Annotated[str | None, typer.Option("--key-separator", help="split each line into key and value")] = None,
    header: Annotated[list[str] | None, typer.Option("--header", "-H", help="key=value header on every record")] = None,
    partition: Annotated[int | None, typer.Option("--partition", "-p")] = None,
    acks: Annotated[str, typer.Option("--acks", help="0, 1 or all")] = "all",
    compression: Annotated[str, typer.Option("--compression", help="none, gzip, snappy, lz4, zstd")] = "none",
    idempotence: Annotated[bool, typer.Option("--idempotence/--no-idempotence")] = True,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
) -> None:
    """Read lines from stdin and produce them as records."""
    from dmq.console.producer import run

    run(bootstrap_server, topic, key_separator, parse_pairs(header), partition, acks,
        compression, idempotence)


@app.command()
def consume(
    topic: str,
    from_beginning: Annotated[bool, typer.Option("--from-beginning")] = False,
    partition: Annotated[int | None, typer.Option("--partition", "-p")] = None,
    offset: Annotated[int | None, typer.Option("--offset", "-o", help="start offset (with --partition)")] = None,
    max_messages: Annotated[int | None, typer.Option("--max-messages", "-n")] = None,
    print_key: Annotated[bool, typer.Option("--print-key")] = False,
    print_headers: Annotated[bool, typer.Option("--print-headers")] = False,
    print_offset: Annotated[bool, typer.Option("--print-offset")] = False,
    separator: Annotated[str, typer.Option("--separator", help="between printed fields")] = "\t",
    timeout_ms: Annotated[int | None, typer.Option("--timeout-ms", help="exit after this long without records")] = None,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
) -> None:
    """Print records to stdout."""
    from dmq.console.consumer import run

    run(bootstrap_server, topic, from_beginning, partition, offset, max_messages, print_key,
        print_headers, print_offset, separator, timeout_ms)


def _register_subcommands() -> None:
    from dmq.cli import bench, cluster, groups, partitions, pipeline, topics

    app.add_typer(topics.app, name="topics")
    app.add_typer(groups.app, name="groups")
    app.add_typer(bench.app, name="bench")
    app.add_typer(pipeline.app, name="pipeline")
    app.add_typer(cluster.app, name="cluster")
    app.add_typer(partitions.app, name="partitions")


_register_subcommands()


def main() -> None:
    app()
