"""SCRAM (RFC 5802, RFC 7677) as Kafka speaks it: the key derivations and the four
messages of an exchange, for the broker's SCRAM server and the brokers' own client.
Pure: no I/O, no state beyond the values passed in.

Kafka's mechanisms are SCRAM-SHA-256 and SCRAM-SHA-512 (no channel binding: the
GS2 header is ``n,,``), with iterations from 4096 to 16384.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# DescribeUserScramCredentials/AlterUserScramCredentials' mechanism numbers.
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {v: k for k, v in MECHANISM_IDS.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramError(ValueError):
    """A SCRAM message that does not parse, or an exchange that cannot go on."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps of a password (Kafka's ScramCredential): never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        """Kafka's string form (ScramCredentialUtils), as stored under /config/users/<user>."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @staticmethod
    def from_kafka(text: str) -> ScramCredential:
        fields = parse_attributes(text)
        try:
            return ScramCredential(base64.b64decode(fields["salt"], validate=True),
                                   base64.b64decode(fields["stored_key"], validate=True),
                                   base64.b64decode(fields["server_key"], validate=True),
                                   int(fields["iterations"]))
        except (KeyError, ValueError) as e:
            raise ScramError(f"not a SCRAM credential: {e}") from None


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unsupported SCRAM mechanism {mechanism!r}") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i): PBKDF2 with the mechanism's HMAC (Kafka does not SASLprep)."""
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode(), salt, iterations)


def hmac_digest(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, _hash(mechanism)).digest()


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    client_key = hmac_digest(mechanism, salted, b"Client Key")
    stored_key = hashlib.new(_hash(mechanism), client_key).digest()
    server_key = hmac_digest(mechanism, salted, b"Server Key")
    return ScramCredential(salt, stored_key, server_key, iterations)


def new_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                   salt: bytes | None = None) -> ScramCredential:
    salt = salt if salt is not None else secrets.token_bytes(32)
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations),
                                  salt, iterations)


def parse_attributes(text: str) -> dict[str, str]:
    """``a=1,b=2`` into a dict; ScramError on anything else."""
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ScramError(f"invalid SCRAM attribute {part!r}")
        out.setdefault(key, value)
    return out


def encode_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def decode_name(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("invalid encoding of a user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def new_nonce() -> str:
    return base64.b64encode(secrets.token_bytes(24)).decode().rstrip("=").replace("+", "-")


@dataclass(frozen=True, slots=True)
class ClientFirst:
    user: str
    nonce: str
    bare: str  # client-first-message-bare, part of the AuthMessage
    extensions: dict[str, str]


def parse_client_first(data: bytes) -> ClientFirst:
    """The client-first-message: ``n,[a=authzid],n=user,r=nonce[,ext=...]``."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ScramError("the client-first-message is not UTF-8") from None
    parts = text.split(",", 2)
    if len(parts) != 3 or parts[0] != "n":
        raise ScramError("expected the GS2 header 'n,' (channel binding is not supported)")
    authzid, bare = parts[1], parts[2]
    fields = bare.split(",")
    if len(fields) < 2 or not fields[0].startswith("n=") or not fields[1].startswith("r="):
        raise ScramError("invalid client-first-message")
    user = decode_name(fields[0][2:])
    if authzid and authzid != f"a={fields[0][2:]}":
        raise ScramError("the authorization id must be the user name")
    nonce = fields[1][2:]
    if not user or not nonce or any(not 0x21 <= ord(c) <= 0x7E or c == "," for c in nonce):
        raise ScramError("invalid user name or nonce")
    extensions = parse_attributes(",".join(fields[2:])) if len(fields) > 2 else {}
    return ClientFirst(user, nonce, bare, extensions)


def server_first(nonce: str, salt: bytes, iterations: int) -> str:
    return f"r={nonce},s={base64.b64encode(salt).decode()},i={iterations}"


def client_final_without_proof(nonce: str) -> str:
    return f"c={base64.b64encode(b'n,,').decode()},r={nonce}"


def client_proof(mechanism: str, salted: bytes, auth_message: bytes) -> bytes:
    client_key = hmac_digest(mechanism, salted, b"Client Key")
    stored_key = hashlib.new(_hash(mechanism), client_key).digest()
    signature = hmac_digest(mechanism, stored_key, auth_message)
    return bytes(a ^ b for a, b in zip(client_key, signature, strict=True))


def verify_proof(mechanism: str, credential: ScramCredential, auth_message: bytes, proof: bytes) -> bool:
    signature = hmac_digest(mechanism, credential.stored_key, auth_message)
    if len(proof) != len(signature):
        return False
    client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    computed = hashlib.new(_hash(mechanism), client_key).digest()
    return hmac.compare_digest(computed, credential.stored_key)


def server_signature(mechanism: str, server_key: bytes, auth_message: bytes) -> bytes:
    return hmac_digest(mechanism, server_key, auth_message)


def b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise ScramError("invalid base64") from None
