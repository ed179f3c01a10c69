"""The security of a broker's connections to its peers, from its configs."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from support.certs import KEY_PASSWORD, make_pki

from dmq.client.security import SaslClient, inter_broker_security
from dmq.config import BrokerConfig, ConfigError

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
        'password="b-secret";')


def test_plaintext_needs_nothing() -> None:
    assert inter_broker_security(BrokerConfig()) is None


def test_sasl_ssl_with_the_listeners_jaas_login(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    config = BrokerConfig({
        "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093",
        "inter.broker.listener.name": "SASL_SSL", "zookeeper.connect": "z:2181",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": JAAS,
        "ssl.truststore.location": str(pki.ca), "ssl.keystore.location": str(pki.server_keystore),
        "ssl.key.password": KEY_PASSWORD})
    security = inter_broker_security(config)
    assert security is not None and security.ssl_context is not None
    assert (security.mechanism, security.username, security.password) == ("SCRAM-SHA-512", "broker", "b-secret")
    assert security.ssl_context.check_hostname and security.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert "b-secret" not in repr(security)


def test_what_is_missing_is_named(tmp_path: Path) -> None:
    base = {"listeners": "SASL_PLAINTEXT://127.0.0.1:9093", "zookeeper.connect": "z:2181",
            "security.inter.broker.protocol": "SASL_PLAINTEXT"}
    with pytest.raises(ConfigError, match="sasl.mechanism.inter.broker.protocol=GSSAPI"):
        inter_broker_security(BrokerConfig(base))
    with pytest.raises(ConfigError, match="set listener.name.sasl_plaintext.plain.sasl.jaas.config"):
        inter_broker_security(BrokerConfig({**base, "sasl.mechanism.inter.broker.protocol": "PLAIN"}))
    with pytest.raises(ConfigError, match="no listener has security.inter.broker.protocol PLAINTEXT"):
        inter_broker_security(BrokerConfig({"listeners": "SSL://127.0.0.1:1", "zookeeper.connect": "z"}))


def test_plain_client_token() -> None:
    client = SaslClient("PLAIN", "u", "p")
    assert client.first() == b"\0u\0p" and client.step(b"") is None
