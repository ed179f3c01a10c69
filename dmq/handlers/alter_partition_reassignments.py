"""AlterPartitionReassignments (45): move partitions to other brokers (KIP-455).

The request is validated and handed to the controller through
``/admin/reassign_partitions``; the answer says it was accepted, and
ListPartitionReassignments shows it until every new replica is in sync and
the old ones are gone.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import MetadataError
from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    targets = {(t.name, p.partition_index): (list(p.replicas) if p.replicas is not None else None)
               for t in request.topics for p in t.partitions}
    if not authorize(services, ctx, AclOperation.ALTER):
        return make(schema.AlterPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.", responses=tuple(
                        make(schema.ReassignableTopicResponse, name=t.name, partitions=tuple(
                            make(schema.ReassignablePartitionResponse, partition_index=p.partition_index,
                                 error_code=ErrorCode.cluster_authorization_failed,
                                 error_message="Cluster authorization failed.")
                            for p in t.partitions))
                        for t in request.topics))
    try:
        results = await services.admin_manager.reassign_partitions(targets)
    except MetadataError as e:
        results = {tp: (e.error, str(e)) for tp in targets}
    topics = tuple(
        make(schema.ReassignableTopicResponse, name=t.name, partitions=tuple(
            make(schema.ReassignablePartitionResponse, partition_index=p.partition_index,
                 error_code=ErrorCode[results[(t.name, p.partition_index)][0]],
                 error_message=results[(t.name, p.partition_index)][1])
            for p in t.partitions))
        for t in request.topics
    )
    return make(schema.AlterPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                error_code=ErrorCode.none, error_message=None, responses=topics)
