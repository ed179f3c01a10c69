"""FindCoordinator (10): the broker coordinating a group, a transactional id or (v6, KIP-932)
a share-partition's state, key ``group:topicId:partition`` (single keys, or batched in v4)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.share.persister import SharePartitionKey
from dmq.share.records import parse_coordinator_key

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2


def _authorized(services: BrokerServices, ctx: RequestContext, key: str, key_type: int) -> ErrorCode:
    """Kafka: DESCRIBE on the group or transactional id; a share-partition key (sent by
    brokers) CLUSTER_ACTION."""
    if key_type == KEY_TYPE_GROUP and not authorize(services, ctx, AclOperation.DESCRIBE,
                                                    ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed
    if key_type == KEY_TYPE_TRANSACTION and not authorize(services, ctx, AclOperation.DESCRIBE,
                                                          ResourceType.TRANSACTIONAL_ID, key):
        return ErrorCode.transactional_id_authorization_failed
    if key_type == KEY_TYPE_SHARE and not authorize(services, ctx, AclOperation.CLUSTER_ACTION):
        return ErrorCode.cluster_authorization_failed
    return ErrorCode.none


async def _lookup(services: BrokerServices, ctx: RequestContext, key: str, key_type: int,
                  version: int) -> tuple[ErrorCode, str | None, int, str, int]:
    refused = _authorized(services, ctx, key, key_type)
    if refused != ErrorCode.none:
        return refused, "Authorization failed.", -1, "", -1
    if key_type == KEY_TYPE_SHARE:
        if version < 6 or services.share_coordinator is None:
            return ErrorCode.invalid_request, "share coordinator keys need FindCoordinator v6", -1, "", -1
        try:
            group_id, topic_id, partition = parse_coordinator_key(key)
        except ValueError:
            return ErrorCode.invalid_request, f"not a share-partition key: {key!r}", -1, "", -1
        node = await services.share_coordinator.coordinator_node(
            SharePartitionKey(group_id, topic_id, partition))
    elif key_type == KEY_TYPE_TRANSACTION:
        if not key:
            return ErrorCode.invalid_request, "empty transactional id", -1, "", -1
        node = await services.transactions.coordinator_node(key)
    elif key_type != KEY_TYPE_GROUP:
        return ErrorCode.invalid_request, f"unknown coordinator key type {key_type}", -1, "", -1
    else:  # the empty group id too: Kafka keeps it for old clients' offset commits
        node = await services.coordinators.group_coordinator_node(key)
    if node is None:
        return ErrorCode.coordinator_not_available, None, -1, "", -1
    host, port = node.endpoint(ctx.listener)  # the address of the listener the client came in on
    return ErrorCode.none, None, node.broker_id, host, port


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, message, node_id, host, port = await _lookup(services, ctx, key, key_type, ctx.api_version)
            coordinators.append(make(schema.Coordinator, key=key, node_id=node_id, host=host, port=port,
                                     error_code=error, error_message=message))
        return make(schema.FindCoordinatorResponse, throttle_time=NO_THROTTLE,
                    coordinators=tuple(coordinators))
    error, message, node_id, host, port = await _lookup(services, ctx, request.key, key_type, ctx.api_version)
    return make(schema.FindCoordinatorResponse, throttle_time=NO_THROTTLE, error_code=error,
                error_message=message, node_id=node_id, host=host, port=port)
