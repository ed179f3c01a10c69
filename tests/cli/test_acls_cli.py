"""``dmq acls`` against a broker with the ACL authorizer, as kafka-acls.sh is used."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.broker import BrokerProcess
from support.cli import run_dmq


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("acls-cli") / "data", overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS"}).start()
    yield proc
    proc.close()


def rows(out: str) -> list[list[str]]:
    """The table's data rows, split into cells."""
    cells = [[c.strip() for c in line.strip().strip("│").split("│")] for line in out.splitlines()]
    return [r for r in cells if r[0] in ("Topic", "Group", "Cluster", "TransactionalId")]


def test_add_list_remove(secured: BrokerProcess) -> None:
    b = secured.bootstrap
    added = run_dmq(b, "acls", "add", "--allow-principal", "User:alice", "--allow-principal", "User:bob",
                    "--operation", "Read", "--operation", "Describe", "--topic", "orders")
    assert "Added 4 ACLs" in added.stdout
    run_dmq(b, "acls", "add", "--deny-principal", "User:bob", "--operation", "write", "--topic", "pay",
            "--resource-pattern-type", "prefixed", "--host", "10.0.0.1")
    run_dmq(b, "acls", "add", "--allow-principal", "User:ops", "--operation", "Alter", "--cluster")
    run_dmq(b, "acls", "add", "--allow-principal", "User:app", "--operation", "Write", "--transactional-id", "app-1")
    listed = run_dmq(b, "acls", "list").stdout
    assert sorted(rows(listed)) == sorted([
        ["Topic", "LITERAL", "orders", "User:alice", "*", "Read", "Allow"],
        ["Topic", "LITERAL", "orders", "User:alice", "*", "Describe", "Allow"],
        ["Topic", "LITERAL", "orders", "User:bob", "*", "Read", "Allow"],
        ["Topic", "LITERAL", "orders", "User:bob", "*", "Describe", "Allow"],
        ["Topic", "PREFIXED", "pay", "User:bob", "10.0.0.1", "Write", "Deny"],
        ["Cluster", "LITERAL", "kafka-cluster", "User:ops", "*", "Alter", "Allow"],
        ["TransactionalId", "LITERAL", "app-1", "User:app", "*", "Write", "Allow"]]), listed
    # What applies to topic "payments": the prefixed "pay".
    matched = run_dmq(b, "acls", "list", "--topic", "payments", "--resource-pattern-type", "match").stdout
    assert rows(matched) == [["Topic", "PREFIXED", "pay", "User:bob", "10.0.0.1", "Write", "Deny"]]
    assert rows(run_dmq(b, "acls", "list", "--principal", "User:ops").stdout)[0][2] == "kafka-cluster"
    removed = run_dmq(b, "acls", "remove", "--allow-principal", "User:bob", "--topic", "orders")
    assert "Removed 2 ACLs" in removed.stdout
    removed = run_dmq(b, "acls", "remove", "--topic", "orders")
    assert "Removed 2 ACLs" in removed.stdout
    left = sorted(r[2] for r in rows(run_dmq(b, "acls", "list").stdout))
    assert left == ["app-1", "kafka-cluster", "pay"]


@pytest.mark.parametrize("args,message", [
    (["add", "--operation", "Read", "--topic", "t"], "--allow-principal or --deny-principal"),
    (["add", "--allow-principal", "alice", "--operation", "Read", "--topic", "t"], "principalType:principalName"),
    (["add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"], "unknown operation"),
    (["add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
     "ResourceType Group only supports operations"),
    (["add", "--allow-principal", "User:a", "--operation", "Read"], "pass one of --topic"),
    (["add", "--allow-principal", "User:a", "--operation", "Read", "--topic", "t", "--group", "g"], "at most one"),
    (["add", "--allow-principal", "User:a", "--operation", "Read", "--topic", "t", "--resource-pattern-type",
      "match"], "literal, prefixed"),
])
def test_bad_options_are_one_line(secured: BrokerProcess, args: list[str], message: str) -> None:
    res = run_dmq(secured.bootstrap, "acls", *args, check=False)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_broker_without_an_authorizer_is_one_line(broker: BrokerProcess) -> None:
    res = run_dmq(broker.bootstrap, "acls", "list", check=False)
    assert res.returncode == 1, res.stderr
    assert "cannot list ACLs" in res.stderr and "Authorizer" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
