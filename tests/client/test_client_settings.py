"""``client_settings``: a Kafka client properties file read into librdkafka's entries and
dmq's ClientSecurity; Kafka's (Java) names and librdkafka's; clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.certs import make_pki

from dmq.client.security import client_settings
from dmq.config import ConfigError

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="bob" password="b ob\\"secret";')


def test_plaintext_by_default() -> None:
    s = client_settings({})
    assert s.protocol == "PLAINTEXT" and s.security is None
    assert dict(s.librdkafka) == {"security.protocol": "PLAINTEXT"}


def test_kafka_names_become_librdkafka_names(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    s = client_settings({"security.protocol": "sasl_ssl", "sasl.mechanism": "scram-sha-512",
                         "sasl.jaas.config": JAAS, "ssl.truststore.type": "PEM",
                         "ssl.truststore.location": str(pki.ca), "ssl.truststore.password": "x",
                         "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.client_keystore),
                         "client.id": "ops"})
    assert dict(s.librdkafka) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "ssl.endpoint.identification.algorithm": "https",
        "sasl.username": "bob", "sasl.password": 'b ob"secret', "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.client_keystore),
        "ssl.key.location": str(pki.client_keystore), "client.id": "ops"}
    assert s.security is not None and s.security.ssl_context is not None
    assert s.security.ssl_context.check_hostname
    assert (s.security.mechanism, s.security.username, s.security.password) == (
        "SCRAM-SHA-512", "bob", 'b ob"secret')
    assert "secret" not in repr(s)


def test_librdkafka_names_as_they_are(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    s = client_settings({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
                         "ssl.certificate.location": str(pki.client_cert),
                         "ssl.key.location": str(pki.client_key),
                         "ssl.endpoint.identification.algorithm": ""})
    assert s.security is not None and s.security.mechanism is None
    assert s.security.ssl_context is not None and not s.security.ssl_context.check_hostname
    assert s.librdkafka["ssl.endpoint.identification.algorithm"] == "none"
    plain = client_settings({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                             "sasl.username": "alice", "sasl.password": "pw"})
    assert plain.security is not None and plain.security.ssl_context is None
    assert plain.security.mechanism == "PLAIN"


@pytest.mark.parametrize(("props", "says"), [
    ({"security.protocol": "TLS"}, "security.protocol=TLS"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "a", "sasl.password": "hunter2"},
     "sasl.mechanism=GSSAPI"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.password": "hunter2"},
     "needs sasl.username and sasl.password"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/k.p12", "ssl.keystore.type": "PKCS12"},
     "ssl.keystore.type=PKCS12"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/ca.jks"}, "ssl.truststore.type=JKS"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/no/such.pem"}, "cannot set up TLS"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"}, "expected https or none"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": 'x required a="'},
     "sasl.jaas.config"),
])
def test_errors_say_what_is_wrong(props: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError) as e:
        client_settings(props)
    assert says in str(e.value) and "hunter2" not in str(e.value)  # never a password
