"""Metadata (3): brokers, controller, topics with partitions, leaders, replicas and ISR.

Unknown topics are created when both the request (v4+) and
``auto.create.topics.enable`` allow it; an internal topic as its coordinator creates it. A topic another broker created a moment
before (ZooKeeper has it, this broker's watch-fed cache not yet) answers
LEADER_NOT_AVAILABLE, as Kafka does for a topic being created: the client retries. So
does a partition this broker is to lead but does not lead yet (its log is still being
made on a worker thread): a client that found the topic a moment after another created it
through this broker is not sent to a leader that answers NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import (
    BrokerInfo,
    MetadataError,
    MetadataStore,
    TopicMetadata,
    validate_topic_name,
)
from dmq.handlers.authorize import (
    NOT_REQUESTED,
    AclOperation,
    ResourceType,
    authorize,
    authorized_operations,
)
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 12

log = logging.getLogger("dmq.handlers")
ZERO_UUID = uuid.UUID(int=0)


def _topic_entry(services: BrokerServices, schema: Any, topic: TopicMetadata, live: set[int],
                 operations: int = NOT_REQUESTED) -> Any:
    # A partition without a live leader answers LEADER_NOT_AVAILABLE so clients retry, and
    # so does one this broker is to lead but does not lead yet (its log is being made, the
    # reconcile has not run, it holds a deleted topic's partition of that name): in
    # ZooKeeper mode a Kafka broker's own cache names it leader only after the
    # LeaderAndIsr that made it one. (Other brokers may name it a moment earlier, as in
    # Kafka; clients retry the NOT_LEADER_OR_FOLLOWER they then get.) Epoch, replicas and
    # ISR are listed as they are, as Kafka's cache does. Replicas on brokers that are down
    # are listed as offline.
    me = services.broker_id
    held = services.replica_manager.partitions

    def leader(p: int, s: Any) -> int:
        if s.leader not in live:
            return -1
        if s.leader == me:
            part = held.get((topic.name, p))
            if part is None or not part.is_leader or part.topic_id != topic.topic_id:
                return -1
        return int(s.leader)

    partitions = tuple(
        make(schema.MetadataResponsePartition,
             error_code=ErrorCode.none if shown >= 0 else ErrorCode.leader_not_available,
             partition_index=p, leader_id=shown,
             leader_epoch=s.leader_epoch, replica_nodes=tuple(s.replicas),
             isr_nodes=tuple(s.isr), offline_replicas=tuple(r for r in s.replicas if r not in live))
        for p, s in sorted(topic.partitions.items()) for shown in (leader(p, s),)
    )
    return make(schema.MetadataResponseTopic, error_code=ErrorCode.none, name=topic.name,
                topic_id=topic.uuid, is_internal=topic.is_internal, partitions=partitions,
                topic_authorized_operations=operations)


def _error_entry(schema: Any, name: str | None, topic_id: uuid.UUID | None, error: ErrorCode) -> Any:
    return make(schema.MetadataResponseTopic, error_code=error, name=name,
                topic_id=topic_id or ZERO_UUID, is_internal=False, partitions=())


def _listed_brokers(store: MetadataStore) -> list[BrokerInfo]:
    """The registered brokers, and this broker while its own registration is missing from
    the cache (its old session expired, its new one has not registered it yet): clients
    drop every broker a Metadata answer leaves out (librdkafka from 2.10), and an answer
    without the one broker they reach left them none to ask for minutes (until their
    metadata.recovery.rebootstrap.trigger.ms). A Kafka broker's cache holds itself too:
    the controller stops sending updates to a broker it takes for gone. Its partitions
    still show no leader until it is registered (``live``)."""
    listed = store.brokers()
    own = store.registration
    if own is not None and all(b.broker_id != own.broker_id for b in listed):
        listed = sorted([*listed, own], key=lambda b: b.broker_id)
    return listed


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    store = services.metadata
    live = {b.broker_id for b in store.brokers()}
    topics: list[Any] = []
    requested = request.topics
    with_operations = bool(getattr(request, "include_topic_authorized_operations", False))

    def shown(topic: TopicMetadata) -> Any:
        return _topic_entry(services, schema, topic, live, authorized_operations(services, ctx, ResourceType.TOPIC, topic.name)
                            if with_operations else NOT_REQUESTED)

    if requested is None or (ctx.api_version == 0 and not requested):
        # Topics the principal may not describe are left out (Kafka).
        topics = [shown(t) for t in store.topics().values()
                  if authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)]
    else:
        allow_create = bool(getattr(request, "allow_auto_topic_creation", True)) and bool(
            services.config["auto.create.topics.enable"])
        for entry in requested:
            name = entry.name
            topic_id = getattr(entry, "topic_id", None)
            if name is None and topic_id is not None and topic_id != ZERO_UUID:
                found = store.topic_by_id(topic_id)
                if found is None:
                    topics.append(_error_entry(schema, None, topic_id, ErrorCode.unknown_topic_id))
                elif not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, found.name):
                    topics.append(_error_entry(schema, None, topic_id, ErrorCode.topic_authorization_failed))
                else:
                    topics.append(shown(found))
                continue
            if name is None:
                topics.append(_error_entry(schema, None, None, ErrorCode.invalid_request))
                continue
            if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                # Whether it exists is not disclosed (Kafka).
                topics.append(_error_entry(schema, name, None, ErrorCode.topic_authorization_failed))
                continue
            topic = store.topic(name)
            if topic is None:
                # Kafka's order: with auto-creation, Create first (a caller that may not
                # create learns nothing of the name), then the name's validity.
                if allow_create and not (authorize(services, ctx, AclOperation.CREATE)
                                         or authorize(services, ctx, AclOperation.CREATE, ResourceType.TOPIC, name)):
                    topics.append(_error_entry(schema, name, None, ErrorCode.topic_authorization_failed))
                    continue
                try:
                    validate_topic_name(name)
                except MetadataError:
                    topics.append(_error_entry(schema, name, None, ErrorCode.invalid_topic_exception))
                    continue
                if not allow_create:
                    topics.append(_error_entry(schema, name, None, ErrorCode.unknown_topic_or_partition))
                    continue
                try:
                    topic = await services.admin_manager.auto_create_topic(name)
                    log.info("auto-created topic %s for client %s", name, ctx.client_id)
                except MetadataError as e:
                    if e.error != "topic_already_exists":
                        topics.append(_error_entry(schema, name, None, ErrorCode[e.error]))
                        continue
                    topic = store.topic(name)
                    if topic is None:
                        # Created meanwhile through another broker; the watch has not brought
                        # it here yet. Kafka's answer for a topic just created: retry.
                        topics.append(_error_entry(schema, name, None,
                                                   ErrorCode.leader_not_available))
                        continue
            topics.append(shown(topic))
    brokers = tuple(
        make(schema.MetadataResponseBroker, node_id=b.broker_id, host=host, port=port,
             rack=b.rack)
        for b in _listed_brokers(store) for host, port in (b.endpoint(ctx.listener),)
    )
    cluster_operations = NOT_REQUESTED
    if getattr(request, "include_cluster_authorized_operations", False):  # v8-10
        cluster_operations = (authorized_operations(services, ctx, ResourceType.CLUSTER)
                              if authorize(services, ctx, AclOperation.DESCRIBE) else 0)
    return make(schema.MetadataResponse, throttle_time=NO_THROTTLE, brokers=brokers,
                cluster_id=store.cluster_id, controller_id=store.controller_id(),
                topics=tuple(topics), cluster_authorized_operations=cluster_operations)
