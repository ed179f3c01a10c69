"""``dmq server``: run one broker."""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from typing import Any

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


def _check_host_port(value: object, name: str) -> None:
    """One HOST:PORT (what a side listener such as metrics.listener binds)."""
    from dmq.config import parse_endpoint

    if value is None or value == "":
        return
    text = str(value)
    try:
        if "," in text or "://" in text:
            raise ValueError("one address only")
        parse_endpoint(text)
    except ValueError:
        raise ConfigError(f"{name} expects one HOST:PORT (PORT from 0 to 65535), got {text!r}") from None


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
    _check_host_port(config["metrics.listener"], "--metrics" if metrics else "metrics.listener")
    return config


def parse_console(value: str | None) -> tuple[str, int] | None:
    """``--console HOST:PORT`` (None: no console)."""
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--console expects HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


async def _run_with_console(broker: Any, address: tuple[str, int]) -> str:
    """The broker and its web console on one event loop. The console talks to the broker
    over the Kafka protocol, as a standalone one does, through the broker's first PLAINTEXT
    listener (it has no login of its own to give a TLS or SASL one); it stops when the
    broker stops. Returns why the console could not be served ("" once the broker has run)."""
    from dmq.cli.web import bind_error
    from dmq.metrics import exposition
    from dmq.web import start

    plaintext = next((e.name for e in broker.endpoints if e.security_protocol == "PLAINTEXT"), None)
    if plaintext is None:
        return ("--console connects to the broker through a PLAINTEXT listener and listeners= has "
                "none: add one on loopback (PLAINTEXT://127.0.0.1:PORT), or serve the console on its "
                "own: dmq console -b HOST:PORT --command-config FILE")
    task = asyncio.ensure_future(broker.run())
    while plaintext not in broker.bound_listeners and not task.done():  # until it listens
        await asyncio.sleep(0.05)
    if task.done():
        await task
        return ""
    host, port = broker.bound_listeners[plaintext]
    try:
        running = await start(f"{'127.0.0.1' if host in ('', '0.0.0.0') else host}:{port}", *address,
                              metrics=functools.partial(exposition, broker))
    except OSError as e:
        broker.stopping.set()
        await task
        return f"cannot serve the console on {address[0]}:{address[1]}: {bind_error(e)}"
    print(f"dmq console on {running.url}", flush=True)
    try:
        await task
    finally:
        await running.stop()
    return ""


def run_server(config: BrokerConfig, log_level: str, console: tuple[str, int] | None = None) -> None:
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
        if console is None:
            runner(broker.run())
        else:
            problem = runner(_run_with_console(broker, console))
            if problem:
                print(f"error: {problem}", file=sys.stderr)
                raise SystemExit(1)
    except OSError as e:
        # Data directory and listener problems have their own messages (dmq.server.broker);
        # anything else is named as it is, not guessed to be a port clash.
        where = f" ({e.filename})" if e.filename else ""
        print(f"error: the broker stopped: {(e.strerror or str(e)).lower()}{where}", file=sys.stderr)
        raise SystemExit(1) from None
