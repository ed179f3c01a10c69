"""Creating topics under ACLs, handler by handler with a real AclAuthorizer: what a caller
that may create a topic, but not see its configs, is told by CreateTopics."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from support.acls import acl, store_with

from dmq.config import BrokerConfig
from dmq.handlers import create_topics
from dmq.handlers.context import RequestContext
from dmq.protocol.codec import make, request_class, request_module, response_module
from dmq.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from dmq.security.authorizer import AclAuthorizer


class Admin:
    async def create_topic(self, name: str, *args: Any, validate_only: bool) -> Any:
        return SimpleNamespace(partitions={}, uuid=None, configs={})


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
