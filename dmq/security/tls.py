"""TLS on the broker's SSL and SASL_SSL listeners (Python's ``ssl``, TLS 1.2 and later).

Kafka's configs, each overridable per listener (``listener.name.<l>.ssl.*``):
``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` a PEM file holding the private
key and the certificate chain (``ssl.key.password`` if the key is encrypted),
``ssl.truststore.location`` the PEM file of the CAs whose client certificates are
accepted, ``ssl.client.auth`` none/requested/required, ``ssl.enabled.protocols``.
dmq reads PEM files only: a JKS or PKCS12 store is refused at startup with what to set.

The principal of an SSL connection (no SASL) is its client certificate's subject in
Kafka's form, ``User:CN=...,OU=...,O=...`` (RFC 2253 order), else ``User:ANONYMOUS``.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

from dmq.config import BrokerConfig, ConfigError, listener_config

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# getpeercert()'s attribute names -> RFC 2253 keywords (what Kafka's X500Principal prints)
_RDN = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
        "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
        "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID"}


def _pem_file(config: BrokerConfig, listener: str, kind: str) -> str | None:
    location = listener_config(config, listener, f"ssl.{kind}.location")
    if not location:
        return None
    store_type = str(listener_config(config, listener, f"ssl.{kind}.type"))
    if store_type != "PEM":
        raise ConfigError(f"listener {listener}: ssl.{kind}.type is {store_type}; dmq reads PEM "
                          f"files only: set ssl.{kind}.type=PEM and ssl.{kind}.location to a PEM file")
    if not os.path.isfile(str(location)):
        raise ConfigError(f"listener {listener}: ssl.{kind}.location {location} is not a readable file")
    return str(location)


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The TLS context of an SSL or SASL_SSL listener; ConfigError says what is missing."""
    keystore = _pem_file(config, listener, "keystore")
    if keystore is None:
        raise ConfigError(f"listener {listener} uses TLS: set ssl.keystore.type=PEM and "
                          f"ssl.keystore.location (a PEM file with the key and certificate chain)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [_VERSIONS[v] for v in listener_config(config, listener, "ssl.enabled.protocols")]
    if not versions:
        raise ConfigError(f"listener {listener}: ssl.enabled.protocols is empty")
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    password = listener_config(config, listener, "ssl.key.password")
    try:
        ctx.load_cert_chain(keystore, password=str(password) if password else None)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"listener {listener}: cannot load the key and certificate from "
                          f"ssl.keystore.location {keystore} ({e.__class__.__name__}: {getattr(e, 'reason', None) or e}); "
                          f"is ssl.key.password right?") from None
    client_auth = str(listener_config(config, listener, "ssl.client.auth"))
    truststore = _pem_file(config, listener, "truststore")
    if client_auth != "none":
        if truststore is None:
            raise ConfigError(f"listener {listener}: ssl.client.auth={client_auth} needs "
                              f"ssl.truststore.location (the CAs of the client certificates)")
        ctx.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    if truststore is not None:
        try:
            ctx.load_verify_locations(cafile=truststore)
        except (ssl.SSLError, OSError) as e:
            raise ConfigError(f"listener {listener}: cannot load ssl.truststore.location "
                              f"{truststore}: {e}") from None
    return ctx


def peer_principal(transport: Any) -> str | None:
    """``User:<subject DN>`` of a TLS connection's verified client certificate, else None."""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    try:
        cert = ssl_object.getpeercert()
    except (ValueError, ssl.SSLError):
        return None
    if not cert:
        return None
    # RFC 2253, as Java's X500Principal.getName(): RDNs last first, joined by ",", the
    # attributes of one multi-valued RDN joined by "+". (Attribute types outside RFC 2253's
    # keywords appear by Python's name, where Java prints their OID.)
    rdns = ["+".join(f"{_RDN.get(key, key)}={_rfc2253_value(str(value))}" for key, value in rdn)
            for rdn in reversed(cert.get("subject", ())) if rdn]
    return "User:" + ",".join(rdns) if rdns else None


def _rfc2253_value(value: str) -> str:
    escaped = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped
