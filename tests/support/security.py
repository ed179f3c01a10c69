"""A broker with TLS and SASL listeners for tests, and the client settings to reach it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from support.broker import BrokerProcess
from support.certs import KEY_PASSWORD, Pki, make_pki
from support.ports import free_port

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret";')
USER, PASSWORD = "bob", "bob-secret"


@dataclass
class SecureBroker:
    proc: BrokerProcess
    pki: Pki
    ports: dict[str, int]

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


def secure_overrides(pki: Pki, **extra: str) -> dict[str, str]:
    return {
        "group.initial.rebalance.delay.ms": "0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        **extra,
    }


def start_secure_broker(base: Path, **extra: str) -> SecureBroker:
    pki = make_pki(base / "pki")
    ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT")}
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    proc = BrokerProcess(base / "data", overrides=secure_overrides(pki, **extra),
                         port=ports["PLAINTEXT"], listeners=listeners).start()
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    upserts = [UserScramCredentialUpsertion(USER, ScramCredentialInfo(m, 4096), PASSWORD.encode())
               for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for fut in admin.alter_user_scram_credentials(upserts).values():
        fut.result(30)
    return SecureBroker(proc, pki, ports)


def scram_conf(secure: SecureBroker, mechanism: str, password: str = PASSWORD) -> dict[str, str]:
    return {"bootstrap.servers": secure.address("SASL_SSL"), "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": password,
            "ssl.ca.location": str(secure.pki.ca)}


def plain_conf(secure: SecureBroker, user: str = "alice", password: str = "alice-secret") -> dict[str, str]:
    return {"bootstrap.servers": secure.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password}


