"""DescribeCluster (60): cluster id, controller and brokers."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import (
    NOT_REQUESTED,
    AclOperation,
    ResourceType,
    authorize,
    authorized_operations,
)
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 1

ENDPOINT_BROKERS = 1


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    store = services.metadata
    endpoint_type = getattr(request, "endpoint_type", ENDPOINT_BROKERS)
    if endpoint_type != ENDPOINT_BROKERS:
        return make(schema.DescribeClusterResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.unsupported_endpoint_type,
                    error_message="dmq brokers describe broker endpoints only",
                    endpoint_type=endpoint_type, cluster_id=store.cluster_id,
                    controller_id=-1, brokers=())
    brokers = tuple(
        make(schema.DescribeClusterBroker, broker_id=b.broker_id, host=host, port=port, rack=b.rack)
        for b in store.brokers() for host, port in (b.endpoint(ctx.listener),)
    )
    # No ACL check (Kafka); the cluster's authorized operations when asked for, with Describe.
    operations = NOT_REQUESTED
    if request.include_cluster_authorized_operations:
        operations = (authorized_operations(services, ctx, ResourceType.CLUSTER)
                      if authorize(services, ctx, AclOperation.DESCRIBE) else 0)
    return make(schema.DescribeClusterResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                error_message=None, endpoint_type=endpoint_type, cluster_id=store.cluster_id,
                controller_id=store.controller_id(), brokers=brokers, cluster_authorized_operations=operations)
