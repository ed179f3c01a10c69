"""``dmq acls``: list, add and remove ACLs (like kafka-acls.sh), through CreateAcls,
DescribeAcls and DeleteAcls with confluent-kafka's AdminClient.

The options are kafka-acls.sh's: ``--allow-principal``/``--deny-principal`` (repeatable),
``--operation`` (repeatable), one resource (``--topic``, ``--group``, ``--cluster``,
``--transactional-id``), ``--resource-pattern-type`` and ``--host``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from confluent_kafka.admin import AclBinding as CkAclBinding
from confluent_kafka.admin import AclBindingFilter as CkAclBindingFilter
from confluent_kafka.admin import AclOperation as CkAclOperation
from confluent_kafka.admin import AclPermissionType as CkAclPermissionType
from confluent_kafka.admin import ResourcePatternType as CkResourcePatternType
from confluent_kafka.admin import ResourceType as CkResourceType

from dmq.cli.common import (
    Bootstrap,
    CommandConfigOption,
    admin_client,
    fail,
    make_console,
    make_table,
    result,
    wire_client,
)
from dmq.cli.help import Typer
from dmq.security.acl import (
    CLUSTER_NAME,
    OPERATION_NAMES,
    PERMISSION_NAMES,
    RESOURCE_TYPE_NAMES,
    SUPPORTED_OPERATIONS,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    operation_named,
    parse_principal,
)

app = Typer(help="List, add and remove ACLs (the brokers need authorizer.class.name).",
            no_args_is_help=True)
console = make_console()

Topic = Annotated[str | None, typer.Option("--topic", "-t", metavar="TOPIC", help="a topic ('*': every topic)")]
Group = Annotated[str | None, typer.Option("--group", "-g", metavar="GROUP", help="a group ('*': every group)")]
Cluster = Annotated[bool, typer.Option("--cluster", help="the cluster")]
TransactionalId = Annotated[str | None, typer.Option(
    "--transactional-id", metavar="ID", help="a transactional id ('*': every one)")]
PatternOption = Annotated[str, typer.Option(
    "--resource-pattern-type", metavar="TYPE",
    help="literal or prefixed (list and remove also: any, match)")]
AllowPrincipal = Annotated[list[str] | None, typer.Option(
    "--allow-principal", metavar="TYPE:NAME", help="principal to allow, repeatable (User:alice, User:*)")]
DenyPrincipal = Annotated[list[str] | None, typer.Option(
    "--deny-principal", metavar="TYPE:NAME", help="principal to deny, repeatable")]
Operation = Annotated[list[str] | None, typer.Option(
    "--operation", metavar="OP", help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
    "DescribeConfigs, AlterConfigs, IdempotentWrite or All; repeatable")]
Host = Annotated[str, typer.Option("--host", metavar="HOST", help="the client address ('*': any)")]


def _resource(topic: str | None, group: str | None, cluster: bool, transactional_id: str | None,
              required: bool) -> tuple[ResourceType, str | None]:
    given = [(ResourceType.TOPIC, topic), (ResourceType.GROUP, group),
             (ResourceType.CLUSTER, CLUSTER_NAME if cluster else None),
             (ResourceType.TRANSACTIONAL_ID, transactional_id)]
    chosen = [(t, n) for t, n in given if n is not None]
    if len(chosen) > 1:
        fail("pass at most one of --topic, --group, --cluster, --transactional-id", 2)
    if not chosen:
        if required:
            fail("pass one of --topic, --group, --cluster, --transactional-id", 2)
        return ResourceType.ANY, None
    if not chosen[0][1]:
        fail("the resource name must not be empty", 2)
    return chosen[0]


def _pattern(text: str, allowed: tuple[PatternType, ...]) -> PatternType:
    try:
        pattern = PatternType[text.upper()]
    except KeyError:
        pattern = PatternType.UNKNOWN
    if pattern not in allowed:
        fail(f"--resource-pattern-type must be one of {', '.join(p.name.lower() for p in allowed)}, "
             f"got {text!r}", 2)
    return pattern


def _operations(names: list[str] | None, resource_type: ResourceType, required: bool) -> list[AclOperation]:
    if not names:
        if required:
            fail("pass --operation (Read, Write, ..., All)", 2)
        return [AclOperation.ANY]
    out = []
    for name in names:
        try:
            op = operation_named(name)
        except AclError as e:
            fail(f"{e}; use one of {', '.join(OPERATION_NAMES.values())}", 2)
        supported = SUPPORTED_OPERATIONS.get(resource_type)
        if supported is not None and op != AclOperation.ALL and op not in supported:
            fail(f"ResourceType {RESOURCE_TYPE_NAMES[resource_type]} only supports operations "
                 f"{', '.join(sorted(OPERATION_NAMES[o] for o in supported))}, All", 2)
        out.append(op)
    return out


def _principals(allow: list[str] | None, deny: list[str] | None) -> list[tuple[str, AclPermissionType]]:
    out = [(p, AclPermissionType.ALLOW) for p in allow or []] + [(p, AclPermissionType.DENY) for p in deny or []]
    for principal, _ in out:
        try:
            parse_principal(principal)
        except AclError as e:
            fail(str(e), 2)
    return out


def _filter(resource_type: ResourceType, name: str | None, pattern: PatternType, principal: str | None,
            host: str | None, operation: AclOperation, permission: AclPermissionType) -> CkAclBindingFilter:
    """confluent-kafka's filter (None: any name, principal or host; its stubs say str)."""
    values: list[Any] = [CkResourceType(int(resource_type)), name, CkResourcePatternType(int(pattern)), principal,
                         host, CkAclOperation(int(operation)), CkAclPermissionType(int(permission))]
    return CkAclBindingFilter(*values)


def _show(bindings: list[Any]) -> None:
    rows = sorted((RESOURCE_TYPE_NAMES.get(ResourceType(b.restype.value), b.restype.name),
                   b.resource_pattern_type.name, b.name, b.principal, b.host,
                   OPERATION_NAMES.get(AclOperation(b.operation.value), b.operation.name),
                   PERMISSION_NAMES.get(AclPermissionType(b.permission_type.value), b.permission_type.name))
                  for b in bindings)
    if not rows:
        console.print("no ACLs")
        return
    table = make_table("resource type", "pattern", "name", "principal", "host", "operation", "permission")
    for row in rows:
        table.add_row(*row)
    console.print(table)


@app.command("list")
def list_(
    topic: Topic = None, group: Group = None, cluster: Cluster = False, transactional_id: TransactionalId = None,
    resource_pattern_type: PatternOption = "literal",
    principal: Annotated[str | None, typer.Option("--principal", metavar="TYPE:NAME",
                                                  help="only this principal's ACLs")] = None,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """ACLs (of one resource with its pattern type; --resource-pattern-type match: every ACL that applies to it)."""
    resource_type, name = _resource(topic, group, cluster, transactional_id, required=False)
    pattern = _pattern(resource_pattern_type, (PatternType.LITERAL, PatternType.PREFIXED, PatternType.ANY,
                                               PatternType.MATCH))
    if name is None:
        pattern = PatternType.ANY
    _show(_describe(bootstrap_server, resource_type, name, pattern, principal))


def _describe(bootstrap: str, resource_type: ResourceType, name: str | None, pattern: PatternType,
              principal: str | None) -> list[Any]:
    """DescribeAcls with dmq's wire client: librdkafka drops the answer's error code (an
    unauthorised or unsecured broker would read as "no ACLs"). Bindings in confluent-kafka's form."""
    from kio.schema.errors import ErrorCode

    from dmq.protocol.codec import make, request_class

    with wire_client(bootstrap, "dmq-acls") as c:
        answer = c.request(make(request_class(29, 3), resource_type_filter=int(resource_type),
                                resource_name_filter=name, pattern_type_filter=int(pattern),
                                principal_filter=principal, host_filter=None, operation=int(AclOperation.ANY),
                                permission_type=int(AclPermissionType.ANY)))
    if answer.error_code != ErrorCode.none:
        fail(f"cannot list ACLs: {answer.error_message or answer.error_code.name.upper()} "
             f"({answer.error_code.name.upper()})")
    return [CkAclBinding(CkResourceType(r.resource_type), r.resource_name, CkResourcePatternType(r.pattern_type),
                         a.principal, a.host, CkAclOperation(a.operation), CkAclPermissionType(a.permission_type))
            for r in answer.resources for a in r.acls]


@app.command()
def add(
    allow_principal: AllowPrincipal = None, deny_principal: DenyPrincipal = None, operation: Operation = None,
    topic: Topic = None, group: Group = None, cluster: Cluster = False, transactional_id: TransactionalId = None,
    resource_pattern_type: PatternOption = "literal", host: Host = "*",
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Add ACLs: each principal gets each operation on the resource."""
    resource_type, name = _resource(topic, group, cluster, transactional_id, required=True)
    pattern = _pattern(resource_pattern_type, (PatternType.LITERAL, PatternType.PREFIXED))
    principals = _principals(allow_principal, deny_principal)
    if not principals:
        fail("pass --allow-principal or --deny-principal", 2)
    assert name is not None  # required above
    bindings = [CkAclBinding(CkResourceType(int(resource_type)), name, CkResourcePatternType(int(pattern)),
                             principal, host, CkAclOperation(int(op)), CkAclPermissionType(int(permission)))
                for principal, permission in principals for op in _operations(operation, resource_type, True)]
    a = admin_client(bootstrap_server)
    for binding, fut in a.create_acls(bindings).items():
        result(fut, f"cannot add the ACL of {binding.principal} on {binding.name}")
    console.print(f"Added {len(bindings)} ACL{'s' if len(bindings) != 1 else ''}:")
    _show(bindings)


@app.command()
def remove(
    allow_principal: AllowPrincipal = None, deny_principal: DenyPrincipal = None, operation: Operation = None,
    topic: Topic = None, group: Group = None, cluster: Cluster = False, transactional_id: TransactionalId = None,
    resource_pattern_type: PatternOption = "literal", host: Annotated[str | None, typer.Option(
        "--host", metavar="HOST", help="only ACLs of this host")] = None,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Remove the resource's ACLs (only those of the given principals and operations, if any)."""
    resource_type, name = _resource(topic, group, cluster, transactional_id, required=True)
    pattern = _pattern(resource_pattern_type, (PatternType.LITERAL, PatternType.PREFIXED, PatternType.ANY,
                                               PatternType.MATCH))
    principals: list[tuple[str | None, AclPermissionType]] = list(_principals(allow_principal, deny_principal))
    if not principals:
        principals = [(None, AclPermissionType.ANY)]
    filters = [_filter(resource_type, name, pattern, principal, host, op, permission)
               for principal, permission in principals for op in _operations(operation, resource_type, False)]
    a = admin_client(bootstrap_server)
    removed: list[Any] = []
    for fut in a.delete_acls(filters).values():
        removed += result(fut, "cannot remove ACLs")
    console.print(f"Removed {len(removed)} ACL{'s' if len(removed) != 1 else ''}" + (":" if removed else ""))
    if removed:
        _show(removed)
