"""The ACL authorizer's decisions against a plain statement of Kafka's rules (Hypothesis).

The authorizer reads a real EmbeddedMetadataStore (its JSON file holds the ACLs, as
after a restart) and decides through its index and decision cache; the model below
scans every ACL for each question.
"""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.acls import acl, store_with

from dmq.cluster.metadata import EmbeddedMetadataStore
from dmq.security.acl import (
    OPERATIONS,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    kafka_host,
)
from dmq.security.authorizer import AclAuthorizer, parse_super_users

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
IMPLIES_DESCRIBE = {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}

names = st.text(alphabet="ab.", min_size=1, max_size=3)
bindings = st.builds(
    AclBinding,
    st.one_of(
        st.builds(ResourcePattern, st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
                  st.one_of(names, st.just("*")), st.just(PatternType.LITERAL)),
        st.builds(ResourcePattern, st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
                  names, st.just(PatternType.PREFIXED))),
    st.builds(AccessControlEntry, st.sampled_from(["User:alice", "User:bob", "User:*"]),
              st.sampled_from(["127.0.0.1", "10.0.0.1", "*"]), st.sampled_from(OPERATIONS),
              st.sampled_from([ALLOW, DENY])))
questions = st.tuples(
    st.sampled_from(["User:alice", "User:bob", "User:carol"]), st.sampled_from(["127.0.0.1", "10.0.0.1"]),
    st.sampled_from([o for o in OPERATIONS if o != AclOperation.ALL]),
    st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]), names)


def model(acls: list[AclBinding], super_users: set[str], allow_everyone: bool, principal: str, host: str,
          op: AclOperation, resource_type: ResourceType, name: str) -> bool:
    """Kafka's AclAuthorizer.authorize, written out as its documentation states it."""
    if principal in super_users:
        return True
    applying = [b for b in acls if b.pattern.resource_type == resource_type and (
        (b.pattern.pattern_type == PatternType.LITERAL and b.pattern.name in (name, "*"))
        or (b.pattern.pattern_type == PatternType.PREFIXED and name.startswith(b.pattern.name)))]
    if not applying:
        return allow_everyone
    mine = [b.entry for b in applying
            if b.entry.principal in (principal, "User:*") and b.entry.host in (host, "*")]
    if any(e.permission == DENY and e.operation in (op, AclOperation.ALL) for e in mine):
        return False
    allowing = {op, AclOperation.ALL}
    if op == AclOperation.DESCRIBE:
        allowing |= IMPLIES_DESCRIBE
    if op == AclOperation.DESCRIBE_CONFIGS:
        allowing.add(AclOperation.ALTER_CONFIGS)
    return any(e.permission == ALLOW and e.operation in allowing for e in mine)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(acls=st.lists(bindings, max_size=8), asked=st.lists(questions, min_size=1, max_size=12),
       super_user=st.sampled_from([None, "User:alice"]), allow_everyone=st.booleans())
def test_decisions_follow_kafkas_rules(tmp_path: Path, acls: list[AclBinding],
                                       asked: list[tuple[str, str, AclOperation, ResourceType, str]],
                                       super_user: str | None, allow_everyone: bool) -> None:
    store = store_with(tmp_path / "store", acls)
    supers = {super_user} if super_user else set()
    authorizer = AclAuthorizer(store, supers, allow_everyone)
    for principal, host, op, resource_type, name in asked + asked:  # the second round is cached
        assert authorizer.authorize(principal, host, op, resource_type, name) == model(
            acls, supers, allow_everyone, principal, host, op, resource_type, name), (principal, host, op, name)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(acls=st.lists(bindings, max_size=8), name=names, resource_type=st.sampled_from([ResourceType.TOPIC,
                                                                                      ResourceType.GROUP]))
def test_a_match_filter_finds_exactly_the_acls_that_apply(tmp_path: Path, acls: list[AclBinding], name: str,
                                                          resource_type: ResourceType) -> None:
    """DescribeAcls with pattern type MATCH returns what the authorizer decides with."""
    authorizer = AclAuthorizer(store_with(tmp_path / "store", acls))
    found = authorizer.acls(AclBindingFilter(resource_type, name, PatternType.MATCH, None, None,
                                             AclOperation.ANY, AclPermissionType.ANY))
    expected = {b for b in acls if b.pattern.resource_type == resource_type and (
        (b.pattern.pattern_type == PatternType.LITERAL and b.pattern.name in (name, "*"))
        or (b.pattern.pattern_type == PatternType.PREFIXED and name.startswith(b.pattern.name)))}
    assert set(found) == expected


def topic_acl(name: str, principal: str, op: AclOperation, permission: AclPermissionType,
              pattern: PatternType = PatternType.LITERAL, host: str = "*") -> AclBinding:
    return acl(ResourceType.TOPIC, name, principal, op, permission, pattern, host)


def test_deny_wins_over_allow_and_all(tmp_path: Path) -> None:
    authorizer = AclAuthorizer(store_with(tmp_path, [
        topic_acl("orders", "User:*", AclOperation.ALL, ALLOW),
        topic_acl("ord", "User:bob", AclOperation.WRITE, DENY, PatternType.PREFIXED)]))
    assert authorizer.authorize("User:alice", "1.2.3.4", AclOperation.WRITE, ResourceType.TOPIC, "orders")
    assert not authorizer.authorize("User:bob", "1.2.3.4", AclOperation.WRITE, ResourceType.TOPIC, "orders")
    # A DENY of Write leaves Bob's Read and even Describe (implied by the ALLOW of All).
    assert authorizer.authorize("User:bob", "1.2.3.4", AclOperation.DESCRIBE, ResourceType.TOPIC, "orders")
    # Not covered by any ACL: denied unless allow.everyone.if.no.acl.found.
    assert not authorizer.authorize("User:bob", "1.2.3.4", AclOperation.READ, ResourceType.TOPIC, "audit")


def test_decisions_follow_acl_changes_and_super_users(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(str(tmp_path), 0)
    authorizer = AclAuthorizer(store, parse_super_users(" User:root ; User:ops"), False)
    assert authorizer.super_users == {"User:root", "User:ops"}
    read = ("User:alice", "127.0.0.1", AclOperation.READ, ResourceType.TOPIC, "orders")
    assert not authorizer.authorize(*read)
    asyncio.run(authorizer.create_acls([topic_acl("orders", "User:alice", AclOperation.READ, ALLOW)]))
    assert authorizer.authorize(*read)  # the cached "no" went with the change
    assert authorizer.authorize("User:root", "127.0.0.1", AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster")
    removed = asyncio.run(authorizer.delete_acls([AclBindingFilter(
        ResourceType.ANY, None, PatternType.ANY, "User:alice", None, AclOperation.ANY, AclPermissionType.ANY)]))
    assert [b.pattern.name for b in removed[0]] == ["orders"]
    assert not authorizer.authorize(*read)
    # Kept in the metadata file: a store opened again has the same (no) ACLs.
    assert EmbeddedMetadataStore(str(tmp_path), 0).acls() == {}


def test_by_resource_type_as_kafkas_default(tmp_path: Path) -> None:
    """Kafka's authorizeByResourceType (idempotent producers since KIP-679): some ALLOW not
    dominated by a DENY of the same literal, a shorter prefix or the wildcard."""
    def may_write_some_topic(acls: list[AclBinding]) -> bool:
        return AclAuthorizer(store_with(tmp_path / str(len(list(tmp_path.iterdir()))), acls)).authorize_by_resource_type(
            "User:alice", "127.0.0.1", AclOperation.WRITE, ResourceType.TOPIC)
    write = AclOperation.WRITE
    assert not may_write_some_topic([])
    assert may_write_some_topic([topic_acl("orders", "User:alice", write, ALLOW)])
    assert not may_write_some_topic([topic_acl("orders", "User:alice", write, ALLOW),
                                     topic_acl("orders", "User:alice", write, DENY)])
    assert not may_write_some_topic([topic_acl("orders", "User:alice", write, ALLOW),
                                     topic_acl("or", "User:*", write, DENY, PatternType.PREFIXED)])
    assert may_write_some_topic([topic_acl("orders", "User:alice", write, ALLOW),
                                 topic_acl("orders-x", "User:*", write, DENY, PatternType.PREFIXED)])
    assert not may_write_some_topic([topic_acl("orders", "User:alice", write, ALLOW),
                                     topic_acl("*", "User:alice", AclOperation.ALL, DENY)])
    assert not may_write_some_topic([topic_acl("orders", "User:bob", write, ALLOW)])


@pytest.mark.parametrize("text", ["", "alice", ":alice"])
def test_principals_must_have_a_type(text: str) -> None:
    binding = topic_acl("t", text, AclOperation.READ, ALLOW)
    with pytest.raises(ValueError, match="principalType:principalName"):
        binding.validated()


@pytest.mark.parametrize(("address", "as_kafka"), [
    ("127.0.0.1", "127.0.0.1"),
    ("::1", "0:0:0:0:0:0:0:1"),
    ("fe80::1", "fe80:0:0:0:0:0:0:1"),
    ("2001:DB8::FF00:42:8329", "2001:db8:0:0:0:ff00:42:8329"),
    ("::ffff:10.0.0.1", "10.0.0.1"),
    ("localhost", "localhost"),
])
def test_client_hosts_are_written_as_kafkas_authorizer_sees_them(address: str, as_kafka: str) -> None:
    """Kafka matches an ACL's host against Java's InetAddress.getHostAddress: an ACL written
    for Kafka's form (kafka-acls --deny-host 0:0:0:0:0:0:0:1) must match an IPv6 client here
    too; before, dmq compared Python's compressed form (::1) and such a DENY never applied."""
    assert kafka_host(address) == as_kafka


@given(st.ip_addresses(v=6))
def test_kafkas_form_of_an_ipv6_address_is_the_same_address(ip: ipaddress.IPv6Address) -> None:
    host = kafka_host(str(ip))
    if ip.ipv4_mapped is not None:
        assert host == str(ip.ipv4_mapped)
    else:
        groups = host.split(":")
        assert len(groups) == 8 and all(g == g.lower() and (g == "0" or not g.startswith("0")) for g in groups)
        assert ipaddress.ip_address(host) == ip
