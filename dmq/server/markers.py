"""Where the transaction coordinator's markers go: this broker's own partitions directly,
the others' leaders by WriteTxnMarkers over the wire (the TransactionMarkerSender's writer)."""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import request as schema

from dmq.client.security import ClientSecurity
from dmq.client.wire import AsyncWireClient
from dmq.cluster.metadata import MetadataStore
from dmq.handlers.context import BrokerServices
from dmq.handlers.write_txn_markers import write_markers
from dmq.protocol.codec import make, request_class
from dmq.transaction.shard import SendMarkers

log = logging.getLogger("dmq.transaction")

REQUEST_TIMEOUT_S = 30.0


class BrokerMarkerWriter:
    """Event-loop thread only; one connection per remote broker, reopened after a failure.

    The marker sender writes the markers of several transactions at once, and an
    AsyncWireClient takes one request at a time (a second reader of its stream raises, or
    takes the first one's response): requests to a broker wait for each other."""

    def __init__(self, broker_id: int, store: MetadataStore, services: BrokerServices,
                 security: ClientSecurity | None = None) -> None:
        self.broker_id = broker_id
        self.security = security  # the inter-broker listener's TLS/SASL
        self.store = store
        self.services = services
        self._clients: dict[int, AsyncWireClient] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    def leader_of(self, topic: str, partition: int) -> int | None:
        meta = self.store.topic(topic)
        if meta is None or partition not in meta.partitions:
            return None
        return meta.partitions[partition].leader

    async def write(self, broker_id: int, markers: SendMarkers,
                    partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        if broker_id == self.broker_id:
            return await write_markers(self.services, markers.producer_id, markers.producer_epoch,
                                       markers.commit, markers.coordinator_epoch, partitions)
        async with self._locks.setdefault(broker_id, asyncio.Lock()):
            return await self._write_remote(broker_id, markers, partitions)

    async def _write_remote(self, broker_id: int, markers: SendMarkers,
                            partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        client = await self._client(broker_id)
        if client is None:
            return dict.fromkeys(partitions, ErrorCode.broker_not_available)
        R = request_class(27, 1)
        topics: dict[str, list[int]] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)
        request = make(R, markers=(make(
            schema.WritableTxnMarker, producer_id=markers.producer_id, producer_epoch=markers.producer_epoch,
            transaction_result=markers.commit, coordinator_epoch=markers.coordinator_epoch,
            topics=tuple(make(schema.WritableTxnMarkerTopic, name=t, partition_indexes=tuple(ps))
                         for t, ps in topics.items())),))
        try:
            response = await client.request(request, REQUEST_TIMEOUT_S)
        except (OSError, EOFError, TimeoutError, ValueError) as e:
            # EOFError (IncompleteReadError): the broker closed the connection, say it was
            # killed. ValueError: an answer that does not parse or is not this request's;
            # the connection's stream cannot be trusted after it.
            client.close()
            self._clients.pop(broker_id, None)
            log.info("WriteTxnMarkers to broker %d failed: %s", broker_id, e)
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        out: dict[tuple[str, int], ErrorCode] = {}
        for result in response.markers:
            for t in result.topics:
                for p in t.partitions:
                    out[(t.name, p.partition_index)] = ErrorCode(p.error_code)
        return {tp: out.get(tp, ErrorCode.unknown_server_error) for tp in partitions}

    async def _client(self, broker_id: int) -> AsyncWireClient | None:
        client = self._clients.get(broker_id)
        if client is not None:
            return client
        address = next(((b.host, b.port) for b in self.store.brokers() if b.broker_id == broker_id), None)
        if address is None:
            return None
        client = AsyncWireClient(address[0], address[1], f"dmq-txn-markers-{self.broker_id}",
                                 security=self.security)
        try:
            await client.connect(REQUEST_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            log.info("cannot reach broker %d for transaction markers: %s", broker_id, e)
            return None
        self._clients[broker_id] = client
        return client

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
