"""Kafka's ACL znodes (ZooKeeper clusters' ``AclAuthorizer`` layout). Pure.

::

    /kafka-acl/<ResourceType>/<name>                       literal patterns (wildcard "*" too)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>     prefixed patterns
    /kafka-acl-changes/acl_changes_<seq>                   "<RESOURCE_TYPE>:<name>" of a changed literal
    /kafka-acl-extended-changes/acl_changes_<seq>          {"version":1,"resourceType","name","patternType"}

A resource znode holds ``{"version":1,"acls":[...]}`` (``dmq.cluster.acls``); a resource
without entries has no znode. A writer changes a resource znode by compare-and-set on its
version, then creates a sequential change notification; every broker watches both
notification parents and re-reads the resources they name.
"""

from __future__ import annotations

import json
import re

from dmq.cluster.acls import LITERAL, PREFIXED, AclResource

ACL = "/kafka-acl"
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED = "/kafka-acl-extended"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
# Kafka's ZkNodeChangeNotificationListener removes notifications older than this.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000

RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User")
PARENTS = (ACL, ACL_CHANGES, f"{ACL_EXTENDED}/prefixed", ACL_EXTENDED_CHANGES)


def store_root(pattern_type: str) -> str:
    return ACL if pattern_type == LITERAL else f"{ACL_EXTENDED}/{pattern_type.lower()}"


def resource_path(r: AclResource) -> str:
    return f"{store_root(r.pattern_type)}/{r.resource_type}/{r.name}"


def change_parent(pattern_type: str) -> str:
    return ACL_CHANGES if pattern_type == LITERAL else ACL_EXTENDED_CHANGES


def _java_name(resource_type: str) -> str:
    """``TransactionalId`` -> ``TRANSACTIONAL_ID`` (Kafka's ResourceType enum name)."""
    return re.sub(r"(?<!^)([A-Z])", r"_\1", resource_type).upper()


_BY_ANY_NAME = {**{t: t for t in RESOURCE_TYPES}, **{_java_name(t): t for t in RESOURCE_TYPES}}


def encode_change(r: AclResource) -> bytes:
    if r.pattern_type == LITERAL:
        return f"{_java_name(r.resource_type)}:{r.name}".encode()
    return json.dumps({"version": 1, "resourceType": _java_name(r.resource_type), "name": r.name,
                       "patternType": r.pattern_type}, separators=(",", ":")).encode()


def decode_change(parent: str, data: bytes) -> AclResource:
    """The resource a change notification names; ValueError if it names none."""
    if parent == ACL_CHANGES:
        kind, sep, name = data.decode().partition(":")
        if not sep or kind not in _BY_ANY_NAME:
            raise ValueError(f"expected ResourceType:ResourceName, got {data!r}")
        return AclResource(_BY_ANY_NAME[kind], LITERAL, name)
    try:
        raw = json.loads(data)
        kind, name, pattern = str(raw["resourceType"]), str(raw["name"]), str(raw["patternType"]).upper()
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"malformed ACL change event {data!r}: {e}") from None
    if kind not in _BY_ANY_NAME or pattern != PREFIXED:
        raise ValueError(f"ACL change event names an unknown resource: {data!r}")
    return AclResource(_BY_ANY_NAME[kind], pattern, name)
