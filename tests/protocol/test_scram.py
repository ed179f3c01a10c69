"""SCRAM primitives against RFC 7677's example exchange, and Kafka's credential strings."""

from __future__ import annotations

import base64

import pytest

from dmq.protocol import scram
from dmq.security.sasl import AuthenticationFailed, ScramServer

# RFC 7677 section 3: user "user", password "pencil".
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
FULL_NONCE = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_exchange_on_the_server() -> None:
    credential = scram.new_credential("SCRAM-SHA-256", "pencil", 4096, SALT)
    server = ScramServer("SCRAM-SHA-256", lambda user: credential if user == "user" else None)
    first = server.evaluate(CLIENT_FIRST).decode()
    assert first.startswith("r=rOprNGfwEbeRWgbNEkqO") and first.endswith(",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    # Replay the RFC's server nonce so its proof applies.
    server._nonce = FULL_NONCE
    server._server_first = f"r={FULL_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert server.evaluate(CLIENT_FINAL) == SERVER_FINAL
    assert server.complete and server.user == "user"


def test_rfc7677_client_proof() -> None:
    salted = scram.salted_password("SCRAM-SHA-256", "pencil", SALT, 4096)
    auth = (b"n=user,r=rOprNGfwEbeRWgbNEkqO,r=" + FULL_NONCE.encode()
            + b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=" + FULL_NONCE.encode())
    assert base64.b64encode(scram.client_proof("SCRAM-SHA-256", salted, auth)) == \
        b"dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="


def test_wrong_proof_fails_and_unknown_users_look_the_same() -> None:
    credential = scram.new_credential("SCRAM-SHA-512", "right", 4096)
    for lookup in (lambda u: credential, lambda u: None):
        server = ScramServer("SCRAM-SHA-512", lookup)
        first = server.evaluate(b"n,,n=al=2Cice,r=abc").decode()
        assert first.startswith("r=abc") and ",i=4096" in first
        nonce = first.split(",")[0][2:]
        with pytest.raises(AuthenticationFailed, match="invalid credentials with SASL mechanism SCRAM-SHA-512"):
            server.evaluate(f"c=biws,r={nonce},p={base64.b64encode(bytes(64)).decode()}".encode())
        assert not server.complete


def test_kafka_credential_string_round_trips() -> None:
    credential = scram.new_credential("SCRAM-SHA-256", "pw", 8192)
    text = credential.to_kafka()
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=8192")
    assert scram.ScramCredential.from_kafka(text) == credential
    with pytest.raises(scram.ScramError):
        scram.ScramCredential.from_kafka("salt=!!,iterations=x")


def test_user_names_are_escaped() -> None:
    assert scram.encode_name("a,b=c") == "a=2Cb=3Dc"
    assert scram.decode_name("a=2Cb=3Dc") == "a,b=c"
    with pytest.raises(scram.ScramError):
        scram.decode_name("a=b")
