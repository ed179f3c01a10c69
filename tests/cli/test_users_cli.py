"""``dmq users``: add, list, describe, set-password and delete SCRAM users against a real
broker; the password comes from stdin and never shows; the users then log in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from support.cli import run_dmq
from support.security import SecureBroker, start_secure_broker


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("users"))
    yield broker
    broker.proc.close()


def can_log_in(broker: SecureBroker, user: str, password: str, mechanism: str) -> bool:
    admin = AdminClient({"bootstrap.servers": broker.address("SASL_SSL"), "security.protocol": "SASL_SSL",
                         "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                         "ssl.ca.location": str(broker.pki.ca), "log_level": 0})
    try:
        admin.list_topics(timeout=8)
        return True
    except Exception:  # noqa: BLE001 - KafkaException: refused
        return False


def test_users_lifecycle(secured: SecureBroker, tmp_path: Path) -> None:
    b = secured.proc.bootstrap
    res = run_dmq(b, "users", "add", "carol", "--password-stdin", stdin=b"c-pass-1\n")
    assert res.stdout.strip() == "user carol: SCRAM-SHA-256, SCRAM-SHA-512 credentials set (4096 iterations)"
    run_dmq(b, "users", "add", "dave", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
            stdin=b"d-pass\n")
    out = run_dmq(b, "users", "list").stdout
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["USER", "MECHANISMS"]
    assert ["carol", "SCRAM-SHA-256,SCRAM-SHA-512"] in rows and ["dave", "SCRAM-SHA-512"] in rows
    out = run_dmq(b, "users", "describe", "dave").stdout
    assert [line.split() for line in out.splitlines()] == [
        ["USER", "MECHANISM", "ITERATIONS"], ["dave", "SCRAM-SHA-512", "8192"]]
    assert can_log_in(secured, "carol", "c-pass-1", "SCRAM-SHA-256")
    assert can_log_in(secured, "dave", "d-pass", "SCRAM-SHA-512")
    assert not can_log_in(secured, "dave", "d-pass", "SCRAM-SHA-256")

    run_dmq(b, "users", "set-password", "carol", "--password-stdin", stdin=b"c-pass-2\n")
    assert can_log_in(secured, "carol", "c-pass-2", "SCRAM-SHA-512")
    assert not can_log_in(secured, "carol", "c-pass-1", "SCRAM-SHA-512")

    res = run_dmq(b, "users", "delete", "carol")
    assert res.stdout.strip() == "user carol: SCRAM-SHA-256, SCRAM-SHA-512 credentials deleted"
    assert not can_log_in(secured, "carol", "c-pass-2", "SCRAM-SHA-256")
    res = run_dmq(b, "users", "describe", "carol", check=False)
    assert res.returncode == 1 and len(res.stderr.splitlines()) == 1
    assert res.stderr.startswith("error: cannot describe user carol:")

    # Bad input: one line each, nothing changed.
    res = run_dmq(b, "users", "add", "erin", "--iterations", "100", stdin=b"x\n", check=False)
    assert res.returncode == 1 and "error: cannot set the password of erin" in res.stderr
    res = run_dmq(b, "users", "add", "erin", stdin=b"\n", check=False)
    assert res.returncode == 2 and res.stderr.strip() == "error: the password is empty; nothing changed"
    res = run_dmq(b, "users", "add", "erin", "--mechanism", "MD5", stdin=b"x\n", check=False)
    assert res.returncode == 2

    # The same through the SASL_SSL listener, with the client's settings in a file.
    config = tmp_path / "client.properties"
    config.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=dave\n"
                      f"sasl.password=d-pass\nssl.ca.location={secured.pki.ca}\n")
    out = run_dmq(secured.address("SASL_SSL"), "users", "list", "--command-config", str(config)).stdout
    assert "dave" in out
    log = secured.proc.log_text()
    for secret in ("c-pass-1", "c-pass-2", "d-pass"):
        assert secret not in log
