"""Kafka's ACL znode paths, JSON and change notifications (dmq.cluster.zk.acls, pure)."""

from __future__ import annotations

import json

import pytest

from dmq.cluster.acls import AclResource, StoredAce, decode_aces, encode_aces
from dmq.cluster.zk import acls


def test_paths_are_kafkas() -> None:
    assert acls.resource_path(AclResource("Topic", "LITERAL", "orders")) == "/kafka-acl/Topic/orders"
    assert acls.resource_path(AclResource("TransactionalId", "PREFIXED", "app-")) == \
        "/kafka-acl-extended/prefixed/TransactionalId/app-"
    assert acls.change_parent("LITERAL") == "/kafka-acl-changes"
    assert acls.change_parent("PREFIXED") == "/kafka-acl-extended-changes"


def test_change_notifications_as_kafka_writes_and_reads_them() -> None:
    literal = AclResource("TransactionalId", "LITERAL", "a:b")
    assert acls.encode_change(literal) == b"TRANSACTIONAL_ID:a:b"
    assert acls.decode_change(acls.ACL_CHANGES, b"TRANSACTIONAL_ID:a:b") == literal
    assert acls.decode_change(acls.ACL_CHANGES, b"Topic:orders") == AclResource("Topic", "LITERAL", "orders")
    prefixed = AclResource("Group", "PREFIXED", "team-")
    assert json.loads(acls.encode_change(prefixed)) == {"version": 1, "resourceType": "GROUP", "name": "team-",
                                                        "patternType": "PREFIXED"}
    assert acls.decode_change(acls.ACL_EXTENDED_CHANGES, acls.encode_change(prefixed)) == prefixed
    for parent, bad in ((acls.ACL_CHANGES, b"orders"), (acls.ACL_CHANGES, b"Planet:x"),
                        (acls.ACL_EXTENDED_CHANGES, b"{"), (acls.ACL_EXTENDED_CHANGES,
                                                           b'{"resourceType":"TOPIC","name":"x","patternType":"LITERAL"}')):
        with pytest.raises(ValueError):
            acls.decode_change(parent, bad)


def test_acl_json_round_trips_and_reads_kafkas() -> None:
    aces = frozenset({StoredAce("User:alice", "Allow", "Read", "*"), StoredAce("User:*", "Deny", "All", "10.0.0.1")})
    assert decode_aces(encode_aces(aces)) == aces
    written_by_kafka = (b'{"version":1,"acls":[{"host":"host1","permissionType":"Deny","operation":"Read",'
                        b'"principal":"User:alice"}]}')
    assert decode_aces(written_by_kafka) == {StoredAce("User:alice", "Deny", "Read", "host1")}
    assert decode_aces(b"") == frozenset()
    with pytest.raises(ValueError):
        decode_aces(b'{"version":2,"acls":[]}')
    with pytest.raises(ValueError):
        decode_aces(b'{"version":1,"acls":[{"principal":"User:a"}]}')
