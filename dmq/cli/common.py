"""Shared CLI helpers: the bootstrap and ``--command-config`` options, key=value parsing,
Kafka clients that stay quiet unless asked (``dmq --verbose`` / ``--debug``), clear failures.

``--command-config FILE`` (or ``DMQ_COMMAND_CONFIG``) is Kafka's client properties file
(docs/security.md): its option callback reads it once into ``COMMAND_CONFIG``, which
``client_config`` (confluent-kafka clients) and ``wire_client``/``client_security`` (dmq's
own wire clients) apply, so a command only declares the option."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import struct
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, TypeVar

import typer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from rich.console import Console
from rich.table import Table

from dmq.client.security import AuthenticationError, ClientSecurity, ClientSettings, client_settings
from dmq.config import ConfigError, parse_properties

if TYPE_CHECKING:
    from dmq.client.wire import WireClient

T = TypeVar("T")

Bootstrap = Annotated[str, typer.Option(
    "--bootstrap-server", "-b", envvar="DMQ_BOOTSTRAP_SERVER", metavar="HOST:PORT",
    help="broker(s) to connect to, comma-separated")]


@dataclass
class CommandConfig:
    """Set by the ``--command-config`` option's callback, before the command runs."""

    settings: ClientSettings = ClientSettings()


COMMAND_CONFIG = CommandConfig()


def read_command_config(path: str) -> ClientSettings:
    """The client settings of the properties file at ``path``; a file that cannot be read
    or a wrong value is one line and exit 2."""
    try:
        with open(path) as f:
            props = parse_properties(f.read())
    except OSError as e:
        fail(f"cannot read --command-config {path}: {(e.strerror or str(e)).lower()}", 2)
    except UnicodeDecodeError:
        fail(f"--command-config {path}: not a text file", 2)
    except ConfigError as e:
        fail(f"--command-config {path}: {e}", 2)
    try:
        settings = client_settings(props)
    except ConfigError as e:
        fail(f"--command-config {path}: {e}", 2)
    unknown = _unknown_to_librdkafka(settings)
    if unknown:
        fail(f"--command-config {path}: {unknown}", 2)
    return settings


def _unknown_to_librdkafka(settings: ClientSettings) -> str:
    """librdkafka's complaint about an entry it does not know ("" when it knows them all):
    a client made without bootstrap servers checks the names and connects nowhere."""
    from confluent_kafka import Producer

    try:
        Producer({"log_level": 0, **settings.librdkafka})
    except (KafkaException, ValueError, TypeError) as e:
        return kafka_error_text(e)
    return ""


def use_command_config(path: str | None) -> str | None:
    """The option's callback: read the file (or forget an earlier one)."""
    path = path or None
    COMMAND_CONFIG.settings = read_command_config(path) if path else ClientSettings()
    return path


_CLIENT_FILE_HELP = (
    "client security settings for a TLS or SASL listener, Kafka's client properties file "
    "(security.protocol, sasl.mechanism, sasl.username/sasl.password or sasl.jaas.config, "
    "ssl.ca.location or ssl.truststore.location ...) [env: DMQ_COMMAND_CONFIG]")
CommandConfigOption = Annotated[str | None, typer.Option(
    "--command-config", envvar="DMQ_COMMAND_CONFIG", metavar="FILE", callback=use_command_config,
    show_envvar=False,
    help=_CLIENT_FILE_HELP)]


# ``dmq produce``/``consume`` also take kafka-console-producer.sh's and -consumer.sh's names.
ProducerConfigOption = Annotated[str | None, typer.Option(
    "--command-config", "--producer.config", envvar="DMQ_COMMAND_CONFIG", metavar="FILE",
    callback=use_command_config, show_envvar=False, help=_CLIENT_FILE_HELP)]
ConsumerConfigOption = Annotated[str | None, typer.Option(
    "--command-config", "--consumer.config", envvar="DMQ_COMMAND_CONFIG", metavar="FILE",
    callback=use_command_config, show_envvar=False, help=_CLIENT_FILE_HELP)]


def client_security() -> ClientSecurity | None:
    """The security of dmq's wire clients from ``--command-config`` (None: PLAINTEXT)."""
    return COMMAND_CONFIG.settings.security


@dataclass
class Verbosity:
    """Set by the root callback from ``dmq --verbose`` / ``dmq --debug``."""

    verbose: bool = False
    debug: bool = False


VERBOSITY = Verbosity()

# librdkafka debug contexts for ``dmq --debug``: connections, metadata, requests, records.
DEBUG_CONTEXTS = "broker,topic,metadata,protocol,msg,fetch,consumer,cgrp,admin"
# How long ensure_reachable waits for each bootstrap address to accept a connection.
REACH_TIMEOUT = 3.0

Acks = Literal["0", "1", "all", "-1"]
Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]


def fail(message: str, code: int = 1) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def resolve_idempotence(acks: str, idempotence: bool | None) -> bool:
    """As Kafka's producer (KIP-679): idempotent by default when every in-sync replica
    acknowledges, not otherwise; asked for explicitly with fewer acks, a usage error."""
    all_acks = acks in ("all", "-1")
    if idempotence is None:
        return all_acks
    if idempotence and not all_acks:
        fail(f"--idempotence needs --acks all (got --acks {acks}): a retried batch is only "
             f"deduplicated when every in-sync replica has it", 2)
    return idempotence


def parse_pairs(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"expected key=value, got {item!r}", 2)
        out[key.strip()] = value
    return out


def stdout_is_tty() -> bool:
    return os.isatty(sys.stdout.fileno())


def make_console() -> Console:
    """A console whose tables never truncate: wide when output goes to a pipe or file."""
    if stdout_is_tty():
        return Console()
    return Console(width=max(shutil.get_terminal_size((200, 24)).columns, 200))


def make_table(*headers: str, numbers: tuple[str, ...] = (), **kwargs: Any) -> Table:
    """A table that fits an 80-column terminal by wrapping, never by cutting: text columns
    fold long topic names and ids onto more lines instead of ending them in "…"; number
    columns (the headers in ``numbers``) are right-aligned and never wrapped, so their
    headers are short (two lines where needed: "current\noffset")."""
    table = Table(**kwargs)
    for header in headers:
        if header in numbers:
            table.add_column(header, justify="right", no_wrap=True)
        else:
            table.add_column(header, overflow="fold")
    return table


ADMIN_TIMEOUT = 30


def format_bytes(n: int) -> str:
    """A size as people read it: ``812 B``, ``97.7 KiB``, ``1.2 GiB`` (binary units, as du -h)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def kafka_error_text(e: BaseException | KafkaError) -> str:
    """The human text of a client error: a KafkaError's ``str()``, never its
    ``KafkaError{code=...}`` repr."""
    if isinstance(e, KafkaError):
        return str(e.str())
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        return str(e.args[0].str())
    if isinstance(e, TimeoutError):
        return "timed out"
    return str(e) or type(e).__name__


def client_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Config for a confluent-kafka client: librdkafka's own log lines only with
    ``dmq --verbose`` (and its debug traces with ``dmq --debug``). Kafka config names
    have dots, so pass them as ``**{"group.id": ...}``."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
    if not (VERBOSITY.verbose or VERBOSITY.debug):
        conf["log_level"] = 0
    if VERBOSITY.debug:
        conf["debug"] = DEBUG_CONTEXTS
    conf.update(COMMAND_CONFIG.settings.librdkafka)
    conf.update(extra)
    return conf


def bootstrap_addresses(bootstrap: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` (a ``PLAINTEXT://`` prefix allowed, port 9092 if left
    out) as (host, port) pairs; a malformed list is a usage error (exit 2)."""
    out: list[tuple[str, int]] = []
    for item in bootstrap.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "9092"
        if not port.isdigit() or not 0 < int(port) <= 65535:
            fail(f"--bootstrap-server expects HOST:PORT[,HOST:PORT...], got {bootstrap!r}", 2)
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        fail("--bootstrap-server is empty: pass HOST:PORT", 2)
    return out


def reach_reason(e: OSError, host: str) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, TimeoutError):
        return f"no answer within {REACH_TIMEOUT:g} s"
    if isinstance(e, socket.gaierror):
        return f"unknown host {host}"
    return (e.strerror or str(e) or type(e).__name__).lower()


def unreachable(bootstrap: str) -> list[str]:
    """Why no bootstrap address accepts a TCP connection; empty once one does."""
    reasons: list[str] = []
    for host, port in bootstrap_addresses(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=REACH_TIMEOUT):
                return []
        except OSError as e:
            reason = reach_reason(e, host)
            if reason not in reasons:
                reasons.append(reason)
    return reasons


def ensure_reachable(bootstrap: str) -> None:
    """Return once one bootstrap address accepts a TCP connection and answers; otherwise
    fail with one line (exit 1) rather than let the client retry and log for half a minute.
    With TLS or SASL from ``--command-config`` the connection also does the handshake and
    logs in (dmq's wire client), so a wrong password or certificate is one line here too:
    librdkafka only logs it and retries until its request times out. Without, a broker that
    closes the connection at a plaintext Metadata request (a TLS or SASL listener) is one
    line saying to pass --command-config."""
    security = client_security()
    if security is not None:
        connect_first(bootstrap, lambda host, port: _log_in(host, port, security))
        return
    connect_first(bootstrap, _ask_plaintext)


# The plaintext probe: Metadata v4 (Kafka 0.11 to 4.x all answer it) for no topics and no
# auto-creation, correlation id 1, client id "dmq".
_PROBE_CORRELATION = 1
_PROBE = (lambda body: struct.pack(">i", len(body)) + body)(
    struct.pack(">hhih", 3, 4, _PROBE_CORRELATION, 3) + b"dmq" + struct.pack(">ib", 0, 0))


def _ask_plaintext(host: str, port: int) -> None:
    """Connect, send ``_PROBE`` and wait (at most REACH_TIMEOUT) for its answer's first
    bytes: ConnectionError("connection closed by the broker") when the broker closes the
    connection or answers with anything else. A slow answer counts as an answer."""
    with socket.create_connection((host, port), timeout=REACH_TIMEOUT) as sock:
        try:
            sock.sendall(_PROBE)
            head = b""
            while len(head) < 8:
                chunk = sock.recv(8 - len(head))
                if not chunk:
                    break
                head += chunk
        except TimeoutError:
            return
        except ConnectionResetError:
            head = b""
        if len(head) < 8 or struct.unpack(">i", head[4:8])[0] != _PROBE_CORRELATION:
            raise ConnectionError("connection closed by the broker")


def _log_in(host: str, port: int, security: ClientSecurity) -> None:
    """Connect, log in and send ``_PROBE``: a TLS 1.3 server refuses a client certificate
    only after the client's side of the handshake, at the first read, and a SASL listener
    given no SASL closes the connection at the Metadata request."""
    from dmq.client.wire import WireClient  # kio: imported by the commands that use it

    with WireClient(host, port, client_id="dmq-login-check", timeout=ANSWER_TIMEOUT, security=security) as c:
        try:
            c.send_raw(_PROBE)
            answered = struct.unpack_from(">i", c.recv_frame())[0] == _PROBE_CORRELATION
        except (ConnectionError, struct.error):
            answered = False
        if not answered:
            after = "the TLS handshake" if security.mechanism is None else "logging in"
            fail(f"{host}:{port} closed the connection after {after}{security_hint()}")


def cannot_reach(bootstrap: str, reasons: list[str]) -> NoReturn:
    fail(f"cannot reach {bootstrap}: {'; '.join(reasons)}; is `dmq server` running? "
         f"(pass --bootstrap-server HOST:PORT)")


def connect_first(bootstrap: str, connect: Callable[[str, int], T]) -> T:
    """``connect(host, port)`` to the first bootstrap address that answers, or fail with
    the one line of ensure_reachable; a refused login or TLS handshake is its own line."""
    reasons: list[str] = []
    for host, port in bootstrap_addresses(bootstrap):
        try:
            return connect(host, port)
        except AuthenticationError as e:
            fail(f"authentication failed at {host}:{port}: {e} (check --command-config)")
        except ssl.SSLError as e:
            fail(f"TLS handshake with {host}:{port} failed: {tls_reason(e)} (check --command-config)")
        except ConnectionError as e:
            if type(e) is not ConnectionError:  # refused, reset: not there
                reason = reach_reason(e, host)
                if reason not in reasons:
                    reasons.append(reason)
                continue
            # It accepted the connection, then closed it: it wants another protocol.
            fail(f"{host}:{port} closed the connection{security_hint()}")
        except OSError as e:
            reason = reach_reason(e, host)
            if reason not in reasons:
                reasons.append(reason)
    cannot_reach(bootstrap, reasons)


def tls_reason(e: ssl.SSLError) -> str:
    """"certificate verify failed: ..." rather than ssl's bracketed codes."""
    if isinstance(e, ssl.SSLCertVerificationError) and e.verify_message:
        return f"certificate verify failed: {e.verify_message}"
    return str(e.reason or e.strerror or e).lower().replace("_", " ")


def security_hint() -> str:
    """What to try when a broker closed the connection and no security was given."""
    security = COMMAND_CONFIG.settings.security
    if security is None:
        return " (a TLS or SASL listener? pass --command-config FILE)"
    if security.ssl_context is not None:
        return (" (does the listener take --command-config's settings: its protocol, its CA, "
                "the client certificate?)")
    return " (does the listener take --command-config's settings?)"


# Seconds dmq's own wire client waits for a broker's answer.
ANSWER_TIMEOUT = 10.0


@contextlib.contextmanager
def wire_client(bootstrap: str, client_id: str) -> Iterator[WireClient]:
    """dmq's wire client (for requests confluent-kafka cannot send) connected to the first
    bootstrap address that answers; a broker that stops answering or drops the connection
    is one line and exit 1, not a traceback."""
    from dmq.client.wire import WireClient  # kio: imported by the commands that use it

    security = client_security()
    c = connect_first(bootstrap, lambda host, port: WireClient(
        host, port, client_id=client_id, timeout=ANSWER_TIMEOUT, security=security))
    try:
        yield c
    except TimeoutError:
        fail(f"{bootstrap} did not answer within {c.sock.gettimeout():g} s; is the broker overloaded "
             f"or stopped?")
    except OSError as e:  # ConnectionError: reset or closed by the broker
        fail(f"lost the connection to {bootstrap}: {(e.strerror or str(e) or type(e).__name__).lower()}"
             f"{security_hint()}")
    finally:
        c.close()


def list_topics(client: Any, timeout: float = ADMIN_TIMEOUT) -> Any:
    """``client.list_topics()`` in one-second slices up to ``timeout``: librdkafka's call
    blocks in C, where Python cannot act on Ctrl-C until it returns."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
        except KafkaException:
            if time.monotonic() >= deadline:
                raise


def admin_client(bootstrap: str) -> AdminClient:
    """An AdminClient for a broker that answers; callers keep a reference until its
    futures resolve (a collected client cancels them)."""
    ensure_reachable(bootstrap)
    return AdminClient(client_config(bootstrap, **{"socket.timeout.ms": 10000}))


def result(fut: Any, what: str) -> Any:
    """Wait for an admin future; turn any failure into a clear error and exit 1."""
    try:
        return fut.result(ADMIN_TIMEOUT)
    except Exception as e:  # noqa: BLE001 - Kafka errors, transport errors and timeouts
        fail(f"{what}: {kafka_error_text(e)}")


def exit_on_broken_pipe() -> NoReturn:
    """stdout's reader went away (``dmq consume T | head``): stop quietly with exit 0, as
    a filter does, and keep Python from complaining when it flushes stdout at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    raise SystemExit(0)
