"""``dmq server``: run one broker."""

from __future__ import annotations

import asyncio
import logging
import sys

from dmq.config import BrokerConfig, ConfigError, parse_properties


def build_config(listen: str | None, advertised: str | None, data_dir: str | None,
                 config_file: str | None, overrides: list[str], broker_id: int | None,
                 zookeeper: str | None = None) -> BrokerConfig:
    props: dict[str, str] = {}
    if config_file:
        with open(config_file) as f:
            props.update(parse_properties(f.read()))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override expects key=value, got {item!r}")
        props[key.strip()] = value.strip()
    if listen:
        props["listeners"] = listen
    if advertised:
        props["advertised.listeners"] = advertised
    if data_dir:
        props["log.dirs"] = data_dir
    if broker_id is not None:
        props["broker.id"] = str(broker_id)
    if zookeeper:
        props["zookeeper.connect"] = zookeeper
    return BrokerConfig(props)


def run_server(config: BrokerConfig, log_level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from dmq.server.broker import Broker

    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run  # type: ignore[assignment]
    broker = Broker(config)
    try:
        runner(broker.run())
    except OSError as e:
        print(f"error: cannot start the broker: {e}. Is another broker using "
              f"{config['listeners']}? Pick another with --listen HOST:PORT.", file=sys.stderr)
        raise SystemExit(1) from None
