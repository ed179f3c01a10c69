"""A real ACL authorizer over an embedded metadata store that holds given ACLs."""

from __future__ import annotations

import json
from pathlib import Path

from dmq.cluster.acls import encode_embedded
from dmq.cluster.metadata import EmbeddedMetadataStore
from dmq.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)


def store_with(path: Path, acls: list[AclBinding]) -> EmbeddedMetadataStore:
    """A store loaded from a metadata file holding ``acls`` (what a restart reads)."""
    path.mkdir(parents=True, exist_ok=True)
    stored: dict = {}
    for b in acls:
        resource, ace = b.stored()
        stored[resource] = stored.get(resource, frozenset()) | {ace}
    (path / EmbeddedMetadataStore.FILE).write_text(json.dumps(
        {"version": 1, "cluster_id": "acl-test", "topics": [], "acls": encode_embedded(stored)}))
    return EmbeddedMetadataStore(str(path), 0)


def acl(resource_type: ResourceType, name: str, principal: str, op: AclOperation, permission: AclPermissionType,
        pattern: PatternType = PatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern), AccessControlEntry(principal, host, op, permission))
