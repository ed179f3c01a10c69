"""Fuzzing the SASL exchange and the TLS listener of a live broker (Hypothesis).

Malformed frames, malformed SASL tokens and garbage instead of a TLS handshake must never
crash the broker nor authenticate anyone: after any such exchange a request that needs
authentication (Metadata) is never answered on that connection, and a good client still
authenticates and is served afterwards.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from support.certs import make_pki
from support.security import PASSWORD, USER, SecureBroker, start_secure_broker

from dmq.client.security import ClientSecurity, client_ssl_context
from dmq.client.wire import WireClient, encode_request

METADATA = encode_request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False), 99, "fuzz")


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    base = tmp_path_factory.mktemp("fuzz")
    make_pki(base / "pki")
    broker = start_secure_broker(base, **{"sasl.server.max.receive.size": "4096"})
    yield broker
    broker.proc.close()


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def connect(broker: SecureBroker, listener: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.ports[listener]), timeout=3)
    if listener == "SASL_SSL":
        sock = client_ssl_context(str(broker.pki.ca)).wrap_socket(sock, server_hostname="127.0.0.1")
    return sock


def answers_metadata(sock: socket.socket) -> bool:
    """Whether the broker answers a Metadata request on this connection (it must not
    before authentication); drains whatever the earlier frames got first."""
    try:
        sock.sendall(METADATA)
        while True:
            head = sock.recv(4)
            if len(head) < 4:
                return False
            size = struct.unpack(">i", head)[0]
            data = b""
            while len(data) < size:
                chunk = sock.recv(size - len(data))
                if not chunk:
                    return False
                data += chunk
            if struct.unpack_from(">i", data)[0] == 99:
                return True
    except (OSError, ssl.SSLError):
        return False


def good_client_works(broker: SecureBroker) -> None:
    security = ClientSecurity(client_ssl_context(str(broker.pki.ca)), "SCRAM-SHA-256", USER, PASSWORD)
    with WireClient("127.0.0.1", broker.ports["SASL_SSL"], timeout=10, security=security) as c:
        md = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False))
        assert [b.port for b in md.brokers] == [broker.ports["SASL_SSL"]]


sasl_tokens = st.binary(max_size=300) | st.sampled_from([
    b"\0bob\0", b"\0\0", b"bob\0bob\0" + PASSWORD.encode() + b"x", b"n,,n=bob,r=", b"n,,n=bob,r=abc",
    b"n,,n=bob,r=abc,tokenauth=true", b"c=biws,r=abc,p=", b"c=biws,r=abc,p=====", b"\xff\xfe",
    b"n,,n=" + b"b" * 5000 + b",r=x"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(listener=st.sampled_from(["SASL_PLAINTEXT", "SASL_SSL"]),
       mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "", "plain"]),
       tokens=st.lists(sasl_tokens, max_size=3))
def test_malformed_sasl_tokens_never_authenticate(fuzzed: SecureBroker, listener: str, mechanism: str,
                                                  tokens: list[bytes]) -> None:
    with connect(fuzzed, listener) as sock:
        try:
            sock.sendall(encode_request(SaslHandshakeRequest(mechanism=mechanism), 1, "fuzz"))
            for i, token in enumerate(tokens):
                sock.sendall(encode_request(SaslAuthenticateRequest(auth_bytes=token), 2 + i, "fuzz"))
        except (OSError, ssl.SSLError):
            return  # the broker closed the connection already (a refused mechanism or token)
        assert not answers_metadata(sock)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(listener=st.sampled_from(["SASL_PLAINTEXT", "SASL_SSL", "SSL"]),
       chunks=st.lists(st.binary(min_size=1, max_size=200) | st.builds(frame, st.binary(max_size=200))
                       | st.builds(lambda k, v, rest: frame(struct.pack(">hhi", k, v, 1) + rest),
                                   st.sampled_from([17, 36, 18, 3, 0, 50, 51, -1]),
                                   st.integers(-1, 5), st.binary(max_size=100)),
                       min_size=1, max_size=4))
def test_malformed_frames_and_tls_bytes_never_crash_or_authenticate(
        fuzzed: SecureBroker, listener: str, chunks: list[bytes]) -> None:
    try:
        # On the SSL listener the bytes go raw to the TLS handshake.
        sock = (socket.create_connection(("127.0.0.1", fuzzed.ports["SSL"]), timeout=3)
                if listener == "SSL" else connect(fuzzed, listener))
    except OSError:
        pytest.fail("the broker did not accept a connection")
    with sock:
        try:
            for chunk in chunks:
                sock.sendall(chunk)
        except (OSError, ssl.SSLError):
            pass  # closed by the broker meanwhile
        if listener != "SSL":
            assert not answers_metadata(sock)


def test_the_broker_is_healthy_after_the_fuzzing(fuzzed: SecureBroker) -> None:
    # Runs after the fuzz tests of this module (pytest keeps the file order).
    good_client_works(fuzzed)
    assert fuzzed.proc.alive()
    text = fuzzed.proc.log_text()
    assert "Traceback" not in text and "unexpected error" not in text
    # Oversized pre-authentication frames are refused by size (sasl.server.max.receive.size).
    with connect(fuzzed, "SASL_PLAINTEXT") as sock:
        sock.sendall(struct.pack(">i", 5000) + b"x" * 5000)
        assert not answers_metadata(sock)
    assert "request size 5000 is outside [0, 4096]" in fuzzed.proc.log_text()
    good_client_works(fuzzed)
