"""ElectLeaders (43): preferred leader election on request (kafka-leader-election.sh).

Preferred elections are validated here and carried out by the controller;
the answer comes once each accepted partition is led by its preferred
replica, or when the request's timeout passes. Unclean elections by request
are refused: topics opt in with ``unclean.leader.election.enable``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2
PREFERRED = 0


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    store = services.metadata
    if request.topic_partitions is None:
        partitions = [(t.name, p) for t in store.topics().values() for p in t.partitions]
    else:
        partitions = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    results: dict[tuple[str, int], tuple[str, str | None]]
    top_error = ErrorCode.none
    if not authorize(services, ctx, AclOperation.ALTER):
        top_error = ErrorCode.cluster_authorization_failed
        results = dict.fromkeys(partitions, ("cluster_authorization_failed", "Cluster authorization failed."))
    elif getattr(request, "election_type", PREFERRED) != PREFERRED:
        results = {tp: ("invalid_request", "unclean elections by request are not supported; set "
                        "unclean.leader.election.enable on the topic") for tp in partitions}
    else:
        results = await services.admin_manager.elect_preferred_leaders(partitions)
        deadline = time.monotonic() + max(request.timeout.total_seconds(), 0.0)
        pending = [tp for tp, (error, _) in results.items() if error == "none"]
        while pending and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            pending = [tp for tp in pending if not _led_by_preferred(services, tp)]
        for tp in pending:
            results[tp] = ("request_timed_out", "the election did not complete within the timeout")
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), (error, message) in results.items():
        by_topic.setdefault(topic, []).append(make(
            schema.PartitionResult, partition_id=p, error_code=ErrorCode[error], error_message=message))
    return make(schema.ElectLeadersResponse, throttle_time=NO_THROTTLE, error_code=top_error,
                replica_election_results=tuple(
                    make(schema.ReplicaElectionResult, topic=t, partition_result=tuple(ps))
                    for t, ps in by_topic.items()))


def _led_by_preferred(services: BrokerServices, tp: tuple[str, int]) -> bool:
    meta = services.metadata.topic(tp[0])
    state = meta.partitions.get(tp[1]) if meta else None
    return state is None or (bool(state.replicas) and state.leader == state.replicas[0])
