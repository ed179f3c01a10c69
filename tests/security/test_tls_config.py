"""A listener's TLS context from Kafka's configs, and the SSL principal; what a broker
says when the listener settings are wrong."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.certs import KEY_PASSWORD, make_pki

from dmq.config import BrokerConfig, ConfigError, inter_broker_listener, listener_endpoints
from dmq.security.tls import peer_principal, server_context


def config(pki_dir: Path, **extra: str) -> BrokerConfig:
    pki = make_pki(pki_dir)
    return BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                         "ssl.keystore.location": str(pki.server_keystore),
                         "ssl.key.password": KEY_PASSWORD, "ssl.truststore.type": "PEM",
                         "ssl.truststore.location": str(pki.ca), **extra})


def test_client_auth_modes_and_versions(tmp_path: Path) -> None:
    modes = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
    for mode, verify in modes.items():
        ctx = server_context(config(tmp_path, **{"ssl.client.auth": mode}), "SSL")
        assert ctx.verify_mode == verify
        assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    # Per listener: listener.name.<l>.ssl.client.auth wins.
    ctx = server_context(config(tmp_path, **{"listener.name.ssl.ssl.client.auth": "required"}), "SSL")
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    ctx = server_context(config(tmp_path, **{"ssl.enabled.protocols": "TLSv1.3"}), "SSL")
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(ConfigError):
        config(tmp_path, **{"ssl.enabled.protocols": "TLSv1.1"})


def test_bad_stores_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dmq reads PEM files only: set ssl.keystore.type=PEM"):
        server_context(config(tmp_path, **{"ssl.keystore.type": "JKS"}), "SSL")
    with pytest.raises(ConfigError, match="is ssl.key.password right"):
        server_context(config(tmp_path, **{"ssl.key.password": "nope"}), "SSL")
    with pytest.raises(ConfigError, match="is not a readable file"):
        server_context(config(tmp_path, **{"ssl.keystore.location": str(tmp_path / "missing.pem")}), "SSL")
    with pytest.raises(ConfigError, match="needs ssl.truststore.location"):
        server_context(config(tmp_path, **{"ssl.client.auth": "required", "ssl.truststore.location": ""}), "SSL")
    assert "nope" not in str(BrokerConfig({"ssl.key.password": "nope"}).unknown)


def test_listener_lists(tmp_path: Path) -> None:
    c = BrokerConfig({"listeners": "INTERNAL://127.0.0.1:9093,CLIENT://:9094",
                      "listener.security.protocol.map": "INTERNAL:SSL,CLIENT:SASL_PLAINTEXT",
                      "inter.broker.listener.name": "internal"})
    endpoints = listener_endpoints(c)
    assert [(e.name, e.host, e.port, e.security_protocol) for e in endpoints] == [
        ("INTERNAL", "127.0.0.1", 9093, "SSL"), ("CLIENT", "0.0.0.0", 9094, "SASL_PLAINTEXT")]
    assert inter_broker_listener(c, endpoints).name == "INTERNAL"
    with pytest.raises(ConfigError, match="listener OTHER has no security protocol"):
        listener_endpoints(BrokerConfig({"listeners": "OTHER://127.0.0.1:1"}))
    with pytest.raises(ConfigError, match="appears more than once"):
        listener_endpoints(BrokerConfig({"listeners": "SSL://127.0.0.1:1,SSL://127.0.0.1:2"}))
    clustered = BrokerConfig({"listeners": "SSL://127.0.0.1:1", "zookeeper.connect": "z:2181"})
    with pytest.raises(ConfigError, match="set inter.broker.listener.name"):
        inter_broker_listener(clustered, listener_endpoints(clustered))
    assert [e.name for e in listener_endpoints(BrokerConfig())] == ["PLAINTEXT"]


class _Transport:
    def __init__(self, cert: dict[str, Any] | None) -> None:
        self.cert = cert

    def get_extra_info(self, name: str) -> Any:
        if name != "ssl_object":
            return None
        outer = self

        class _Ssl:
            def getpeercert(self) -> dict[str, Any] | None:
                return outer.cert
        return _Ssl() if self.cert is not None else None


def test_ssl_principal_is_the_subject_in_rfc2253_order() -> None:
    cert = {"subject": ((("countryName", "DE"),), (("organizationName", "dmq, tests"),),
                        (("commonName", "alice"),))}
    assert peer_principal(_Transport(cert)) == "User:CN=alice,O=dmq\\, tests,C=DE"
    # A multi-valued RDN's attributes are joined by "+" (they were listed as RDNs of their
    # own), and a value's leading "#" or space and trailing space are escaped, as Java's.
    multi = {"subject": ((("organizationName", "#1 corp "),), (("commonName", "bob"), ("userId", "b7")))}
    assert peer_principal(_Transport(multi)) == "User:CN=bob+UID=b7,O=\\#1 corp\\ "
    assert peer_principal(_Transport({})) is None      # no client certificate
    assert peer_principal(_Transport(None)) is None    # not TLS


def test_a_tls_listener_without_a_key_store_stops_the_broker(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "dmq", "server", "--listen", "SASL_SSL://127.0.0.1:0",
                          "--data-dir", str(tmp_path / "d"), "--override",
                          "sasl.enabled.mechanisms=SCRAM-SHA-256"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1] == (
        "error: listener SASL_SSL uses TLS: set ssl.keystore.type=PEM and ssl.keystore.location "
        "(a PEM file with the key and certificate chain)")
    res = subprocess.run([sys.executable, "-m", "dmq", "server", "--listen", "SASL_PLAINTEXT://127.0.0.1:0",
                          "--data-dir", str(tmp_path / "d")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert ("sasl.enabled.mechanisms=GSSAPI (listener SASL_PLAINTEXT): dmq supports PLAIN, SCRAM-SHA-256, "
            "SCRAM-SHA-512") in res.stderr
