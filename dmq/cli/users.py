"""``dmq users``: SCRAM users (what ``kafka-configs.sh --entity-type users`` does with
``SCRAM-SHA-256=[password=...]``), through DescribeUserScramCredentials and
AlterUserScramCredentials.

The password is read from a prompt (twice, not echoed) or, with ``--password-stdin``,
from the first line of standard input; it is never an argument (it would be in the
shell's history and in ``ps``) and never printed. The client salts and hashes it: the
broker receives the salted password only and keeps Kafka's credential (salt, stored
key, server key, iterations). ``--command-config FILE`` holds the client's security
settings for a broker that asks for them, as for every command (dmq.cli.common).
"""

from __future__ import annotations

import getpass
import sys
from typing import Annotated, Any

import typer

from dmq.cli.common import (
    ADMIN_TIMEOUT,
    Bootstrap,
    CommandConfigOption,
    admin_client,
    fail,
    kafka_error_text,
    make_console,
    make_table,
)
from dmq.cli.help import Typer

app = Typer(help="Manage SCRAM users (SASL/SCRAM-SHA-256 and -512 credentials).",
            no_args_is_help=True)
console = make_console()

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
CommandConfig = CommandConfigOption


def _admin(bootstrap: str, command_config: str | None) -> Any:
    """``command_config`` was read by the option's callback (dmq.cli.common)."""
    return admin_client(bootstrap)


def _wait(fut: Any, what: str) -> Any:
    try:
        return fut.result(ADMIN_TIMEOUT)
    except Exception as e:  # noqa: BLE001 - Kafka errors, transport errors and timeouts
        fail(f"{what}: {kafka_error_text(e)}")


def _describe(admin: Any, users: list[str] | None) -> dict[str, Any]:
    """user -> UserScramCredentialsDescription (every user when ``users`` is None)."""
    if users is None:
        return dict(_wait(admin.describe_user_scram_credentials(), "cannot list users"))
    futures = admin.describe_user_scram_credentials(users)
    return {user: _wait(fut, f"cannot describe user {user}") for user, fut in futures.items()}


def _mechanism_name(mechanism: Any) -> str:
    return str(getattr(mechanism, "name", mechanism)).replace("_", "-")


def _read_password(from_stdin: bool) -> str:
    if from_stdin or not sys.stdin.isatty():
        line = sys.stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        if password.endswith("\r"):
            password = password[:-1]
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Password again: ") != password:
            fail("the passwords do not match; nothing changed")
    if not password:
        fail("the password is empty; nothing changed", 2)
    return password


def _mechanisms(given: list[str] | None) -> list[str]:
    out = []
    for m in given or MECHANISMS:
        name = m.upper()
        if name not in MECHANISMS:
            fail(f"--mechanism must be SCRAM-SHA-256 or SCRAM-SHA-512, got {m!r}", 2)
        if name not in out:
            out.append(name)
    return out


@app.command("list")
def list_users(bootstrap: Bootstrap = "127.0.0.1:9092", command_config: CommandConfig = None) -> None:
    """Every user with SCRAM credentials and their mechanisms."""
    described = _describe(_admin(bootstrap, command_config), None)
    table = make_table("USER", "MECHANISMS", box=None)
    for user, desc in sorted(described.items()):
        table.add_row(user, ",".join(_mechanism_name(i.mechanism) for i in desc.scram_credential_infos))
    console.print(table)


@app.command()
def describe(users: Annotated[list[str], typer.Argument(metavar="USER...", help="users to describe")],
             bootstrap: Bootstrap = "127.0.0.1:9092", command_config: CommandConfig = None) -> None:
    """A user's SCRAM mechanisms and iterations (never salts or keys)."""
    described = _describe(_admin(bootstrap, command_config), list(users))
    table = make_table("USER", "MECHANISM", "ITERATIONS", numbers=("ITERATIONS",), box=None)
    for user in users:
        for info in described[user].scram_credential_infos:
            table.add_row(user, _mechanism_name(info.mechanism), str(info.iterations))
    console.print(table)


def _upsert(user: str, mechanisms: list[str], iterations: int, password: str,
            bootstrap: str, command_config: str | None) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = _admin(bootstrap, command_config)
    upserts = [UserScramCredentialUpsertion(
        user, ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")), iterations),
        password.encode()) for m in mechanisms]
    for name, fut in admin.alter_user_scram_credentials(upserts).items():
        _wait(fut, f"cannot set the password of {name}")


@app.command()
def add(user: Annotated[str, typer.Argument(metavar="USER", help="user name")],
        mechanism: Annotated[list[str] | None, typer.Option(
            "--mechanism", metavar="MECHANISM",
            help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeat for both) [default: both]")] = None,
        iterations: Annotated[int, typer.Option(
            metavar="N", help="PBKDF2 iterations (4096 to 16384)")] = 4096,
        password_stdin: Annotated[bool, typer.Option(
            "--password-stdin", help="read the password from the first line of standard input")] = False,
        bootstrap: Bootstrap = "127.0.0.1:9092", command_config: CommandConfig = None) -> None:
    """Add a user, or set a user's password (prompted for, never echoed)."""
    mechanisms = _mechanisms(mechanism)
    if not user:
        fail("the user name is empty", 2)
    password = _read_password(password_stdin)
    _upsert(user, mechanisms, iterations, password, bootstrap, command_config)
    print(f"user {user}: {', '.join(mechanisms)} credentials set ({iterations} iterations)")


@app.command("set-password")
def set_password(user: Annotated[str, typer.Argument(metavar="USER", help="an existing user")],
                 password_stdin: Annotated[bool, typer.Option(
                     "--password-stdin", help="read the password from the first line of standard input")] = False,
                 bootstrap: Bootstrap = "127.0.0.1:9092", command_config: CommandConfig = None) -> None:
    """Change an existing user's password, for each mechanism it has, keeping its iterations."""
    described = _describe(_admin(bootstrap, command_config), [user])
    infos = described[user].scram_credential_infos
    password = _read_password(password_stdin)
    for info in infos:
        _upsert(user, [_mechanism_name(info.mechanism)], int(info.iterations), password,
                bootstrap, command_config)
    print(f"user {user}: password changed ({', '.join(_mechanism_name(i.mechanism) for i in infos)})")


@app.command()
def delete(user: Annotated[str, typer.Argument(metavar="USER", help="user name")],
           mechanism: Annotated[list[str] | None, typer.Option(
               "--mechanism", metavar="MECHANISM",
               help="delete only this mechanism's credential (repeatable)")] = None,
           bootstrap: Bootstrap = "127.0.0.1:9092", command_config: CommandConfig = None) -> None:
    """Delete a user's SCRAM credentials (all of them unless --mechanism)."""
    from confluent_kafka.admin import ScramMechanism, UserScramCredentialDeletion

    admin = _admin(bootstrap, command_config)
    if mechanism:
        mechanisms = _mechanisms(mechanism)
    else:
        described = _describe(admin, [user])
        mechanisms = [_mechanism_name(i.mechanism) for i in described[user].scram_credential_infos]
    deletions = [UserScramCredentialDeletion(user, getattr(ScramMechanism, m.replace("-", "_")))
                 for m in mechanisms]
    for name, fut in admin.alter_user_scram_credentials(deletions).items():
        _wait(fut, f"cannot delete the credentials of {name}")
    print(f"user {user}: {', '.join(mechanisms)} credentials deleted")
