"""``dmq server``: run one broker."""

from __future__ import annotations

import asyncio
import logging
import sys

from dmq.config import BrokerConfig, ConfigError, listener_endpoints, parse_properties


def _check_address(value: object, name: str) -> None:
    """A listener list: HOST:PORT or NAME://HOST:PORT entries, comma-separated (what the
    broker binds or advertises)."""
    from dmq.config import parse_endpoint

    if value is None or value == "":
        return
    text = str(value)
    for item in text.split(","):
        try:
            parse_endpoint(item)
        except ValueError:
            raise ConfigError(f"{name} expects HOST:PORT or NAME://HOST:PORT[,...] (PORT from 0 "
                              f"to 65535), got {text!r}") from None


def build_config(listen: str | None, advertised: str | None, data_dir: str | None,
                 config_file: str | None, overrides: list[str], broker_id: int | None,
                 zookeeper: str | None = None, metrics: str | None = None) -> BrokerConfig:
    props: dict[str, str] = {}
    if config_file:
        try:
            with open(config_file) as f:
                props.update(parse_properties(f.read()))
        except OSError as e:
            raise ConfigError(f"cannot read --config {config_file}: "
                              f"{(e.strerror or str(e)).lower()}") from None
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
    if metrics:
        props["metrics.listener"] = metrics
    config = BrokerConfig(props)
    _check_address(config["listeners"], "--listen" if listen else "listeners")
    _check_address(config["advertised.listeners"],
                   "--advertised-listener" if advertised else "advertised.listeners")
    listener_endpoints(config)
    listener_endpoints(config, "advertised.listeners")
    _check_address(config["metrics.listener"], "--metrics" if metrics else "metrics.listener")
    return config


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
        # Data directory and listener problems have their own messages (dmq.server.broker);
        # anything else is named as it is, not guessed to be a port clash.
        where = f" ({e.filename})" if e.filename else ""
        print(f"error: the broker stopped: {(e.strerror or str(e)).lower()}{where}", file=sys.stderr)
        raise SystemExit(1) from None
