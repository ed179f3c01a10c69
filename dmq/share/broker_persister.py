"""BrokerSharePersister: the broker's ``SharePersister`` (Kafka's DefaultStatePersister).

Each call finds the leader of the key's ``__share_group_state`` partition in the
broker's metadata (the ZooKeeper cache in a cluster, the embedded store on one node;
the topic is created on first use), calls the local ``ShareCoordinator`` when that is
this broker, and otherwise sends the inter-broker request (83-87) to the leader over an
``AsyncWireClient``. NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS and connection failures are retried with a short backoff
(the metadata may meanwhile name a new leader) until ``retry_timeout_ms`` has passed;
then the last error is answered (COORDINATOR_NOT_AVAILABLE for a connection failure).
Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kio.schema.delete_share_group_state.v0 import request as delete_req
from kio.schema.errors import ErrorCode
from kio.schema.initialize_share_group_state.v0 import request as init_req
from kio.schema.read_share_group_state.v0 import request as read_req
from kio.schema.read_share_group_state_summary.v1 import request as summary_req
from kio.schema.write_share_group_state.v1 import request as write_req

from dmq.client.security import ClientSecurity
from dmq.client.wire import AsyncWireClient
from dmq.cluster.metadata import MetadataStore
from dmq.protocol.codec import make
from dmq.share.coordinator import ShareCoordinator
from dmq.share.persister import ReadStateResult, SharePartitionKey, StateSummary
from dmq.share.records import UNKNOWN_DELIVERY_COMPLETE_COUNT, StateBatch

log = logging.getLogger("dmq.share")

T = TypeVar("T")

RETRIABLE = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                       ErrorCode.coordinator_load_in_progress})


class _Unreachable(Exception):
    """The state partition's leader could not be reached (connection failed or closed)."""


class BrokerSharePersister:
    """Implements ``dmq.share.persister.SharePersister``. Invariant: at most one request
    in flight per remote broker (an AsyncWireClient takes one at a time); a connection
    that failed is dropped and opened again on the next call."""

    def __init__(self, broker_id: int, store: MetadataStore, coordinator: ShareCoordinator,
                 retry_timeout_ms: int = 15000, retry_backoff_ms: int = 100,
                 request_timeout_s: float = 10.0, security: ClientSecurity | None = None) -> None:
        self.broker_id = broker_id
        self.security = security  # the inter-broker listener's TLS/SASL
        self.store = store
        self.coordinator = coordinator
        self.retry_timeout_s = retry_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.request_timeout_s = request_timeout_s
        self._clients: dict[int, AsyncWireClient] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    # -------------------------------------------------------------- the contract

    async def initialize_state(self, key: SharePartitionKey, state_epoch: int,
                               start_offset: int) -> ErrorCode:
        request = make(init_req.InitializeShareGroupStateRequest, group_id=key.group_id, topics=(
            make(init_req.InitializeStateData, topic_id=key.topic_id, partitions=(
                make(init_req.PartitionData, partition=key.partition, state_epoch=state_epoch,
                     start_offset=start_offset),)),))
        return await self._call(
            key, lambda: self.coordinator.initialize_state(key, state_epoch, start_offset),
            request, lambda p: ErrorCode(p.error_code), lambda e: e)

    async def read_state(self, key: SharePartitionKey, leader_epoch: int) -> ReadStateResult:
        request = make(read_req.ReadShareGroupStateRequest, group_id=key.group_id, topics=(
            make(read_req.ReadStateData, topic_id=key.topic_id, partitions=(
                make(read_req.PartitionData, partition=key.partition, leader_epoch=leader_epoch),)),))

        def answer(p: Any) -> ReadStateResult:
            return ReadStateResult(ErrorCode(p.error_code), p.state_epoch, p.start_offset, tuple(
                StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                for b in p.state_batches), p.error_message)

        return await self._call(key, lambda: self.coordinator.read_state(key, leader_epoch), request,
                                answer, lambda e: ReadStateResult(e))

    async def write_state(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                          start_offset: int, state_batches: tuple[StateBatch, ...],
                          delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT) -> ErrorCode:
        request = make(write_req.WriteShareGroupStateRequest, group_id=key.group_id, topics=(
            make(write_req.WriteStateData, topic_id=key.topic_id, partitions=(
                make(write_req.PartitionData, partition=key.partition, state_epoch=state_epoch,
                     leader_epoch=leader_epoch, start_offset=start_offset,
                     delivery_complete_count=delivery_complete_count, state_batches=tuple(
                         make(write_req.StateBatch, first_offset=b.first_offset, last_offset=b.last_offset,
                              delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                         for b in state_batches)),)),))
        return await self._call(
            key, lambda: self.coordinator.write_state(key, state_epoch, leader_epoch, start_offset,
                                                      state_batches, delivery_complete_count),
            request, lambda p: ErrorCode(p.error_code), lambda e: e)

    async def delete_state(self, key: SharePartitionKey) -> ErrorCode:
        request = make(delete_req.DeleteShareGroupStateRequest, group_id=key.group_id, topics=(
            make(delete_req.DeleteStateData, topic_id=key.topic_id, partitions=(
                make(delete_req.PartitionData, partition=key.partition),)),))
        return await self._call(key, lambda: self.coordinator.delete_state(key), request,
                                lambda p: ErrorCode(p.error_code), lambda e: e)

    async def read_state_summary(self, key: SharePartitionKey, leader_epoch: int) -> StateSummary:
        request = make(summary_req.ReadShareGroupStateSummaryRequest, group_id=key.group_id, topics=(
            make(summary_req.ReadStateSummaryData, topic_id=key.topic_id, partitions=(
                make(summary_req.PartitionData, partition=key.partition, leader_epoch=leader_epoch),)),))

        def answer(p: Any) -> StateSummary:
            return StateSummary(ErrorCode(p.error_code), p.state_epoch, p.leader_epoch, p.start_offset,
                                p.delivery_complete_count)

        return await self._call(key, lambda: self.coordinator.read_state_summary(key, leader_epoch),
                                request, answer, lambda e: StateSummary(e))

    # ------------------------------------------------------------------ routing

    async def _call(self, key: SharePartitionKey, local: Callable[[], Awaitable[T]], request: Any,
                    from_partition: Callable[[Any], T], from_error: Callable[[ErrorCode], T]) -> T:
        deadline = time.monotonic() + self.retry_timeout_s
        while True:
            node = await self.coordinator.coordinator_node(key)
            if node is None:
                result = from_error(ErrorCode.coordinator_not_available)
            elif node.broker_id == self.broker_id:
                result = await local()
            else:
                try:
                    partition = await self._remote(node.broker_id, node.host, node.port, request)
                    result = from_partition(partition)
                except _Unreachable:
                    result = from_error(ErrorCode.coordinator_not_available)
            error = result if isinstance(result, ErrorCode) else getattr(result, "error", None)
            if error not in RETRIABLE or time.monotonic() >= deadline:
                return result
            await asyncio.sleep(self.retry_backoff_s)

    async def _remote(self, broker_id: int, host: str, port: int, request: Any) -> Any:
        """Send ``request`` (one topic, one partition) to the broker; its one partition result."""
        async with self._locks.setdefault(broker_id, asyncio.Lock()):
            client = self._clients.get(broker_id)
            if client is None or (client.host, client.port) != (host, port):
                if client is not None:
                    client.close()
                client = self._clients[broker_id] = AsyncWireClient(
                    host, port, f"dmq-share-persister-{self.broker_id}", security=self.security)
            try:
                response = await client.request(request, self.request_timeout_s)
            except (OSError, EOFError, TimeoutError, ValueError) as e:
                # EOFError: the broker closed the connection (killed, say); ValueError: an
                # answer that does not parse; the stream cannot be trusted after either.
                client.close()
                self._clients.pop(broker_id, None)
                log.info("share state request to broker %d failed: %s", broker_id, e)
                raise _Unreachable(str(e)) from None
        results = response.results
        if len(results) != 1 or len(results[0].partitions) != 1:
            raise _Unreachable(f"broker {broker_id} answered {len(results)} topics for one")
        return results[0].partitions[0]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
