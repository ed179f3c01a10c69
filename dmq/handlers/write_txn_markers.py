"""WriteTxnMarkers (27): a transaction coordinator's COMMIT/ABORT markers for partitions led here.

Markers for ``__consumer_offsets`` go through the group coordinator's runtime
(they end the transaction's offsets in log order); the others are appended to
the partition's log as its leader and answered once replicated, as acks=all.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import OFFSETS_TOPIC
from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 27
MIN_VERSION = 1
MAX_VERSION = 1

MARKER_TIMEOUT_S = 30.0
COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                               ErrorCode.coordinator_load_in_progress})


async def write_markers(services: BrokerServices, producer_id: int, producer_epoch: int, commit: bool,
                        coordinator_epoch: int, partitions: list[tuple[str, int]]
                        ) -> dict[tuple[str, int], ErrorCode]:
    """Write one transaction's marker to each partition this broker leads; an error each."""
    async def one(topic: str, index: int) -> ErrorCode:
        if topic == OFFSETS_TOPIC:
            error = await services.coordinators.group.complete_transaction(
                index, producer_id, producer_epoch, commit, coordinator_epoch)
            # As Kafka: the offsets partition moved or is loading here: the sender finds its
            # leader again and retries (these are not errors it retries as such).
            return ErrorCode.not_leader_or_follower if error in COORDINATOR_MOVED else error
        rm = services.replica_manager
        result = rm.append_end_txn_marker(topic, index, producer_id, producer_epoch, coordinator_epoch, commit)
        if result.error != ErrorCode.none:
            return result.error
        error, _ = await rm.wait_for_replication(topic, index, result.last_offset, MARKER_TIMEOUT_S)
        return error

    errors = await asyncio.gather(*(one(t, p) for t, p in partitions))
    return dict(zip(partitions, errors, strict=True))


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    results = []
    # Kafka: ALTER or CLUSTER_ACTION on the cluster (the transaction coordinators' requests).
    allowed = authorize(services, ctx, AclOperation.ALTER) or authorize(services, ctx, AclOperation.CLUSTER_ACTION)
    for marker in request.markers:
        wanted = [(t.name, int(p)) for t in marker.topics for p in t.partition_indexes]
        errors = dict.fromkeys(wanted, ErrorCode.cluster_authorization_failed) if not allowed else await write_markers(services, marker.producer_id, marker.producer_epoch,
                                     bool(marker.transaction_result), marker.coordinator_epoch, wanted)
        results.append(make(schema.WritableTxnMarkerResult, producer_id=marker.producer_id, topics=tuple(
            make(schema.WritableTxnMarkerTopicResult, name=t.name, partitions=tuple(
                make(schema.WritableTxnMarkerPartitionResult, partition_index=p,
                     error_code=errors[(t.name, int(p))])
                for p in t.partition_indexes))
            for t in marker.topics)))
    return make(schema.WriteTxnMarkersResponse, markers=tuple(results))
