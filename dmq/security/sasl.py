"""SASL on the broker: PLAIN and SCRAM-SHA-256/512 servers, and each connection's
authentication state (Kafka's SaslServerAuthenticator, KIP-368 re-authentication).

A connection of a SASL listener starts unauthenticated: only ApiVersions, SaslHandshake
and SaslAuthenticate are served, anything else closes it (``ConnectionAuth.allows``).
SaslHandshake picks a mechanism (``handshake``); SaslAuthenticate feeds the mechanism's
server one token at a time (``authenticate``). A failure answers
SASL_AUTHENTICATION_FAILED and closes the connection. Once authenticated the
connection's principal is ``User:<name>``; with ``connections.max.reauth.ms`` the
session has a lifetime: the client re-authenticates on the same connection (a new
SaslHandshake and SaslAuthenticate, same principal and mechanism) before it ends, and a
connection whose session ended is closed at its next other request.

PLAIN users (docs/security.md): the listener's JAAS ``user_<name>="<password>"`` options
(``listener.name.<listener>.plain.sasl.jaas.config``, as Kafka's PlainLoginModule), and
beyond Kafka, a user who is not there but has a SCRAM credential (``dmq users add``)
logs in with PLAIN too: the password is checked against the stored credential.

Passwords and tokens are never logged or kept: a SCRAM server keeps the stored key and
server key it read, a PLAIN check compares and forgets. Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from dmq.config import BrokerConfig, ConfigError, listener_config
from dmq.protocol import scram
from dmq.protocol.jaas import JaasError, parse_jaas
from dmq.security.credentials import ScramCredentials

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
ANONYMOUS = "User:ANONYMOUS"
# APIs a connection may send before it is authenticated (Kafka's SaslServerAuthenticator).
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
PRE_AUTH_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


class AuthenticationFailed(Exception):
    """The client failed to authenticate; the message is what the client is told."""


class SaslServer:
    """One mechanism's server side of one exchange."""

    mechanism = ""

    def __init__(self) -> None:
        self.complete = False
        self.user: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        """The next server token; AuthenticationFailed ends the exchange."""
        raise NotImplementedError

    async def evaluate_async(self, token: bytes) -> bytes:
        """``evaluate``, for a mechanism whose check may run off the event loop."""
        return self.evaluate(token)


class PlainServer(SaslServer):
    """RFC 4616: one token ``[authzid] NUL authcid NUL passwd``. ``verify`` checks the
    password; it may take a while (PBKDF2 against a SCRAM credential) and runs in a worker
    thread under ``evaluate_async``, given what it needs read on the loop."""

    mechanism = "PLAIN"

    def __init__(self, verify: Callable[[str, str], bool],
                 prepare: Callable[[str], Callable[[str], bool] | None] | None = None) -> None:
        super().__init__()
        self._verify = verify
        # ``prepare(user)``: on the loop, a check of the password that may run in a thread
        # (or None: ``verify`` is quick enough for the loop).
        self._prepare = prepare

    async def evaluate_async(self, token: bytes) -> bytes:
        user, password = self._parse(token)
        check = self._prepare(user) if self._prepare is not None else None
        ok = await asyncio.to_thread(check, password) if check is not None else self._verify(user, password)
        return self._finish(user, ok)

    def evaluate(self, token: bytes) -> bytes:
        user, password = self._parse(token)
        return self._finish(user, self._verify(user, password))

    def _finish(self, user: str, ok: bool) -> bytes:
        if not ok:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.user = user
        self.complete = True
        return b""

    def _parse(self, token: bytes) -> tuple[str, str]:
        if self.complete:
            raise AuthenticationFailed("Authentication failed: PLAIN takes one message")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization "
                                       "id that is different from username")
        return user, password


_MADE_UP_SALT_KEY = secrets.token_bytes(32)


def _made_up_salt(mechanism: str, user: str) -> bytes:
    return hmac.new(_MADE_UP_SALT_KEY, f"{mechanism}\0{user}".encode(), "sha256").digest()


class ScramServer(SaslServer):
    """RFC 5802 server (Kafka's ScramSaslServer): client-first -> server-first,
    client-final -> server-final. An unknown user is answered with a made-up salt, the
    same for the same name every time (an HMAC of it under this process's secret), and
    fails at the proof, so the exchange does not tell which users exist (a fresh random
    salt per attempt would: a real user's stays the same). Credentials below Kafka's
    minimum of 4096 iterations are refused, as Kafka's ScramSaslServer refuses them."""

    def __init__(self, mechanism: str, lookup: Callable[[str], scram.ScramCredential | None]) -> None:
        super().__init__()
        self.mechanism = mechanism
        self._lookup = lookup
        self._credential: scram.ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._user = ""
        self._state = 0

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._state == 0:
                return self._first(token)
            if self._state == 1:
                return self._final(token)
        except scram.ScramError as e:
            self._state = 2
            raise AuthenticationFailed(f"Authentication failed: {e}") from None
        raise AuthenticationFailed("Authentication failed: the SCRAM exchange is over")

    def _first(self, token: bytes) -> bytes:
        first = scram.parse_client_first(token)
        if first.extensions.get("tokenauth", "false").lower() == "true":
            raise scram.ScramError("delegation tokens are not supported")
        self._user = first.user
        self._credential = self._lookup(first.user)
        if self._credential is not None and self._credential.iterations < scram.MIN_ITERATIONS:
            raise scram.ScramError(f"iterations {self._credential.iterations} is less than the minimum "
                                   f"{scram.MIN_ITERATIONS} for {self.mechanism}")
        salt, iterations = ((self._credential.salt, self._credential.iterations)
                            if self._credential is not None
                            else (_made_up_salt(self.mechanism, first.user), scram.DEFAULT_ITERATIONS))
        self._nonce = first.nonce + scram.new_nonce()
        self._client_first_bare = first.bare
        self._server_first = scram.server_first(self._nonce, salt, iterations)
        self._state = 1
        return self._server_first.encode()

    def _final(self, token: bytes) -> bytes:
        self._state = 2
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise scram.ScramError("the client-final-message is not UTF-8") from None
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise scram.ScramError("the client-final-message has no proof")
        fields = scram.parse_attributes(without_proof)
        if fields.get("c") != "biws":
            raise scram.ScramError("invalid channel binding")
        # Kafka checks that the nonce ends with the server's (librdkafka before 2.1 sends
        # the client nonce twice); the proof covers the nonce as sent either way.
        if not fields.get("r", "").endswith(self._nonce):
            raise scram.ScramError("invalid nonce")
        proof = scram.b64decode(proof_part)
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        if credential is None or not scram.verify_proof(self.mechanism, credential, auth_message, proof):
            raise AuthenticationFailed(
                f"Authentication failed during authentication due to invalid credentials with "
                f"SASL mechanism {self.mechanism}")
        self.user = self._user
        self.complete = True
        signature = scram.server_signature(self.mechanism, credential.server_key, auth_message)
        return f"v={base64.b64encode(signature).decode()}".encode()


def scram_password_check(credentials: ScramCredentials, user: str) -> Callable[[str], bool] | None:
    """A check of a password against the user's stored SCRAM credential (either mechanism),
    pure (it may run in a thread); None when the user has none."""
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        cred = credentials.get(user, mechanism)
        if cred is not None:
            def check(password: str, mechanism: str = mechanism,
                      cred: scram.ScramCredential = cred) -> bool:
                computed = scram.new_credential(mechanism, password, cred.iterations, cred.salt)
                return hmac.compare_digest(computed.stored_key, cred.stored_key)
            return check
    return None


def _decoy_check(user: str) -> Callable[[str], bool]:
    """A check that costs what a real SCRAM credential's does and always fails."""
    def check(password: str) -> bool:
        scram.new_credential("SCRAM-SHA-512", password, scram.DEFAULT_ITERATIONS,
                             _made_up_salt("SCRAM-SHA-512", user))
        return False
    return check


def plain_matches_scram(credentials: ScramCredentials, user: str, password: str) -> bool:
    """Whether ``password`` is the one of the user's stored SCRAM credential (either mechanism);
    a user without one costs the same PBKDF2 (``_decoy_check``)."""
    return (scram_password_check(credentials, user) or _decoy_check(user))(password)


@dataclass(frozen=True, slots=True)
class SaslSettings:
    """The broker's SASL settings, read once at startup: ``enabled`` and ``reauth_ms``
    (sasl.enabled.mechanisms, connections.max.reauth.ms) unless a listener has its own
    (``listener.name.<l>.…``, in ``per_listener``)."""

    enabled: tuple[str, ...]
    reauth_ms: int
    # listener -> PLAIN users of its JAAS config (name -> password)
    plain_users: dict[str, dict[str, str]]
    per_listener: dict[str, tuple[tuple[str, ...], int]] = field(default_factory=dict)

    def mechanisms(self, listener: str) -> tuple[str, ...]:
        return self.per_listener[listener][0] if listener in self.per_listener else self.enabled

    def reauth(self, listener: str) -> int:
        return self.per_listener[listener][1] if listener in self.per_listener else self.reauth_ms

    def __repr__(self) -> str:  # never show passwords
        return f"SaslSettings(enabled={self.enabled}, reauth_ms={self.reauth_ms})"


def sasl_settings(config: BrokerConfig, sasl_listeners: list[str]) -> SaslSettings:
    """Validate the SASL configs of the SASL listeners; ConfigError says what to fix."""
    enabled = tuple(str(m).upper() for m in config["sasl.enabled.mechanisms"])
    per_listener: dict[str, tuple[tuple[str, ...], int]] = {}
    for listener in sasl_listeners:
        mechanisms = tuple(str(m).upper() for m in listener_config(config, listener, "sasl.enabled.mechanisms"))
        unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported or not mechanisms:
            raise ConfigError(
                f"sasl.enabled.mechanisms={','.join(mechanisms)} (listener {listener}): dmq supports "
                f"{', '.join(SUPPORTED_MECHANISMS)}; set sasl.enabled.mechanisms to those you use")
        per_listener[listener] = (mechanisms,
                                  int(listener_config(config, listener, "connections.max.reauth.ms")))
    plain: dict[str, dict[str, str]] = {}
    for listener in sasl_listeners:
        text = config.explicit.get(f"listener.name.{listener.lower()}.plain.sasl.jaas.config")
        users: dict[str, str] = {}
        if text:
            try:
                users = parse_jaas(text).plain_users()
            except JaasError as e:
                raise ConfigError(f"listener.name.{listener.lower()}.plain.sasl.jaas.config: {e}") from None
        plain[listener] = users
    return SaslSettings(enabled, int(config["connections.max.reauth.ms"]), plain, per_listener)


class Authenticator:
    """Creates the mechanism servers of a broker's SASL listeners."""

    def __init__(self, settings: SaslSettings, credentials: ScramCredentials) -> None:
        self.settings = settings
        self.credentials = credentials

    def server(self, listener: str, mechanism: str) -> SaslServer:
        if mechanism == "PLAIN":
            users = self.settings.plain_users.get(listener, {})

            def verify(user: str, password: str) -> bool:
                expected = users.get(user)
                if expected is not None:
                    return hmac.compare_digest(expected.encode(), password.encode())
                return plain_matches_scram(self.credentials, user, password)

            def prepare(user: str) -> Callable[[str], bool] | None:
                # JAAS users are compared on the loop; a SCRAM credential's PBKDF2 is not.
                # A user without one gets the same PBKDF2 against a made-up credential, so
                # the time to fail does not tell which users exist.
                return None if user in users else (
                    scram_password_check(self.credentials, user) or _decoy_check(user))
            return PlainServer(verify, prepare)
        return ScramServer(mechanism, lambda user: self.credentials.get(user, mechanism))


# Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS.
MIN_REAUTH_INTERVAL_MS = 1000


class ConnectionAuth:
    """One connection's authentication state.

    Invariants: ``principal`` changes only when an exchange completes (never on a
    re-authentication: a different user fails it); ``authenticated`` is False only on a
    SASL listener before the first exchange completed; after a failure
    ``close_after_response`` is set and the connection is closed once the answer is sent.
    Called by the broker's dispatcher and the SASL handlers only, on the event loop."""

    def __init__(self, listener: str, security_protocol: str, authenticator: Authenticator | None,
                 principal: str = ANONYMOUS) -> None:
        self.listener = listener
        self.security_protocol = security_protocol
        self.authenticator = authenticator
        self.sasl = security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        self.principal = principal
        self.authenticated = not self.sasl
        self.mechanism: str | None = None  # of the first successful exchange
        self.server: SaslServer | None = None
        self.expires_ms: int | None = None  # monotonic ms when the session ends
        self.close_after_response = False
        self.authentications = 0  # completed exchanges: more than one is a re-authentication
        # After SaslHandshake v0: the exchange's tokens come as raw frames (no request header).
        self.raw = False
        self.checking = False  # a token's check is running (off the loop for PLAIN)
        self.last_reauth_ms: int | None = None  # when the last re-authentication began

    def allows(self, api_key: int, now_ms: int) -> bool:
        """Whether a request of ``api_key`` may be served now (else: close the connection).
        Always True off SASL listeners (the dispatcher skips the call there)."""
        if api_key in PRE_AUTH_APIS:
            return True
        if not self.authenticated or self.server is not None:
            return False
        return self.expires_ms is None or now_ms < self.expires_ms

    def handshake(self, mechanism: str, now_ms: int) -> tuple[str, list[str]]:
        """SaslHandshake: ("none"|"unsupported_sasl_mechanism"|"illegal_sasl_state",
        the enabled mechanisms). On an authenticated connection it begins a
        re-authentication only when sessions expire (connections.max.reauth.ms above 0)
        and the last one began a second ago or more, as Kafka's
        KafkaChannel.maybeBeginServerReauthentication; otherwise it is answered
        ILLEGAL_SASL_STATE and the connection stays as it is (Kafka's KafkaApis answer)."""
        if not self.sasl or self.authenticator is None:
            return "illegal_sasl_state", []
        enabled = list(self.authenticator.settings.mechanisms(self.listener))
        if self.server is not None:
            self.close_after_response = True
            return "illegal_sasl_state", enabled
        if self.authenticated:
            if self.expires_ms is None or (self.last_reauth_ms is not None
                                           and now_ms - self.last_reauth_ms < MIN_REAUTH_INTERVAL_MS):
                return "illegal_sasl_state", []
            self.last_reauth_ms = now_ms
        if mechanism not in enabled:
            self.close_after_response = True
            return "unsupported_sasl_mechanism", enabled
        if self.authenticated and mechanism != self.mechanism:
            # KIP-368: a re-authentication keeps its mechanism.
            self.close_after_response = True
            return "unsupported_sasl_mechanism", [self.mechanism or mechanism]
        self.server = self.authenticator.server(self.listener, mechanism)
        return "none", enabled

    async def authenticate(self, token: bytes, now_ms: int) -> tuple[str, str | None, bytes, int]:
        """SaslAuthenticate: (error name, message, server token, session lifetime ms). A
        second token while one is being checked is ILLEGAL_SASL_STATE."""
        server = self.server
        if server is None:
            self.close_after_response = True
            return "illegal_sasl_state", ("SaslAuthenticate without a SaslHandshake" if not self.authenticated
                                          else "Already authenticated"), b"", 0
        if self.checking:
            self.close_after_response = True
            return "illegal_sasl_state", "A SASL token is already being checked", b"", 0
        self.checking = True
        try:
            answer = await server.evaluate_async(token)
        except AuthenticationFailed as e:
            self.server = None
            self.raw = False
            self.close_after_response = True
            return "sasl_authentication_failed", str(e), b"", 0
        finally:
            self.checking = False
        if not server.complete:
            return "none", None, answer, 0
        self.server = None
        self.raw = False
        principal = f"User:{server.user}"
        if self.authenticated and principal != self.principal:
            self.close_after_response = True
            return ("sasl_authentication_failed",
                    "Cannot change principals during re-authentication", b"", 0)
        self.principal = principal
        self.mechanism = server.mechanism
        self.authenticated = True
        self.authentications += 1
        reauth = self.authenticator.settings.reauth(self.listener) if self.authenticator else 0
        self.expires_ms = now_ms + reauth if reauth > 0 else None
        return "none", None, answer, reauth

