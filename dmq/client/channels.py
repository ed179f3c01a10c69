"""BrokerChannels: one AsyncWireClient per remote broker, for a broker's own requests to
its peers (the share side's lag lookups, dead-letter produces, share-partition describes).

Requests to one broker wait for each other (an AsyncWireClient takes one at a time); a
request that fails closes its connection, and the next opens a new one. Failures raise
``BrokerUnreachable`` (the broker is unknown, refused or closed the connection, did not
answer in time, or answered something unreadable). Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from dmq.client.security import ClientSecurity
from dmq.client.wire import AsyncWireClient

log = logging.getLogger("dmq.client")


class BrokerUnreachable(Exception):
    """A request to another broker got no usable answer."""


class BrokerChannels:
    """``address_of(broker_id)`` is the broker's (host, port) in the cluster metadata, None
    if it is not registered. Invariant: at most one request in flight per broker."""

    def __init__(self, client_id: str, address_of: Callable[[int], tuple[str, int] | None],
                 security: ClientSecurity | None = None) -> None:
        self.client_id = client_id
        self.security = security  # the inter-broker listener's TLS/SASL
        self.address_of = address_of
        self._clients: dict[int, AsyncWireClient] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def request(self, broker_id: int, request: Any, timeout_s: float) -> Any:
        address = self.address_of(broker_id)
        if address is None:
            raise BrokerUnreachable(f"broker {broker_id} is not registered")
        async with self._locks.setdefault(broker_id, asyncio.Lock()):
            client = self._clients.get(broker_id)
            if client is None or (client.host, client.port) != address:
                if client is not None:
                    client.close()
                client = self._clients[broker_id] = AsyncWireClient(address[0], address[1], self.client_id,
                                                                    security=self.security)
            try:
                return await client.request(request, timeout_s)
            except (OSError, EOFError, TimeoutError, ValueError) as e:
                # EOFError: the broker closed the connection; ValueError: an answer that does
                # not parse. The stream cannot be trusted after either.
                client.close()
                self._clients.pop(broker_id, None)
                log.info("%s: request to broker %d failed: %s", self.client_id, broker_id, e)
                raise BrokerUnreachable(str(e) or type(e).__name__) from None

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
