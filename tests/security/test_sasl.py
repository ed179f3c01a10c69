"""A connection's SASL state (ConnectionAuth) and the mechanism servers, without a broker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.client.security import SaslClient
from dmq.cluster.metadata import EmbeddedMetadataStore
from dmq.config import BrokerConfig
from dmq.protocol import scram
from dmq.security.credentials import ScramCredentials
from dmq.security.sasl import (
    AuthenticationFailed,
    Authenticator,
    ConnectionAuth,
    SaslSettings,
    ScramServer,
    sasl_settings,
)

METADATA, PRODUCE = 3, 0


class Users:
    """A stand-in metadata store holding user configs only (what ScramCredentials reads)."""

    def __init__(self) -> None:
        self.configs: dict[str, dict[str, str]] = {}

    def user_configs(self, user: str) -> dict[str, str]:
        return dict(self.configs.get(user, {}))

    def users(self) -> list[str]:
        return sorted(self.configs)

    def add(self, user: str, password: str) -> None:
        self.configs[user] = {m: scram.new_credential(m, password).to_kafka() for m in scram.MECHANISMS}


def authenticator(reauth_ms: int = 0) -> Authenticator:
    users = Users()
    users.add("bob", "bob-pw")
    settings_ = SaslSettings(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), reauth_ms,
                             {"SASL_PLAINTEXT": {"alice": "alice-pw"}})
    return Authenticator(settings_, ScramCredentials(users))  # type: ignore[arg-type]


def login(auth: ConnectionAuth, mechanism: str, user: str, password: str, now: int = 0) -> tuple[str, str | None]:
    error, _ = auth.handshake(mechanism, now)
    assert error == "none"
    client = SaslClient(mechanism, user, password)
    token: bytes | None = client.first()
    while token is not None:
        error, message, answer, _ = asyncio.run(auth.authenticate(token, now))
        if error != "none":
            return error, message
        token = client.step(answer)
    return "none", None


def test_only_sasl_apis_until_authenticated() -> None:
    auth = ConnectionAuth("SASL_PLAINTEXT", "SASL_PLAINTEXT", authenticator())
    assert auth.allows(18, 0) and auth.allows(17, 0) and auth.allows(36, 0)
    assert not auth.allows(METADATA, 0) and not auth.allows(PRODUCE, 0)
    assert login(auth, "SCRAM-SHA-256", "bob", "bob-pw") == ("none", None)
    assert auth.principal == "User:bob" and auth.allows(METADATA, 0)
    plain = ConnectionAuth("PLAINTEXT", "PLAINTEXT", None)
    assert plain.allows(METADATA, 0) and plain.principal == "User:ANONYMOUS"
    assert plain.handshake("PLAIN", 0)[0] == "illegal_sasl_state"


def test_plain_from_jaas_and_from_scram_credentials() -> None:
    for user, password in (("alice", "alice-pw"), ("bob", "bob-pw")):
        auth = ConnectionAuth("SASL_PLAINTEXT", "SASL_PLAINTEXT", authenticator())
        assert login(auth, "PLAIN", user, password) == ("none", None)
        assert auth.principal == f"User:{user}"
    # JAAS users belong to their listener.
    auth = ConnectionAuth("SASL_SSL", "SASL_SSL", authenticator())
    assert login(auth, "PLAIN", "alice", "alice-pw")[0] == "sasl_authentication_failed"


def test_failures_close_the_connection() -> None:
    for mechanism, user, password in (("PLAIN", "alice", "nope"), ("SCRAM-SHA-512", "bob", "nope"),
                                      ("SCRAM-SHA-256", "nobody", "x")):
        auth = ConnectionAuth("SASL_PLAINTEXT", "SASL_PLAINTEXT", authenticator())
        error, message = login(auth, mechanism, user, password)
        assert error == "sasl_authentication_failed" and message
        assert auth.close_after_response and not auth.authenticated
        assert "nope" not in message
    auth = ConnectionAuth("SASL_PLAINTEXT", "SASL_PLAINTEXT", authenticator())
    assert auth.handshake("GSSAPI", 0) == ("unsupported_sasl_mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    assert auth.close_after_response
    auth = ConnectionAuth("SASL_PLAINTEXT", "SASL_PLAINTEXT", authenticator())
    assert asyncio.run(auth.authenticate(b"x", 0))[0] == "illegal_sasl_state"


def test_reauthentication_keeps_principal_and_mechanism_and_sessions_expire() -> None:
    auth = ConnectionAuth("SASL_PLAINTEXT", "SASL_PLAINTEXT", authenticator(reauth_ms=1000))
    assert login(auth, "SCRAM-SHA-256", "bob", "bob-pw", now=0) == ("none", None)
    assert auth.expires_ms == 1000 and auth.allows(METADATA, 999) and not auth.allows(METADATA, 1000)
    assert login(auth, "SCRAM-SHA-256", "bob", "bob-pw", now=900) == ("none", None)
    assert auth.expires_ms == 1900 and auth.authentications == 2
    # Another mechanism, or another user, on re-authentication: refused.
    assert auth.handshake("SCRAM-SHA-512", 2000)[0] == "unsupported_sasl_mechanism"
    auth = ConnectionAuth("SASL_PLAINTEXT", "SASL_PLAINTEXT", authenticator(reauth_ms=1000))
    assert login(auth, "PLAIN", "bob", "bob-pw") == ("none", None)
    error, message = login(auth, "PLAIN", "alice", "alice-pw", now=500)
    assert error == "sasl_authentication_failed" and "principal" in (message or "")
    assert auth.principal == "User:bob"


@settings(max_examples=300, deadline=None)
@given(mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
       tokens=st.lists(st.binary(max_size=200) | st.sampled_from([
           b"n,,n=bob,r=x", b"\0bob\0", b"c=biws,r=x,p=AAAA", b"n,,n=bob,r=x,tokenauth=true",
           b"\0alice\0alice-p", b"n,a=eve,n=bob,r=x", b"y,,n=bob,r=x"]), min_size=1, max_size=4))
def test_malformed_tokens_never_authenticate(mechanism: str, tokens: list[bytes]) -> None:
    auth = ConnectionAuth("SASL_PLAINTEXT", "SASL_PLAINTEXT", authenticator())
    assert auth.handshake(mechanism, 0)[0] == "none"
    for token in tokens:
        error, _, _, _ = asyncio.run(auth.authenticate(token, 0))
        assert error in ("none", "sasl_authentication_failed", "illegal_sasl_state")
        if error != "none":
            break
    assert not auth.authenticated and auth.principal == "User:ANONYMOUS"
    assert not auth.allows(METADATA, 0)


def test_sasl_settings_refuse_unsupported_mechanisms() -> None:
    import pytest

    from dmq.config import ConfigError

    with pytest.raises(ConfigError, match="GSSAPI"):
        sasl_settings(BrokerConfig(), ["SASL_SSL"])
    assert sasl_settings(BrokerConfig(), []).enabled == ("GSSAPI",)  # no SASL listener: unused
    config = BrokerConfig({"sasl.enabled.mechanisms": "SCRAM-SHA-512",
                           "listener.name.sasl_ssl.plain.sasl.jaas.config":
                               'x.PlainLoginModule required user_a="a-secret";'})
    got = sasl_settings(config, ["SASL_SSL"])
    assert got.plain_users == {"SASL_SSL": {"a": "a-secret"}} and "a-secret" not in repr(got)
    assert config.unknown == []
    # Per listener, as Kafka: listener.name.<l>.sasl.enabled.mechanisms and .connections.max.reauth.ms
    config = BrokerConfig({"sasl.enabled.mechanisms": "SCRAM-SHA-512", "connections.max.reauth.ms": "1000",
                           "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
                           "listener.name.internal.connections.max.reauth.ms": "0"})
    got = sasl_settings(config, ["INTERNAL", "SASL_SSL"])
    assert got.mechanisms("INTERNAL") == ("PLAIN",) and got.reauth("INTERNAL") == 0
    assert got.mechanisms("SASL_SSL") == ("SCRAM-SHA-512",) and got.reauth("SASL_SSL") == 1000
    auth = ConnectionAuth("INTERNAL", "SASL_PLAINTEXT", Authenticator(got, ScramCredentials(Users())))  # type: ignore[arg-type]
    assert auth.handshake("SCRAM-SHA-512", 0) == ("unsupported_sasl_mechanism", ["PLAIN"])


def test_credentials_in_the_embedded_store_survive_a_restart(tmp_path: Path) -> None:
    from dmq.security.credentials import Deletion, Upsertion

    async def run() -> None:
        store = EmbeddedMetadataStore(str(tmp_path), 0)
        creds = ScramCredentials(store)
        salt = b"s" * 16
        salted = scram.salted_password("SCRAM-SHA-256", "pw", salt, 4096)
        results = await creds.alter([], [Upsertion("carol", 1, 4096, salt, salted),
                                         Upsertion("dave", 1, 100, salt, salted),
                                         Upsertion("erin", 1, 4096, salt, salted),
                                         Upsertion("erin", 1, 4096, salt, salted),
                                         Upsertion("frank", 7, 4096, salt, salted)])
        assert [(r.user, r.error.name) for r in results] == [
            ("carol", "none"), ("dave", "unacceptable_credential"), ("erin", "duplicate_resource"),
            ("frank", "unsupported_sasl_mechanism")]
        reopened = ScramCredentials(EmbeddedMetadataStore(str(tmp_path), 0))
        assert reopened.describe("carol") == [(1, 4096)] and reopened.users() == ["carol"]
        assert reopened.get("carol", "SCRAM-SHA-256") == scram.credential_from_salted("SCRAM-SHA-256", salted, salt, 4096)
        results = await creds.alter([Deletion("carol", 2), Deletion("gina", 1)], [])
        assert [(r.user, r.error.name) for r in results] == [
            ("carol", "resource_not_found"), ("gina", "resource_not_found")]
        assert [(r.error.name) for r in await creds.alter([Deletion("carol", 1)], [])] == ["none"]
        assert creds.users() == []

    asyncio.run(run())


def server_first_of(server: ScramServer, user: str) -> dict[str, str]:
    return scram.parse_attributes(server.evaluate(f"n,,n={user},r=client-nonce".encode()).decode())


def test_an_unknown_user_gets_the_same_made_up_salt_every_time() -> None:
    """A fresh random salt per attempt for unknown users (and the stored one, always the
    same, for real users) told which users exist: two client-first messages were enough."""
    bob = scram.new_credential("SCRAM-SHA-256", "pw")

    def lookup(user: str) -> scram.ScramCredential | None:
        return bob if user == "bob" else None

    def salt(user: str) -> str:
        return server_first_of(ScramServer("SCRAM-SHA-256", lookup), user)["s"]

    assert salt("mallory") == salt("mallory") != salt("eve")
    assert salt("bob") == salt("bob")
    assert server_first_of(ScramServer("SCRAM-SHA-256", lookup), "mallory")["i"] == str(bob.iterations)


def test_credentials_below_the_minimum_iterations_are_refused() -> None:
    weak = scram.new_credential("SCRAM-SHA-256", "pw", iterations=1000)  # written past AlterUserScramCredentials
    with pytest.raises(AuthenticationFailed, match="less than the minimum"):
        server_first_of(ScramServer("SCRAM-SHA-256", lambda _user: weak), "bob")


def test_plain_takes_as_long_to_fail_for_an_unknown_user_as_for_a_known_one() -> None:
    """PLAIN against SCRAM credentials runs PBKDF2 for a user that has one; an unknown user
    failed at once, so the time to fail told which users exist. The two are timed in turn
    and compared by their fastest try: what a check costs when nothing else wants the CPU
    (medians of one user's tries, then the other's, failed on a loaded machine when a burst
    of load fell on one of them: 15.6 ms against 4.2 ms)."""
    server_of = authenticator().server

    def failing(user: str) -> float:
        started = time.perf_counter()
        with pytest.raises(AuthenticationFailed):
            asyncio.run(server_of("SASL_PLAINTEXT", "PLAIN").evaluate_async(b"\0" + user.encode() + b"\0wrong"))
        return time.perf_counter() - started

    times: dict[str, list[float]] = {"bob": [], "nobody": []}
    for _ in range(7):
        for user, taken in times.items():
            taken.append(failing(user))
    known, unknown = min(times["bob"]), min(times["nobody"])
    assert unknown > known / 2, (known, unknown)


def test_reauthentication_needs_a_session_lifetime_and_comes_at_most_once_a_second() -> None:
    """Kafka's KafkaChannel.maybeBeginServerReauthentication: with connections.max.reauth.ms
    0 (no session expiry) a SaslHandshake on an authenticated connection is no
    re-authentication but an ILLEGAL_SASL_STATE answer, and re-authentications start at
    most once a second (the same answer between); the connection stays open. Any number
    were taken, each a full SCRAM or PLAIN check."""
    auth = ConnectionAuth("SASL_PLAINTEXT", "SASL_PLAINTEXT", authenticator(reauth_ms=0))
    assert login(auth, "PLAIN", "bob", "bob-pw") == ("none", None)
    assert auth.handshake("PLAIN", 5000)[0] == "illegal_sasl_state"
    assert not auth.close_after_response and auth.server is None and auth.allows(METADATA, 5000)
    auth = ConnectionAuth("SASL_PLAINTEXT", "SASL_PLAINTEXT", authenticator(reauth_ms=60_000))
    assert login(auth, "PLAIN", "bob", "bob-pw", now=0) == ("none", None)
    assert login(auth, "PLAIN", "bob", "bob-pw", now=100) == ("none", None)  # the first one: any time
    assert auth.handshake("PLAIN", 1099)[0] == "illegal_sasl_state"
    assert not auth.close_after_response and auth.server is None
    assert login(auth, "PLAIN", "bob", "bob-pw", now=1100) == ("none", None)
    assert auth.authentications == 3
