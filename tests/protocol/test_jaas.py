"""Kafka's sasl.jaas.config lines."""

from __future__ import annotations

import pytest

from dmq.protocol.jaas import JaasError, parse_jaas


def test_plain_login_module_with_users() -> None:
    entry = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                       'username="admin" password="admin-secret" user_admin="admin-secret" '
                       'user_alice="a \\"quoted\\" pw";')
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.flag == "required"
    assert (entry.username, entry.password) == ("admin", "admin-secret")
    assert entry.plain_users() == {"admin": "admin-secret", "alice": 'a "quoted" pw'}
    assert "admin-secret" not in repr(entry)


def test_scram_login_module_with_bare_values() -> None:
    entry = parse_jaas("org.apache.kafka.common.security.scram.ScramLoginModule required\n"
                       "  username=broker password=b-secret ;")
    assert (entry.username, entry.password) == ("broker", "b-secret")


@pytest.mark.parametrize("text", [
    'PlainLoginModule required username="a"',          # no ';'
    'PlainLoginModule username="a";',                  # no flag
    'PlainLoginModule always username="a";',           # unknown flag
    'PlainLoginModule required username="a;',          # unterminated quote
])
def test_malformed_lines_are_refused(text: str) -> None:
    with pytest.raises(JaasError):
        parse_jaas(text)
