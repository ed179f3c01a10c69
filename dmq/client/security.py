"""Client-side security for dmq's own wire clients: TLS and SASL (PLAIN, SCRAM-SHA-256/512).

Brokers talk to each other (followers' fetches, transaction markers, share-state calls,
dead letters) over the inter-broker listener with its security (``inter_broker_security``):
``inter.broker.listener.name`` (or ``security.inter.broker.protocol``), the listener's
TLS trust store (and key store, for ``ssl.client.auth``), and for SASL
``sasl.mechanism.inter.broker.protocol`` with the ``username``/``password`` of the
listener's JAAS config, as a Kafka broker logs in to its peers.

Tools and the console connect with a client properties file instead (``--command-config``,
``client_settings``: Kafka's or librdkafka's names, read into a ``ClientSettings``).

``SaslClient`` is the sans-io exchange; ``AsyncWireClient`` and ``WireClient`` drive it
over SaslHandshake v1 and SaslAuthenticate v2 once connected. Passwords are kept in
memory only, never logged or shown in a repr.
"""

from __future__ import annotations

import base64
import hmac
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from dmq.config import (
    BrokerConfig,
    ConfigError,
    inter_broker_listener,
    listener_config,
    listener_endpoints,
)
from dmq.protocol import scram
from dmq.protocol.jaas import JaasError, parse_jaas

CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class AuthenticationError(ConnectionError):
    """The broker refused our credentials (or the exchange went wrong)."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How a client connects: TLS (``ssl_context``) and/or SASL (``mechanism``)."""

    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)


def client_ssl_context(cafile: str | None, certfile: str | None = None, key_password: str | None = None,
                       check_hostname: bool = True, keyfile: str | None = None) -> ssl.SSLContext:
    """TLS 1.2+ context trusting ``cafile`` (the system's CAs without it), presenting
    ``certfile`` (key and chain in one PEM, or the key in ``keyfile``) when given."""
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = check_hostname
    if certfile:
        ctx.load_cert_chain(certfile, keyfile, password=key_password)
    return ctx


def inter_broker_security(config: BrokerConfig) -> ClientSecurity | None:
    """The security of a broker's connections to its peers; None for PLAINTEXT.
    ConfigError says what is missing."""
    listener = inter_broker_listener(config, listener_endpoints(config))
    name = listener.name
    ctx = None
    if listener.uses_ssl:
        def pem(kind: str) -> str | None:
            location = listener_config(config, name, f"ssl.{kind}.location")
            return str(location) if location else None
        password = listener_config(config, name, "ssl.key.password")
        try:
            ctx = client_ssl_context(
                pem("truststore"), pem("keystore"), str(password) if password else None,
                check_hostname=str(listener_config(config, name, "ssl.endpoint.identification.algorithm")
                                   or "").lower() == "https")
        except (ssl.SSLError, OSError) as e:
            raise ConfigError(f"inter-broker listener {name}: cannot set up TLS: {e}") from None
    if not listener.uses_sasl:
        return ClientSecurity(ctx) if ctx is not None else None
    mechanism = str(config["sasl.mechanism.inter.broker.protocol"]).upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism}: dmq brokers log in "
                          f"to each other with {', '.join(CLIENT_MECHANISMS)}")
    key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.explicit.get(key)
    try:
        entry = parse_jaas(text) if text else None
    except JaasError as e:
        raise ConfigError(f"{key}: {e}") from None
    if entry is None or not entry.username or entry.password is None:
        raise ConfigError(f"the inter-broker listener {name} uses SASL {mechanism}: set {key} with "
                          f"the broker's username=\"...\" password=\"...\"")
    return ClientSecurity(ctx, mechanism, entry.username, entry.password)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """A Kafka client properties file (``--command-config``) read once: ``librdkafka``
    holds its entries under librdkafka's names, for confluent-kafka clients; ``security``
    the same settings for dmq's own wire clients (None: PLAINTEXT)."""

    protocol: str = "PLAINTEXT"
    librdkafka: Mapping[str, str] = field(default_factory=dict, repr=False)
    security: ClientSecurity | None = None


def client_settings(props: Mapping[str, str]) -> ClientSettings:
    """The settings of a client properties file, with Kafka's (Java client's) names or
    librdkafka's: ``security.protocol``, ``sasl.mechanism``, ``sasl.username`` and
    ``sasl.password`` or ``sasl.jaas.config``, ``ssl.ca.location`` or
    ``ssl.truststore.location`` (PEM), ``ssl.certificate.location`` and ``ssl.key.location``
    or ``ssl.keystore.location`` (PEM: key and chain), ``ssl.key.password``,
    ``ssl.endpoint.identification.algorithm``. Other entries are left for librdkafka as
    they are. ConfigError says what is wrong (never a password)."""
    rest = {k.strip(): v.strip() for k, v in props.items()}
    protocol = rest.pop("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"security.protocol={protocol}: expected one of {', '.join(SECURITY_PROTOCOLS)}")
    out: dict[str, str] = {"security.protocol": protocol}
    for kind in ("truststore", "keystore"):
        store_type = rest.pop(f"ssl.{kind}.type", None)
        if f"ssl.{kind}.location" in rest and (store_type or "JKS").upper() != "PEM":
            raise ConfigError(f"ssl.{kind}.type={store_type or 'JKS (the default)'}: dmq's tools read PEM "
                              f"files only: set ssl.{kind}.type=PEM (or use ssl.ca.location, "
                              f"ssl.certificate.location and ssl.key.location)")
    rest.pop("ssl.truststore.password", None)  # a PEM trust store has none
    if "ssl.truststore.location" in rest:
        rest.setdefault("ssl.ca.location", rest.pop("ssl.truststore.location"))
    if "ssl.keystore.location" in rest:
        keystore = rest.pop("ssl.keystore.location")
        rest.setdefault("ssl.certificate.location", keystore)
        rest.setdefault("ssl.key.location", keystore)
    if "ssl.keystore.password" in rest:  # a PEM key store's password is its key's
        rest.setdefault("ssl.key.password", rest.pop("ssl.keystore.password"))
    algorithm = rest.pop("ssl.endpoint.identification.algorithm", "https").lower() or "none"
    if algorithm not in ("https", "none"):
        raise ConfigError(f"ssl.endpoint.identification.algorithm={algorithm}: expected https or "
                          f"none (empty)")
    jaas = rest.pop("sasl.jaas.config", None)
    if jaas:
        try:
            entry = parse_jaas(jaas)
        except JaasError as e:
            raise ConfigError(f"sasl.jaas.config: {e}") from None
        if entry.username is not None:
            rest.setdefault("sasl.username", entry.username)
        if entry.password is not None:
            rest.setdefault("sasl.password", entry.password)
    ctx = None
    if protocol in ("SSL", "SASL_SSL"):
        out["ssl.endpoint.identification.algorithm"] = algorithm
        try:
            ctx = client_ssl_context(rest.get("ssl.ca.location"), rest.get("ssl.certificate.location"),
                                     rest.get("ssl.key.password"), check_hostname=algorithm == "https",
                                     keyfile=rest.get("ssl.key.location"))
        except OSError as e:  # ssl.SSLError is one: a file that is missing, unreadable or not PEM
            where = f" ({e.filename})" if getattr(e, "filename", None) else ""
            reason = getattr(e, "reason", None) or e.strerror or str(e)
            raise ConfigError(f"cannot set up TLS: {str(reason).lower().replace('_', ' ')}{where}") from None
    mechanism = username = password = None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = rest.pop("sasl.mechanism", rest.pop("sasl.mechanisms", "GSSAPI")).upper()
        if mechanism not in CLIENT_MECHANISMS:
            raise ConfigError(f"sasl.mechanism={mechanism}: dmq's tools log in with "
                              f"{', '.join(CLIENT_MECHANISMS)}")
        username, password = rest.get("sasl.username"), rest.get("sasl.password")
        if not username or password is None:
            raise ConfigError(f"security.protocol={protocol} needs sasl.username and sasl.password "
                              f"(or sasl.jaas.config with username=\"...\" password=\"...\")")
        out["sasl.mechanism"] = mechanism
    security = ClientSecurity(ctx, mechanism, username, password) if ctx or mechanism else None
    return ClientSettings(protocol, {**out, **rest}, security)


class SaslClient:
    """One SASL exchange, sans-io: ``first()`` is the first token, ``step(server_token)``
    the next one (None: done). AuthenticationError when the server's answer is wrong."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        if mechanism not in CLIENT_MECHANISMS:
            raise AuthenticationError(f"unsupported SASL mechanism {mechanism}")
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._nonce = scram.new_nonce()
        self._bare = f"n={scram.encode_name(username)},r={self._nonce}"
        self._signature = b""

    def first(self) -> bytes:
        if self.mechanism == "PLAIN":
            return f"\0{self._username}\0{self._password}".encode()
        return ("n,," + self._bare).encode()

    def step(self, token: bytes) -> bytes | None:
        if self.mechanism == "PLAIN":
            return None
        text = token.decode(errors="replace")
        if self._signature:  # server-final
            fields = scram.parse_attributes(text)
            if "e" in fields:
                raise AuthenticationError(f"SCRAM: the server says {fields['e']}")
            if not hmac.compare_digest(scram.b64decode(fields.get("v", "")), self._signature):
                raise AuthenticationError("SCRAM: the server's signature is wrong")
            return None
        try:
            fields = scram.parse_attributes(text)
            nonce, salt, iterations = fields["r"], scram.b64decode(fields["s"]), int(fields["i"])
        except (KeyError, ValueError) as e:
            raise AuthenticationError(f"SCRAM: invalid server-first-message ({e})") from None
        if not nonce.startswith(self._nonce) or iterations < scram.MIN_ITERATIONS:
            raise AuthenticationError("SCRAM: invalid server-first-message")
        salted = scram.salted_password(self.mechanism, self._password, salt, iterations)
        without_proof = scram.client_final_without_proof(nonce)
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        proof = scram.client_proof(self.mechanism, salted, auth_message)
        server_key = scram.hmac_digest(self.mechanism, salted, b"Server Key")
        self._signature = scram.server_signature(self.mechanism, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
