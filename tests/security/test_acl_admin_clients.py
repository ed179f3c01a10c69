"""CreateAcls, DescribeAcls and DeleteAcls with confluent-kafka's and kafka-python's admin
clients; ACLs kept across a restart and enforced after it; no authorizer: SECURITY_DISABLED."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType
from kio.schema.errors import ErrorCode
from support.broker import BrokerProcess

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module
from dmq.record.records import encode_batch

ANY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)
SECURED = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:ANONYMOUS",
           "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def secured_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker with the ACL authorizer, this test's connections (User:ANONYMOUS) super users."""
    proc = BrokerProcess(tmp_path / "data", overrides=SECURED).start()
    yield proc
    proc.close()


def as_tuples(bindings: list[AclBinding]) -> list[tuple[str, str, str, str, str, str, str]]:
    return sorted((b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
                   b.permission_type.name) for b in bindings)


def test_confluent_kafka_creates_describes_and_deletes(secured_broker: BrokerProcess) -> None:
    a = AdminClient({"bootstrap.servers": secured_broker.bootstrap})
    wanted = [
        AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "pay", ResourcePatternType.PREFIXED, "User:bob", "10.0.0.1",
                   AclOperation.WRITE, AclPermissionType.DENY),
        AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, "User:*", "*", AclOperation.READ,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:ops", "*",
                   AclOperation.ALTER, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TRANSACTIONAL_ID, "app-", ResourcePatternType.PREFIXED, "User:alice", "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
    ]
    for fut in a.create_acls(wanted).values():
        assert fut.result(10) is None
    assert as_tuples(a.describe_acls(ANY_ACL).result(10)) == as_tuples(wanted)
    # A MATCH filter: the ACLs that apply to topic "payments" (the prefixed "pay").
    matching = a.describe_acls(AclBindingFilter(ResourceType.TOPIC, "payments", ResourcePatternType.MATCH, None,
                                                None, AclOperation.ANY, AclPermissionType.ANY)).result(10)
    assert as_tuples(matching) == as_tuples([wanted[1]])
    # The cluster resource has one name.
    bad = AclBinding(ResourceType.BROKER, "my-cluster", ResourcePatternType.LITERAL, "User:x", "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException, match="kafka-cluster"):
        a.create_acls([bad])[bad].result(10)
    alice = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None, AclOperation.ANY,
                             AclPermissionType.ANY)
    removed = a.delete_acls([alice])[alice].result(10)
    assert as_tuples(removed) == as_tuples([wanted[0], wanted[4]])
    assert as_tuples(a.describe_acls(ANY_ACL).result(10)) == as_tuples(wanted[1:4])


def test_kafka_python_creates_describes_and_deletes(secured_broker: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=secured_broker.bootstrap, client_id="acl-test")
    try:
        acl = ACL(principal="User:carol", host="*", operation=ACLOperation.DESCRIBE,
                  permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(KpResourceType.TOPIC, "audit", ACLResourcePatternType.PREFIXED))
        created = admin.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1, created
        every = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                          permission_type=ACLPermissionType.ANY,
                          resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY))
        found, error = admin.describe_acls(every)
        assert error.errno == 0
        assert [(f.principal, f.resource_pattern.resource_name, f.resource_pattern.pattern_type) for f in found] == [
            ("User:carol", "audit", ACLResourcePatternType.PREFIXED)]
        ((_, removed, error),) = admin.delete_acls([every])
        assert error.errno == 0 and [r.principal for r in removed] == ["User:carol"]
        assert admin.describe_acls(every)[0] == []
    finally:
        admin.close()


def test_acls_are_kept_across_a_restart_and_enforced(tmp_path: Path) -> None:
    """ACLs live in the metadata file: after SIGKILL and restart they are there and decide.
    A DENY of Write on the topic for everyone: Produce is refused, before and after."""
    proc = BrokerProcess(tmp_path / "data", overrides={**SECURED, "super.users": "",
                                                       "allow.everyone.if.no.acl.found": "true"}).start()
    try:
        a = AdminClient({"bootstrap.servers": proc.bootstrap})
        deny = AclBinding(ResourceType.TOPIC, "ledger", ResourcePatternType.LITERAL, "User:*", "*",
                          AclOperation.WRITE, AclPermissionType.DENY)
        assert a.create_acls([deny])[deny].result(10) is None

        def produce() -> ErrorCode:
            mod = request_module(0, 9)
            with WireClient("127.0.0.1", proc.port) as c:
                answer = c.request(make(request_class(0, 9), transactional_id=None, acks=1,
                                        timeout=timedelta(seconds=5), topic_data=(make(
                                            mod.TopicProduceData, name="ledger", partition_data=(make(
                                                mod.PartitionProduceData, index=0,
                                                records=encode_batch([(None, b"x", [])])),)),)))
            return answer.responses[0].partition_responses[0].error_code

        assert produce() == ErrorCode.topic_authorization_failed
        proc.kill()
        proc.start()
        a = AdminClient({"bootstrap.servers": proc.bootstrap})
        assert as_tuples(a.describe_acls(ANY_ACL).result(10)) == as_tuples([deny])
        assert produce() == ErrorCode.topic_authorization_failed
        assert a.delete_acls([ANY_ACL])[ANY_ACL].result(10)
        assert produce() in (ErrorCode.none, ErrorCode.unknown_topic_or_partition)  # no ACL: allowed
    finally:
        proc.close()


def test_without_an_authorizer_the_acl_apis_say_security_disabled(broker: BrokerProcess) -> None:
    with WireClient("127.0.0.1", broker.port) as c:
        described = c.request(make(request_class(29, 3), resource_type_filter=1, resource_name_filter=None,
                                   pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
                                   permission_type=1))
    assert described.error_code == ErrorCode.security_disabled
    # (librdkafka drops DescribeAcls' error code; its CreateAcls reports it.)
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:a", "*", AclOperation.READ,
                         AclPermissionType.ALLOW)
    with pytest.raises(KafkaException, match="SECURITY_DISABLED|No Authorizer"):
        a.create_acls([binding])[binding].result(10)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_version_of_the_acl_apis(secured_broker: BrokerProcess, version: int) -> None:
    """CreateAcls, DescribeAcls and DeleteAcls at each advertised version (v1+: prefixed
    patterns), with dmq's wire client."""
    create_mod, delete_mod = request_module(30, version), request_module(31, version)
    with WireClient("127.0.0.1", secured_broker.port) as c:
        created = c.request(make(request_class(30, version), creations=(make(
            create_mod.AclCreation, resource_type=3, resource_name=f"g{version}-", resource_pattern_type=4,
            principal="User:v", host="*", operation=3, permission_type=3),)))
        assert [r.error_code for r in created.results] == [ErrorCode.none]
        described = c.request(make(request_class(29, version), resource_type_filter=3, resource_name_filter=None,
                                   pattern_type_filter=1, principal_filter="User:v", host_filter=None, operation=1,
                                   permission_type=1))
        assert described.error_code == ErrorCode.none
        assert [(r.resource_name, r.pattern_type, [a.operation for a in r.acls]) for r in described.resources] == [
            (f"g{version}-", 4, [3])]
        deleted = c.request(make(request_class(31, version), filters=(make(
            delete_mod.DeleteAclsFilter, resource_type_filter=3, resource_name_filter=f"g{version}-",
            pattern_type_filter=4, principal_filter=None, host_filter=None, operation=1, permission_type=1),)))
        assert [(r.error_code, [a.resource_name for a in r.matching_acls]) for r in deleted.filter_results] == [
            (ErrorCode.none, [f"g{version}-"])]
        # A filter with UNKNOWN parts is refused, not matched against everything.
        bad = c.request(make(request_class(29, version), resource_type_filter=0, resource_name_filter=None,
                             pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
                             permission_type=1))
        assert bad.error_code == ErrorCode.invalid_request


def test_an_unknown_authorizer_stops_the_broker_with_one_line(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data", overrides={"authorizer.class.name": "com.example.MyAuthorizer"})
    with pytest.raises(RuntimeError, match="exited early") as failed:
        proc.start()
    assert "authorizer.class.name=com.example.MyAuthorizer is not an authorizer dmq has" in str(failed.value)
    assert "Traceback" not in str(failed.value)
