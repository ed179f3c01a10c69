"""The authorise step of every handler (Kafka's AuthHelper): one ``authorize()`` hook.

``authorize(services, ctx, operation, resource_type, name)`` is True when the request's
principal (``ctx.principal``, from ``ctx.client_host``) may do ``operation`` on the named
resource; always True when the broker has no authorizer (``authorizer.class.name`` empty),
at the cost of one attribute test. The resource defaults to the cluster. The error a
refusal gets is the handler's to give, by Kafka's rules for its API; ``refusal()`` names
Kafka's error for a resource type.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from dmq.handlers.context import BrokerServices, RequestContext
from dmq.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

__all__ = ["CLUSTER_NAME", "NOT_REQUESTED", "AclOperation", "ResourceType", "authorize",
           "authorize_any_topic", "authorize_config_resource", "authorized_operations", "refusal"]

# The authorized-operations fields' value when the client did not ask for them.
NOT_REQUESTED = -(2**31)

_REFUSALS = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
    ResourceType.DELEGATION_TOKEN: ErrorCode.delegation_token_authorization_failed,
}


def authorize(services: BrokerServices, ctx: RequestContext, operation: AclOperation,
              resource_type: ResourceType = ResourceType.CLUSTER, name: str = CLUSTER_NAME) -> bool:
    authorizer = services.authorizer
    return authorizer is None or authorizer.authorize(ctx.principal, ctx.client_host, operation,
                                                      resource_type, name)


def authorize_any_topic(services: BrokerServices, ctx: RequestContext, operation: AclOperation) -> bool:
    """Whether some topic allows ``operation`` (Kafka's authorizeByResourceType)."""
    authorizer = services.authorizer
    return authorizer is None or authorizer.authorize_by_resource_type(
        ctx.principal, ctx.client_host, operation, ResourceType.TOPIC)


def refusal(resource_type: ResourceType) -> ErrorCode:
    """Kafka's error for a refused operation on a resource of this type."""
    return _REFUSALS[resource_type]


# Config resource types (DescribeConfigs and the AlterConfigs APIs) -> the ACL resource:
# topics and groups their own, brokers, broker loggers and client metrics (16, which dmq
# does not support: refused INVALID_REQUEST once authorised) the cluster, as Kafka's ConfigHelper.
_CONFIG_RESOURCES = {2: ResourceType.TOPIC, 4: ResourceType.CLUSTER, 8: ResourceType.CLUSTER,
                     16: ResourceType.CLUSTER, 32: ResourceType.GROUP}


def authorize_config_resource(services: BrokerServices, ctx: RequestContext, operation: AclOperation,
                              config_resource_type: int, name: str) -> ErrorCode:
    """A config resource's check (Kafka: a topic's or group's own ACLs, a broker's the
    cluster's): ErrorCode.none, or the refusal of its resource type."""
    resource_type = _CONFIG_RESOURCES.get(config_resource_type)
    if resource_type is None:
        return ErrorCode.none  # the handler refuses the unknown type itself
    resource_name = CLUSTER_NAME if resource_type == ResourceType.CLUSTER else name
    if authorize(services, ctx, operation, resource_type, resource_name):
        return ErrorCode.none
    return refusal(resource_type)


def authorized_operations(services: BrokerServices, ctx: RequestContext, resource_type: ResourceType,
                          name: str = CLUSTER_NAME) -> int:
    """Kafka's authorizedOperations: a bit (1 << code) per operation of the resource type
    the principal may do (every one without an authorizer)."""
    return sum(1 << int(op) for op in SUPPORTED_OPERATIONS[resource_type]
               if authorize(services, ctx, op, resource_type, name))
