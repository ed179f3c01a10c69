"""The ACL authorizer: Kafka's AclAuthorizer decisions over the metadata store's ACLs.

A request is allowed when its principal is a super user, or when no ACL applies to the
resource and ``allow.everyone.if.no.acl.found`` is set, or when no DENY entry matches and
an ALLOW entry does. An entry matches on principal (or ``User:*``), host (or ``*``) and
operation (or ``All``); an ALLOW of Read, Write, Delete or Alter also allows Describe, an
ALLOW of AlterConfigs also DescribeConfigs (a DENY denies only what it names, or
everything with ``All``). The ACLs that apply to a resource are its type's literal ACLs of
its exact name, of the wildcard ``*``, and its prefixed ACLs whose name starts it.

Decisions are cached per (principal, host, operation, resource type, name); the cache is
dropped whenever the store's ``acl_version`` moves (any change, local or from another
broker through ZooKeeper), so a decision never outlives the ACLs it was made from.
Event-loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from dmq.cluster.acls import AclChange, AclResource, StoredAce
from dmq.cluster.metadata import MetadataError, MetadataStore
from dmq.security.acl import (
    IMPLIED_BY,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

log = logging.getLogger("dmq.security")

# Class names ``authorizer.class.name`` may give for this authorizer: Kafka's two ACL
# authorizers (ZooKeeper's and KRaft's) and dmq's own name for it.
ACL_AUTHORIZER_CLASSES = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "dmq.security.authorizer.AclAuthorizer",
})
CACHE_LIMIT = 100_000

_Ace = tuple[str, str, AclOperation, AclPermissionType]  # principal, host, operation, permission


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by ``;`` (``User:alice;User:bob``)."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())


@dataclass(slots=True)
class _Index:
    """One resource type's ACLs: literal by name (the wildcard ``*`` among them), prefixed by prefix."""

    literal: dict[str, list[_Ace]] = field(default_factory=dict)
    prefixed: dict[str, list[_Ace]] = field(default_factory=dict)


class AclAuthorizer:
    """Decides with the ACLs of ``store`` (see the module docstring). ``authorize`` is the
    hot path: a dict lookup while the ACLs stay unchanged. Writes go through the store
    (``create_acls``/``delete_acls``), which every broker's store then reflects."""

    def __init__(self, store: MetadataStore, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._version = -1
        self._index: dict[ResourceType, _Index] = {}
        self._cache: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}

    # ------------------------------------------------------------ decisions

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        if self._version != self.store.acl_version:
            self._rebuild()
        key = (principal, host, operation, resource_type, name)
        found = self._cache.get(key)
        if found is None:
            found = self._decide(principal, host, operation, resource_type, name)
            if not found and log.isEnabledFor(logging.DEBUG):  # once per cached decision
                log.debug("Principal = %s is Denied Operation = %s from host = %s on resource = %s:LITERAL:%s",
                          principal, operation.name, host, resource_type.name, name)
            if len(self._cache) >= CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = found
        return found

    def _rebuild(self) -> None:
        self._version = self.store.acl_version
        self._cache.clear()
        index: dict[ResourceType, _Index] = {}
        for binding in self.bindings():
            p, e = binding.pattern, binding.entry
            slot = index.setdefault(p.resource_type, _Index())
            by_name = slot.literal if p.pattern_type == PatternType.LITERAL else slot.prefixed
            by_name.setdefault(p.name, []).append((e.principal, e.host, e.operation, e.permission))
        self._index = index

    def _matching(self, resource_type: ResourceType, name: str) -> list[_Ace]:
        slot = self._index.get(resource_type)
        if slot is None:
            return []
        out = list(slot.literal.get(name, ()))
        if name != WILDCARD_RESOURCE:
            out += slot.literal.get(WILDCARD_RESOURCE, ())
        if slot.prefixed:
            for end in range(1, len(name) + 1):
                out += slot.prefixed.get(name[:end], ())
        return out

    def _decide(self, principal: str, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        aces = self._matching(resource_type, name)
        if not aces:
            return self.allow_everyone_if_no_acl_found
        allowed_by = IMPLIED_BY.get(operation, frozenset((operation,)))
        allowed = False
        for p, h, op, permission in aces:
            if (p != principal and p != WILDCARD_PRINCIPAL) or (h != host and h != WILDCARD_HOST):
                continue
            if permission == AclPermissionType.DENY:
                if op == operation or op == AclOperation.ALL:
                    return False
            elif op in allowed_by or op == AclOperation.ALL:
                allowed = True
        return allowed

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether some resource of the type may be used (Kafka's default
        ``Authorizer.authorizeByResourceType``: an ALLOW of a literal or prefix that no
        DENY of the same literal, a shorter prefix or the wildcard covers)."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        if self._version != self.store.acl_version:
            self._rebuild()
        slot = self._index.get(resource_type)
        if slot is None:
            return False

        def applies(ace: _Ace) -> bool:
            p, h, op, _ = ace
            return ((p == principal or p == WILDCARD_PRINCIPAL) and (h == host or h == WILDCARD_HOST)
                    and (op == operation or op == AclOperation.ALL))
        deny_literal = {n for n, aces in slot.literal.items()
                        if any(applies(a) and a[3] == AclPermissionType.DENY for a in aces)}
        if WILDCARD_RESOURCE in deny_literal:
            return False
        deny_prefixed = {n for n, aces in slot.prefixed.items()
                         if any(applies(a) and a[3] == AclPermissionType.DENY for a in aces)}
        for pattern_type, by_name in ((PatternType.LITERAL, slot.literal), (PatternType.PREFIXED, slot.prefixed)):
            for n, aces in by_name.items():
                if not any(applies(a) and a[3] == AclPermissionType.ALLOW for a in aces):
                    continue
                if pattern_type == PatternType.LITERAL and n == WILDCARD_RESOURCE:
                    return True
                if pattern_type == PatternType.LITERAL and n in deny_literal:
                    continue
                if not any(n[:end] in deny_prefixed for end in range(1, len(n) + 1)):
                    return True
        return False

    # ------------------------------------------------------------ ACLs

    def bindings(self) -> list[AclBinding]:
        """Every stored ACL this broker understands (one it does not is skipped, logged)."""
        out = []
        for resource, aces in self.store.acls().items():
            for ace in aces:
                try:
                    out.append(AclBinding.from_stored(resource, ace))
                except AclError as e:
                    log.warning("ignoring a stored ACL of %s: %s", resource, e)
        return out

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return sorted(b for b in self.bindings() if acl_filter.matches(b))

    async def create_acls(self, bindings: list[AclBinding]) -> list[MetadataError | None]:
        """Add ``bindings`` (already validated), one store write per resource; per binding,
        the store's refusal of its resource's write, or None."""
        by_resource: dict[AclResource, set[StoredAce]] = {}
        for b in bindings:
            resource, ace = b.stored()
            by_resource.setdefault(resource, set()).add(ace)
        failed: dict[AclResource, MetadataError] = {}
        for resource, added in by_resource.items():
            try:
                await self.store.update_acls(resource, _adding(frozenset(added)))
            except MetadataError as e:
                failed[resource] = e
        return [failed.get(b.stored()[0]) for b in bindings]

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove what each filter matches; per filter, the bindings it removed."""
        matched: list[list[AclBinding]] = [[] for _ in filters]
        doomed: dict[AclResource, set[StoredAce]] = {}
        for b in self.bindings():
            hit = False
            for i, f in enumerate(filters):
                if f.matches(b):
                    matched[i].append(b)
                    hit = True
            if hit:
                resource, ace = b.stored()
                doomed.setdefault(resource, set()).add(ace)
        for resource, removed in doomed.items():
            await self.store.update_acls(resource, _removing(frozenset(removed)))
        return [sorted(m) for m in matched]


def _adding(added: frozenset[StoredAce]) -> AclChange:
    return lambda current: current | added


def _removing(removed: frozenset[StoredAce]) -> AclChange:
    return lambda current: current - removed


def authorizer_for(class_name: str | None, store: MetadataStore, super_users: str | None,
                   allow_everyone_if_no_acl_found: bool) -> AclAuthorizer | None:
    """The authorizer ``authorizer.class.name`` asks for; None when it is empty (Kafka: no
    authorization at all). A class this broker does not have is a configuration error."""
    if not class_name:
        return None
    if class_name not in ACL_AUTHORIZER_CLASSES:
        raise MetadataError("invalid_config",
                            f"authorizer.class.name={class_name} is not an authorizer dmq has; use "
                            f"kafka.security.authorizer.AclAuthorizer (or leave it empty: no authorization)")
    return AclAuthorizer(store, parse_super_users(super_users), allow_everyone_if_no_acl_found)
