"""ACLs as the metadata store keeps them: per resource pattern, a set of entries. Pure.

The store knows ACLs only in Kafka's stored form (the JSON of a ``/kafka-acl`` znode):
a resource pattern (resource type name such as ``Topic``, pattern type ``LITERAL`` or
``PREFIXED``, name) and its entries (principal, ``Allow``/``Deny``, operation name such
as ``Read``, host). What they mean (matching, deciding) is ``dmq.security``'s business;
the store only keeps, persists and distributes them. ``EmbeddedMetadataStore`` keeps them
in its JSON file under ``"acls"``; ``ZooKeeperMetadataStore`` in Kafka's znodes
(``dmq.cluster.zk.acls``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

LITERAL = "LITERAL"
PREFIXED = "PREFIXED"
ACL_JSON_VERSION = 1


@dataclass(frozen=True, slots=True, order=True)
class AclResource:
    """A resource pattern: Kafka's resource type name (``Topic``, ``Group``, ``Cluster``,
    ``TransactionalId``, ``DelegationToken``, ``User``), ``LITERAL`` or ``PREFIXED``, name."""

    resource_type: str
    pattern_type: str
    name: str


@dataclass(frozen=True, slots=True, order=True)
class StoredAce:
    """One access control entry of a resource, in Kafka's znode JSON names."""

    principal: str
    permission_type: str  # "Allow" or "Deny"
    operation: str        # "Read", "Write", "ClusterAction", "All", ...
    host: str


AclMap = Mapping[AclResource, frozenset[StoredAce]]
# A change of one resource's entries: the entries before -> the entries after.
AclChange = Callable[[frozenset[StoredAce]], frozenset[StoredAce]]


def encode_aces(aces: frozenset[StoredAce]) -> bytes:
    """Kafka's ``{"version":1,"acls":[{"principal","permissionType","operation","host"}]}``."""
    return json.dumps({"version": ACL_JSON_VERSION, "acls": [_ace_json(a) for a in sorted(aces)]},
                      separators=(",", ":")).encode()


def decode_aces(data: bytes | None) -> frozenset[StoredAce]:
    """The entries of a resource znode; empty for no data. Raises ValueError if malformed."""
    if not data:
        return frozenset()
    try:
        raw = json.loads(data)
        if int(raw.get("version", ACL_JSON_VERSION)) != ACL_JSON_VERSION:
            raise ValueError(f"unsupported ACL JSON version {raw.get('version')}")
        return frozenset(_ace(item) for item in raw.get("acls", ()))
    except (TypeError, KeyError, AttributeError, json.JSONDecodeError) as e:
        raise ValueError(f"malformed ACL JSON: {e}") from None


def _ace_json(a: StoredAce) -> dict[str, str]:
    return {"principal": a.principal, "permissionType": a.permission_type,
            "operation": a.operation, "host": a.host}


def _ace(item: Mapping[str, Any]) -> StoredAce:
    return StoredAce(str(item["principal"]), str(item["permissionType"]),
                     str(item["operation"]), str(item["host"]))


def encode_embedded(acls: AclMap) -> list[dict[str, Any]]:
    """The embedded store's ``"acls"`` section: one object per resource with entries."""
    return [{"resourceType": r.resource_type, "patternType": r.pattern_type, "name": r.name,
             "acls": [_ace_json(a) for a in sorted(aces)]}
            for r, aces in sorted(acls.items()) if aces]


def decode_embedded(raw: Any) -> dict[AclResource, frozenset[StoredAce]]:
    out: dict[AclResource, frozenset[StoredAce]] = {}
    for item in raw or ():
        resource = AclResource(str(item["resourceType"]), str(item["patternType"]), str(item["name"]))
        aces = frozenset(_ace(a) for a in item.get("acls", ()))
        if aces:
            out[resource] = aces
    return out
