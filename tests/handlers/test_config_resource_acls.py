"""DescribeConfigs under ACLs, with a real AclAuthorizer: a CLIENT_METRICS resource (type
16) needs DescribeConfigs on the cluster, as Kafka's ConfigHelper checks it with brokers and
broker loggers; dmq, which has no client-metrics configs, refuses it INVALID_REQUEST only
to a caller that passes that check."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from kio.schema.errors import ErrorCode
from support.acls import acl, store_with

from dmq.handlers import describe_configs
from dmq.handlers.authorize import authorize_config_resource
from dmq.handlers.context import RequestContext
from dmq.protocol.codec import make, request_class, request_module, response_module
from dmq.security.acl import CLUSTER_NAME, AclOperation, AclPermissionType, ResourceType
from dmq.security.authorizer import AclAuthorizer

CLIENT_METRICS = 16


def test_client_metrics_configs_need_the_cluster(tmp_path: Path) -> None:
    authorizer = AclAuthorizer(store_with(tmp_path, [
        acl(ResourceType.CLUSTER, CLUSTER_NAME, "User:ops", AclOperation.ALL, AclPermissionType.ALLOW)]))
    services = SimpleNamespace(authorizer=authorizer)
    mod = request_module(32, 4)
    request = make(request_class(32, 4), include_synonyms=False, include_documentation=False, resources=(
        make(mod.DescribeConfigsResource, resource_type=CLIENT_METRICS, resource_name="sub",
             configuration_keys=None),))

    def answer(principal: str) -> ErrorCode:
        ctx = RequestContext(32, 4, 1, "c", "1.2.3.4", response_module(32, 4), principal=principal)
        response = asyncio.run(describe_configs.handle(services, ctx, request))  # type: ignore[arg-type]
        return ErrorCode(response.results[0].error_code)

    assert answer("User:app") == ErrorCode.cluster_authorization_failed
    assert answer("User:ops") == ErrorCode.invalid_request
    for principal, expected in (("User:app", ErrorCode.cluster_authorization_failed), ("User:ops", ErrorCode.none)):
        ctx = RequestContext(44, 1, 1, "c", "1.2.3.4", response_module(44, 1), principal=principal)
        assert authorize_config_resource(services, ctx, AclOperation.ALTER_CONFIGS,  # type: ignore[arg-type]
                                         CLIENT_METRICS, "sub") == expected
