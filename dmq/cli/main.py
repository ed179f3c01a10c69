"""The ``dmq`` command line."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

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
    log_level: Annotated[str, typer.Option("--log-level", help="DEBUG, INFO, WARNING or ERROR")] = "INFO",
) -> None:
    """Run a single dmq broker with embedded metadata."""
    from dmq.cli.server import build_config, run_server

    try:
        cfg = build_config(listen, advertised_listener, data_dir, config, override or [], broker_id)
    except (ConfigError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    run_server(cfg, log_level)


def main() -> None:
    app()
