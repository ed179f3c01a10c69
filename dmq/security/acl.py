"""Kafka's ACL model: resource patterns, access control entries, bindings and filters. Pure.

Codes are the wire's (``org.apache.kafka.common.acl`` and ``...resource``), names are
the ones Kafka stores in ZooKeeper (``Topic``, ``Read``, ``Allow``) and ``kafka-acls.sh``
prints. A principal is Kafka's ``KafkaPrincipal`` string, ``Type:name``
(``User:alice``); ``User:*`` is every principal, host ``*`` every host, and a literal
resource named ``*`` every resource of its type.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from dmq.cluster.acls import LITERAL as STORED_LITERAL
from dmq.cluster.acls import PREFIXED as STORED_PREFIXED
from dmq.cluster.acls import AclResource, StoredAce


@functools.lru_cache(maxsize=4096)
def kafka_host(address: str) -> str:
    """A client's address as Kafka's authorizer matches ACL hosts against it (Java's
    ``InetAddress.getHostAddress``): IPv4 as it is, IPv6 in full with unpadded lowercase
    groups (``::1`` is ``0:0:0:0:0:0:0:1``), an IPv4-mapped IPv6 address as its IPv4.
    Anything else (a name, a scoped address) is left as it is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return ":".join(format(int(group, 16), "x") for group in ip.exploded.split(":"))
    return str(ip)

class ResourceType(IntEnum):
    __hash__ = int.__hash__  # C-level: decisions are cached by these

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    __hash__ = int.__hash__  # C-level: decisions are cached by these

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    __hash__ = int.__hash__  # C-level: decisions are cached by these

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    __hash__ = int.__hash__  # C-level: decisions are cached by these

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
ANONYMOUS = "User:ANONYMOUS"

# Concrete values: what an ACL (not a filter) may hold.
RESOURCE_TYPES: tuple[ResourceType, ...] = tuple(t for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY))
OPERATIONS: tuple[AclOperation, ...] = tuple(o for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY))
PERMISSIONS = (AclPermissionType.ALLOW, AclPermissionType.DENY)


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


RESOURCE_TYPE_NAMES: dict[ResourceType, str] = {t: _pascal(t.name) for t in RESOURCE_TYPES}
OPERATION_NAMES: dict[AclOperation, str] = {o: _pascal(o.name) for o in OPERATIONS}
PERMISSION_NAMES: dict[AclPermissionType, str] = {AclPermissionType.ALLOW: "Allow", AclPermissionType.DENY: "Deny"}
_RESOURCE_TYPE_BY_NAME = {n.lower(): t for t, n in RESOURCE_TYPE_NAMES.items()}
_OPERATION_BY_NAME = {n.lower(): o for o, n in OPERATION_NAMES.items()}
_PERMISSION_BY_NAME = {n.lower(): p for p, n in PERMISSION_NAMES.items()}

# Operations an allowed operation implies (Kafka's AclAuthorizer/StandardAuthorizer).
IMPLIED_BY = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}

# The operations each resource type has (Kafka's AclEntry.supportedOperations).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                                   AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER,
                                   AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                                   AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                                     AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                                     AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


class AclError(ValueError):
    """An ACL or filter that cannot be used (Kafka answers INVALID_REQUEST)."""


def resource_type_named(name: str) -> ResourceType:
    """``Topic``/``topic``/``TOPIC``/``transactional-id``/``TransactionalId`` -> ResourceType."""
    key = name.replace("_", "").replace("-", "").lower()
    found = _RESOURCE_TYPE_BY_NAME.get(key)
    if found is None:
        raise AclError(f"unknown resource type {name!r}")
    return found


def operation_named(name: str) -> AclOperation:
    found = _OPERATION_BY_NAME.get(name.replace("_", "").replace("-", "").lower())
    if found is None:
        raise AclError(f"unknown operation {name!r}")
    return found


def permission_named(name: str) -> AclPermissionType:
    found = _PERMISSION_BY_NAME.get(name.lower())
    if found is None:
        raise AclError(f"unknown permission type {name!r}")
    return found


def parse_principal(text: str) -> tuple[str, str]:
    """``Type:name`` -> (type, name), as Kafka's SecurityUtils.parseKafkaPrincipal."""
    kind, sep, name = text.partition(":")
    if not sep or not kind:
        raise AclError(f"expected a string in format principalType:principalName but got {text!r}")
    return kind, name


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL. Invariant once ``validated()``: concrete resource type, LITERAL or
    PREFIXED, concrete operation and permission, a non-empty name (``kafka-cluster``
    for the cluster) and a parseable principal."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def validated(self) -> AclBinding:
        """Kafka's checks of a new ACL (AclApis, AclControlManager.validateNewAcl)."""
        p, e = self.pattern, self.entry
        if p.resource_type not in RESOURCE_TYPES:
            raise AclError(f"Invalid resourceType {p.resource_type.name}")
        if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"Invalid patternType {p.pattern_type.name}")
        if e.operation not in OPERATIONS:
            raise AclError(f"Invalid operation {e.operation.name}")
        if e.permission not in PERMISSIONS:
            raise AclError(f"Invalid permissionType {e.permission.name}")
        if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
            raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if not p.name:
            raise AclError("Invalid empty resource name")
        if not e.host:
            raise AclError("Invalid empty host")
        parse_principal(e.principal)
        return self

    def stored(self) -> tuple[AclResource, StoredAce]:
        """The metadata store's form (``dmq.cluster.acls``)."""
        p, e = self.pattern, self.entry
        pattern = STORED_LITERAL if p.pattern_type == PatternType.LITERAL else STORED_PREFIXED
        return (AclResource(RESOURCE_TYPE_NAMES[p.resource_type], pattern, p.name),
                StoredAce(e.principal, PERMISSION_NAMES[e.permission], OPERATION_NAMES[e.operation], e.host))

    @staticmethod
    def from_stored(resource: AclResource, ace: StoredAce) -> AclBinding:
        """The binding of a stored entry; AclError if it names something unknown."""
        pattern = {STORED_LITERAL: PatternType.LITERAL, STORED_PREFIXED: PatternType.PREFIXED}.get(
            resource.pattern_type)
        if pattern is None:
            raise AclError(f"unknown pattern type {resource.pattern_type!r}")
        return AclBinding(
            ResourcePattern(resource_type_named(resource.resource_type), resource.name, pattern),
            AccessControlEntry(ace.principal, ace.host, operation_named(ace.operation),
                               permission_named(ace.permission_type)))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: None and ANY match everything; ``MATCH`` matches the
    patterns that would apply to the named resource (literal, wildcard, prefixed)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    def validated(self) -> AclBindingFilter:
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value.name == "UNKNOWN":
                raise AclError(f"Filter contains UNKNOWN elements: {type(value).__name__}")
        return self

    def matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != p.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != p.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, p.pattern_type):
            return self.name == p.name
        # MATCH
        if p.pattern_type == PatternType.LITERAL:
            return self.name == p.name or p.name == WILDCARD_RESOURCE
        return self.name.startswith(p.name)

    def matches_entry(self, e: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != e.principal:
            return False
        if self.host is not None and self.host != e.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != e.operation:
            return False
        return self.permission == AclPermissionType.ANY or self.permission == e.permission

    def matches(self, b: AclBinding) -> bool:
        return self.matches_pattern(b.pattern) and self.matches_entry(b.entry)


_E = TypeVar("_E", bound=IntEnum)


def code_of(enum: type[_E], code: int) -> _E:
    """The member of ``enum`` with wire code ``code``; its UNKNOWN for any other code."""
    try:
        return enum(code)
    except ValueError:
        return enum(0)


def filter_of(resource_type: int, name: str | None, pattern_type: int, principal: str | None,
              host: str | None, operation: int, permission: int) -> AclBindingFilter:
    """A DescribeAcls/DeleteAcls filter from its wire codes; AclError if it has UNKNOWN parts."""
    return AclBindingFilter(code_of(ResourceType, resource_type), name, code_of(PatternType, pattern_type),
                            principal, host, code_of(AclOperation, operation),
                            code_of(AclPermissionType, permission)).validated()


def describe_binding(b: AclBinding) -> str:
    """One line, as kafka-acls.sh prints an entry."""
    e = b.entry
    return (f"(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
            f"permissionType={e.permission.name})")
