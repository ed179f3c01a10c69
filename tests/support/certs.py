"""Test certificates (the ``cryptography`` package): a CA, a broker certificate for
127.0.0.1/localhost, client certificates (good, expired, from another CA), as PEM files.

``make_pki(dir)`` writes them once per directory and returns their paths: keys and
certificates apart (librdkafka's ``ssl.key.location``/``ssl.certificate.location``) and
together (a broker's PEM key store: the key and its chain in one file).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_PASSWORD = "key-secret"


@dataclass(frozen=True)
class Pki:
    ca: Path                    # the CA's certificate (trust store)
    other_ca: Path              # another CA's certificate
    server_keystore: Path       # broker key (encrypted with KEY_PASSWORD) + certificate + CA
    client_cert: Path
    client_key: Path
    client_keystore: Path       # client key + certificate in one PEM (Python's ssl)
    expired_cert: Path          # a client certificate of the CA that expired yesterday
    expired_key: Path
    other_cert: Path            # a client certificate of the other CA
    other_key: Path
    expired_server_keystore: Path  # a broker certificate that expired yesterday
    server_keystore_plain: Path    # the broker's key unencrypted + certificate + CA (ZooKeeper's
                                   # PEM reader cannot decrypt PBES2 keys)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dmq tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(cn: str, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, server: bool,
          expired: bool = False) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    start, end = ((now - datetime.timedelta(days=10), now - datetime.timedelta(days=1)) if expired
                  else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)))
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(
                   # a broker's certificate is a client's too (inter-broker, ZooKeeper)
                   [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server
                   else [ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    paths = Pki(*(directory / name for name in (
        "ca.pem", "other-ca.pem", "server.pem", "client.crt", "client.key", "client.pem",
        "expired.crt", "expired.key", "other.crt", "other.key", "expired-server.pem",
        "server-plain.pem")))
    if paths.ca.exists():
        return paths
    ca_key, ca = _ca("dmq test CA")
    other_key, other_ca = _ca("another CA")
    paths.ca.write_bytes(_pem_cert(ca))
    paths.other_ca.write_bytes(_pem_cert(other_ca))
    key, cert = _leaf("broker", ca_key, ca, server=True)
    paths.server_keystore.write_bytes(_pem_key(key, KEY_PASSWORD) + _pem_cert(cert) + _pem_cert(ca))
    paths.server_keystore_plain.write_bytes(_pem_key(key) + _pem_cert(cert) + _pem_cert(ca))
    key, cert = _leaf("broker", ca_key, ca, server=True, expired=True)
    paths.expired_server_keystore.write_bytes(_pem_key(key) + _pem_cert(cert) + _pem_cert(ca))
    key, cert = _leaf("alice", ca_key, ca, server=False)
    paths.client_cert.write_bytes(_pem_cert(cert))
    paths.client_key.write_bytes(_pem_key(key))
    paths.client_keystore.write_bytes(_pem_key(key) + _pem_cert(cert))
    key, cert = _leaf("mallory", ca_key, ca, server=False, expired=True)
    paths.expired_cert.write_bytes(_pem_cert(cert))
    paths.expired_key.write_bytes(_pem_key(key))
    key, cert = _leaf("eve", other_key, other_ca, server=False)
    paths.other_cert.write_bytes(_pem_cert(cert))
    paths.other_key.write_bytes(_pem_key(key))
    return paths
