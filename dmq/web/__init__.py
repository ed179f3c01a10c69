"""dmq's web console (docs/console.md): cluster, topics, messages, consumer and share
groups, transactions, disk use, in server-rendered pages.

It talks to the cluster only through the Kafka protocol (``dmq.web.kafka``), so the same
console runs beside a broker on the broker's event loop (``dmq server --console``) or on
its own (``dmq console -b``). ``start()`` serves it; ``Console.routes()`` in
``dmq.web.app`` is where routes (``/metrics`` among them) are added.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from dmq.client.security import ClientSecurity
from dmq.web.app import Console

__all__ = ["Console", "RunningConsole", "start"]


@dataclass
class RunningConsole:
    """A console being served; ``stop()`` ends it (the sampler and the connections too)."""

    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start(bootstrap: str, host: str = "127.0.0.1", port: int = 8080,
                sample_interval: float = 10.0,
                metrics: Callable[[], Awaitable[bytes]] | None = None,
                security: ClientSecurity | None = None) -> RunningConsole:
    """Serve the console of the cluster at ``bootstrap`` on ``host:port`` (0: any free
    port) in the running event loop, connecting as ``security`` says (None: PLAINTEXT);
    raises OSError when the address cannot be bound."""
    console = Console(bootstrap, sample_interval=sample_interval, metrics=metrics, security=security)
    runner = web.AppRunner(console.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    bound = port
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            bound = int(address[1])
            break
    return RunningConsole(runner, host, bound)
