"""Creating topics under ACLs, handler by handler with a real AclAuthorizer: what a caller
that may create a topic, but not see its configs, is told by CreateTopics, and in which
order Metadata's auto-creation checks Create and the topic's name (Kafka's)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from support.acls import acl, store_with

from dmq.config import BrokerConfig
from dmq.handlers import create_topics, metadata
from dmq.handlers.context import RequestContext
from dmq.protocol.codec import make, request_class, request_module, response_module
from dmq.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from dmq.security.authorizer import AclAuthorizer


class Admin:
    def __init__(self) -> None:
        self.created: list[str] = []

    async def create_topic(self, name: str, *args: Any, validate_only: bool) -> Any:
        return SimpleNamespace(partitions={}, uuid=None, configs={})

    async def auto_create_topic(self, name: str) -> Any:
        self.created.append(name)
        raise AssertionError(f"{name} must not be created")


@pytest.mark.parametrize("validate_only", [True, False])
def test_create_topics_without_describe_configs_shows_no_partitions_or_replication(
        tmp_path: Path, validate_only: bool) -> None:
    """Kafka's ReplicationControlManager sets num_partitions, replication_factor and the
    configs only for a caller that may DescribeConfigs the topic; else they stay -1 with
    topic_config_error_code TOPIC_AUTHORIZATION_FAILED."""
    store = store_with(tmp_path, [
        acl(ResourceType.TOPIC, "app-", "User:app", AclOperation.CREATE, AclPermissionType.ALLOW, PatternType.PREFIXED),
        acl(ResourceType.TOPIC, "app-", "User:ops", AclOperation.CREATE, AclPermissionType.ALLOW, PatternType.PREFIXED),
        acl(ResourceType.TOPIC, "app-", "User:ops", AclOperation.DESCRIBE_CONFIGS, AclPermissionType.ALLOW,
            PatternType.PREFIXED),
    ])
    services = SimpleNamespace(authorizer=AclAuthorizer(store), admin_manager=Admin(),
                               config=BrokerConfig({"num.partitions": "12", "default.replication.factor": "3"}))
    mod = request_module(19, 7)
    request = make(request_class(19, 7), timeout=5000, validate_only=validate_only, topics=(
        make(mod.CreatableTopic, name="app-x", num_partitions=-1, replication_factor=-1, assignments=(),
             configs=()),))

    def answer(principal: str) -> Any:
        ctx = RequestContext(19, 7, 1, "c", "1.2.3.4", response_module(19, 7), principal=principal)
        return asyncio.run(create_topics.handle(services, ctx, request)).topics[0]  # type: ignore[arg-type]

    refused = answer("User:app")
    assert (refused.error_code, refused.topic_config_error_code) == (ErrorCode.none,
                                                                      ErrorCode.topic_authorization_failed)
    assert (refused.num_partitions, refused.replication_factor, refused.configs) == (-1, -1, None)
    shown = answer("User:ops")
    assert (shown.error_code, shown.topic_config_error_code) == (ErrorCode.none, ErrorCode.none)
    assert (shown.num_partitions, shown.replication_factor) == (12, 3) and shown.configs


def _metadata(tmp_path: Path, authorizer: Any, principal: str, name: str, auto_create: bool) -> ErrorCode:
    services = SimpleNamespace(authorizer=authorizer, metadata=authorizer.store if authorizer else
                               store_with(tmp_path, []), admin_manager=Admin(),
                               config={"auto.create.topics.enable": True})
    mod = request_module(3, 12)
    request = make(request_class(3, 12), topics=(make(mod.MetadataRequestTopic, name=name, topic_id=None),),
                   allow_auto_topic_creation=auto_create, include_topic_authorized_operations=False)
    ctx = RequestContext(3, 12, 1, "c", "1.2.3.4", response_module(3, 12), principal=principal)
    response = asyncio.run(metadata.handle(services, ctx, request))  # type: ignore[arg-type]
    (topic,) = response.topics
    return ErrorCode(topic.error_code)


def test_metadata_auto_creation_checks_create_before_the_name(tmp_path: Path) -> None:
    """KafkaApis.handleTopicMetadataRequest: a topic that does not exist, with
    auto-creation, is TOPIC_AUTHORIZATION_FAILED for a caller that may not create it,
    whatever its name; only a caller that may is told the name is invalid. Without
    auto-creation the name is checked (INVALID_TOPIC_EXCEPTION, else UNKNOWN_TOPIC_OR_PARTITION)."""
    store = store_with(tmp_path / "acls", [
        acl(ResourceType.TOPIC, "*", "User:app", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        acl(ResourceType.TOPIC, "*", "User:ops", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        acl(ResourceType.CLUSTER, "kafka-cluster", "User:ops", AclOperation.CREATE, AclPermissionType.ALLOW),
    ])
    authorizer = AclAuthorizer(store)
    authorizer.store = store  # type: ignore[attr-defined]
    bad = "no spaces allowed"
    assert _metadata(tmp_path, authorizer, "User:app", bad, True) == ErrorCode.topic_authorization_failed
    assert _metadata(tmp_path, authorizer, "User:ops", bad, True) == ErrorCode.invalid_topic_exception
    assert _metadata(tmp_path, authorizer, "User:app", bad, False) == ErrorCode.invalid_topic_exception
    assert _metadata(tmp_path, authorizer, "User:app", "fine", False) == ErrorCode.unknown_topic_or_partition
    assert _metadata(tmp_path / "none", None, "User:ANONYMOUS", bad, True) == ErrorCode.invalid_topic_exception
