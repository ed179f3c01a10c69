"""``dmq console``: the web console of a cluster, on its own (docs/console.md).

``dmq server --console HOST:PORT`` serves the same console from inside the broker.
``--command-config FILE`` gives the client security for a TLS or SASL listener, as for
every command; the console's connections use it (docs/console.md)."""

from __future__ import annotations

import asyncio
import os
from typing import Annotated

import typer

from dmq.cli.common import Bootstrap, CommandConfigOption, client_security, ensure_reachable, fail
from dmq.cli.help import Typer

app = Typer(help="Serve the web console of a cluster (cluster, topics, messages, groups, "
                 "transactions).", invoke_without_command=True, subcommand_metavar="")


def parse_listen(text: str, flag: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        fail(f"{flag} expects HOST:PORT, got {text!r}", 2)
    return host.strip("[]") or "127.0.0.1", int(port)


def bind_error(e: OSError) -> str:
    """"address already in use", not asyncio's "error while attempting to bind on ..."."""
    return (os.strerror(e.errno) if e.errno else str(e) or type(e).__name__).lower()


async def serve(bootstrap: str, host: str, port: int, sample_interval: float) -> str:
    """Serve until cancelled; the reason when it cannot (exiting is left to the caller:
    a SystemExit raised inside the loop does not end it cleanly)."""
    from dmq.web import start

    try:
        running = await start(bootstrap, host, port, sample_interval, security=client_security())
    except OSError as e:
        return f"cannot listen on {host}:{port}: {bind_error(e)}"
    print(f"dmq console on {running.url} for {bootstrap} (Ctrl-C stops it)", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await running.stop()
    return ""


@app.callback()
def console(
    listen: Annotated[str, typer.Option(
        "--listen", metavar="HOST:PORT", help="address to serve the console on")] = "127.0.0.1:8080",
    sample_interval: Annotated[float, typer.Option(
        "--sample-interval", metavar="SECONDS", min=0,
        help="how often to sample message rates and group lag (0: never)")] = 10.0,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Serve the web console of the cluster at --bootstrap-server."""
    host, port = parse_listen(listen, "--listen")
    ensure_reachable(bootstrap_server)  # with --command-config: it also logs in
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run  # type: ignore[assignment]
    try:
        problem = runner(serve(bootstrap_server, host, port, sample_interval))
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    if problem:
        fail(problem)
