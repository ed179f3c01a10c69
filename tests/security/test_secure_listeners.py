"""Listeners with TLS and SASL against a real broker and real clients.

One broker with four listeners (PLAINTEXT, SSL with ssl.client.auth=required, SASL_SSL,
SASL_PLAINTEXT); SCRAM users are added through the PLAINTEXT listener with
AlterUserScramCredentials, PLAIN's users come from the listener's JAAS config.
confluent-kafka, kafka-python, aiokafka and kcat produce and consume over SASL_SSL with
SCRAM-SHA-256/512 and over SASL_PLAINTEXT with PLAIN; bad credentials, a plaintext
client on a TLS port, expired and foreign certificates are refused, and the broker
keeps serving good clients.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from support.certs import KEY_PASSWORD
from support.security import (
    PASSWORD,
    USER,
    SecureBroker,
    plain_conf,
    scram_conf,
    start_secure_broker,
)

from dmq.client.security import AuthenticationError, ClientSecurity, client_ssl_context
from dmq.client.wire import WireClient


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("secure"))
    yield broker
    broker.proc.close()


def confluent_round_trip(conf: dict[str, str], topic: str, n: int = 20) -> list[bytes]:
    errors: list[str] = []
    producer = Producer({**conf, "error_cb": lambda e: errors.append(str(e))})
    for i in range(n):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0, errors
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            got.append(msg.value())
    consumer.close()
    return got


def broker_ports(conf: dict[str, str]) -> set[int]:
    md = AdminClient(conf).list_topics(timeout=20)
    return {b.port for b in md.brokers.values()}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_over_sasl_ssl_with_scram(secure: SecureBroker, topic_name: str,
                                                   mechanism: str) -> None:
    conf = scram_conf(secure, mechanism)
    # Metadata gives the endpoint of the listener the client came in on.
    assert broker_ports(conf) == {secure.ports["SASL_SSL"]}
    assert broker_ports({"bootstrap.servers": secure.proc.bootstrap}) == {secure.ports["PLAINTEXT"]}
    assert confluent_round_trip(conf, topic_name) == [f"v{i}".encode() for i in range(20)]


def test_confluent_kafka_over_sasl_plaintext_with_plain(secure: SecureBroker, topic_name: str) -> None:
    conf = plain_conf(secure)  # alice: the listener's JAAS user_alice
    assert broker_ports(conf) == {secure.ports["SASL_PLAINTEXT"]}
    assert confluent_round_trip(conf, topic_name) == [f"v{i}".encode() for i in range(20)]
    # bob has no JAAS entry: PLAIN checks his password against his SCRAM credential.
    assert confluent_round_trip(plain_conf(secure, USER, PASSWORD), topic_name + "-bob", 3) == \
        [b"v0", b"v1", b"v2"]


def test_kafka_python_over_sasl_ssl_and_sasl_plaintext(secure: SecureBroker, topic_name: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    configs = [
        dict(bootstrap_servers=secure.address("SASL_SSL"), security_protocol="SASL_SSL",
             sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=USER, sasl_plain_password=PASSWORD,
             ssl_cafile=str(secure.pki.ca)),
        dict(bootstrap_servers=secure.address("SASL_SSL"), security_protocol="SASL_SSL",
             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=USER, sasl_plain_password=PASSWORD,
             ssl_cafile=str(secure.pki.ca)),
        dict(bootstrap_servers=secure.address("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
             sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="alice-secret"),
    ]
    for i, conf in enumerate(configs):
        topic = f"{topic_name}-{i}"
        producer = KafkaProducer(**conf)
        for j in range(10):
            producer.send(topic, f"kp{j}".encode())
        producer.flush(30)
        producer.close()
        consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000,
                                 group_id=f"kp-{topic}", **conf)
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) == 10:
                break
        consumer.close()
        assert values[:10] == [f"kp{j}".encode() for j in range(10)], conf["sasl_mechanism"]


def test_aiokafka_over_sasl_ssl_and_sasl_plaintext(secure: SecureBroker, topic_name: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def run() -> None:
        configs = [
            dict(bootstrap_servers=secure.address("SASL_SSL"), security_protocol="SASL_SSL",
                 sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=USER,
                 sasl_plain_password=PASSWORD, ssl_context=create_ssl_context(cafile=str(secure.pki.ca))),
            dict(bootstrap_servers=secure.address("SASL_SSL"), security_protocol="SASL_SSL",
                 sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=USER,
                 sasl_plain_password=PASSWORD, ssl_context=create_ssl_context(cafile=str(secure.pki.ca))),
            dict(bootstrap_servers=secure.address("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                 sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="alice-secret"),
        ]
        for i, conf in enumerate(configs):
            topic = f"{topic_name}-{i}"
            producer = AIOKafkaProducer(**conf)
            await producer.start()
            try:
                for j in range(10):
                    await producer.send_and_wait(topic, f"aio{j}".encode())
            finally:
                await producer.stop()
            consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", group_id=f"aio-{topic}", **conf)
            await consumer.start()
            try:
                got: list[bytes] = []
                while len(got) < 10:
                    batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                    for records in batch.values():
                        got.extend(r.value for r in records)
            finally:
                await consumer.stop()
            assert got == [f"aio{j}".encode() for j in range(10)], conf["sasl_mechanism"]

    asyncio.run(run())


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_over_sasl_ssl_and_sasl_plaintext(secure: SecureBroker, topic_name: str) -> None:
    settings = [
        ["-b", secure.address("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
         "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", f"sasl.username={USER}",
         "-X", f"sasl.password={PASSWORD}", "-X", f"ssl.ca.location={secure.pki.ca}"],
        ["-b", secure.address("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
         "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", f"sasl.username={USER}",
         "-X", f"sasl.password={PASSWORD}", "-X", f"ssl.ca.location={secure.pki.ca}"],
        ["-b", secure.address("SASL_PLAINTEXT"), "-X", "security.protocol=SASL_PLAINTEXT",
         "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"],
    ]
    for i, args in enumerate(settings):
        topic = f"{topic_name}-{i}"
        subprocess.run(["kcat", "-P", *args, "-t", topic], input=b"k1\nk2\nk3\n", check=True,
                       capture_output=True, timeout=60)
        out = subprocess.run(["kcat", "-C", *args, "-t", topic, "-e", "-q"], check=True,
                             capture_output=True, timeout=60).stdout.decode()
        assert out.split() == ["k1", "k2", "k3"], args


def raw_sasl(secure: SecureBroker, listener: str, mechanism: str, token: bytes) -> tuple[int, str | None, bool]:
    """(error code, message, whether the broker then closed the connection) of one
    SaslHandshake + SaslAuthenticate with ``token``."""
    security = ClientSecurity(client_ssl_context(str(secure.pki.ca))) if listener == "SASL_SSL" else None
    host, port = secure.address(listener).split(":")
    with WireClient(host, int(port), timeout=10, security=security) as c:
        assert c.request(SaslHandshakeRequest(mechanism=mechanism)).error_code == 0
        answer = c.request(SaslAuthenticateRequest(auth_bytes=token))
        try:
            c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
            closed = False
        except (ConnectionError, OSError):
            closed = True
    return int(answer.error_code), answer.error_message, closed


def assert_healthy(secure: SecureBroker) -> None:
    assert secure.proc.alive()
    assert broker_ports(scram_conf(secure, "SCRAM-SHA-256")) == {secure.ports["SASL_SSL"]}


def test_wrong_credentials_get_sasl_authentication_failed_and_are_disconnected(secure: SecureBroker) -> None:
    code, message, closed = raw_sasl(secure, "SASL_PLAINTEXT", "PLAIN", b"\0alice\0wrong")
    assert (code, closed) == (58, True)
    assert message == "Authentication failed: Invalid username or password"
    code, message, closed = raw_sasl(secure, "SASL_PLAINTEXT", "PLAIN", b"\0nobody\0x")
    assert (code, closed) == (58, True)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        security = ClientSecurity(client_ssl_context(str(secure.pki.ca)), mechanism, USER, "wrong")
        with pytest.raises(AuthenticationError, match="invalid credentials with SASL mechanism"):
            WireClient("127.0.0.1", secure.ports["SASL_SSL"], security=security)
        good = ClientSecurity(client_ssl_context(str(secure.pki.ca)), mechanism, USER, PASSWORD)
        with WireClient("127.0.0.1", secure.ports["SASL_SSL"], security=good) as c:
            md = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False))
            assert [b.port for b in md.brokers] == [secure.ports["SASL_SSL"]]
    # A real client is told so too.
    told: list[str] = []
    admin = AdminClient({**scram_conf(secure, "SCRAM-SHA-256", "wrong"), "log_level": 0,
                         "error_cb": lambda e: told.append(str(e))})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(1)  # error_cb is served by poll
    assert any("Authentication failed during authentication due to invalid credentials with SASL "
               "mechanism SCRAM-SHA-256" in e for e in told), told
    assert_healthy(secure)


def test_only_sasl_apis_before_authentication(secure: SecureBroker) -> None:
    host, port = secure.address("SASL_PLAINTEXT").split(":")
    with WireClient(host, int(port), timeout=10) as c:
        versions = c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert {17, 36, 50, 51} <= {k.api_key for k in versions.api_keys}
        with pytest.raises((ConnectionError, OSError)):
            c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False))
    # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones.
    with WireClient(host, int(port), timeout=10) as c:
        answer = c.request(SaslHandshakeRequest(mechanism="GSSAPI"))
        assert int(answer.error_code) == 33
        assert list(answer.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    # SaslHandshake on a PLAINTEXT listener: ILLEGAL_SASL_STATE, as Kafka.
    with WireClient("127.0.0.1", secure.ports["PLAINTEXT"], timeout=10) as c:
        assert int(c.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code) == 34
    assert_healthy(secure)


def _tls_request(port: int, ctx: ssl.SSLContext) -> None:
    """Connect with ``ctx`` and ask ApiVersions; raises when the broker refuses."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            body = bytes.fromhex("0012000000000001") + b"\x00\x01t"
            tls.sendall(len(body).to_bytes(4, "big") + body)
            size = tls.recv(4)
            if len(size) < 4:
                raise ConnectionError("closed by the broker")


def test_tls_refusals_leave_the_broker_healthy(secure: SecureBroker) -> None:
    ssl_port = secure.ports["SSL"]
    # A plaintext client on the TLS listener gets nothing back.
    with pytest.raises((ConnectionError, OSError)):
        with WireClient("127.0.0.1", ssl_port, timeout=5) as c:
            c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    # ssl.client.auth=required: a good client certificate is accepted...
    good = client_ssl_context(str(secure.pki.ca), str(secure.pki.client_keystore))
    _tls_request(ssl_port, good)
    # ...no certificate, an expired one and one of another CA are refused.
    nocert = client_ssl_context(str(secure.pki.ca))
    expired = client_ssl_context(str(secure.pki.ca))
    expired.load_cert_chain(str(secure.pki.expired_cert), str(secure.pki.expired_key))
    foreign = client_ssl_context(str(secure.pki.ca))
    foreign.load_cert_chain(str(secure.pki.other_cert), str(secure.pki.other_key))
    for ctx in (nocert, expired, foreign):
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            _tls_request(ssl_port, ctx)
    # A client that does not trust the broker's CA refuses the broker.
    with pytest.raises(ssl.SSLCertVerificationError):
        _tls_request(ssl_port, client_ssl_context(str(secure.pki.other_ca), str(secure.pki.client_keystore)))
    # librdkafka with the expired certificate fails; with the good one it works.
    base = {"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL",
            "ssl.ca.location": str(secure.pki.ca), "log_level": 0}
    with pytest.raises(KafkaException):
        AdminClient({**base, "ssl.certificate.location": str(secure.pki.expired_cert),
                     "ssl.key.location": str(secure.pki.expired_key)}).list_topics(timeout=5)
    md = AdminClient({**base, "ssl.certificate.location": str(secure.pki.client_cert),
                      "ssl.key.location": str(secure.pki.client_key)}).list_topics(timeout=20)
    assert {b.port for b in md.brokers.values()} == {ssl_port}
    assert_healthy(secure)


def test_passwords_are_not_logged(secure: SecureBroker) -> None:
    text = secure.proc.log_text()
    for secret in (PASSWORD, "alice-secret", KEY_PASSWORD):
        assert secret not in text


def test_admin_topic_over_sasl_ssl(secure: SecureBroker, topic_name: str) -> None:
    admin = AdminClient(scram_conf(secure, "SCRAM-SHA-512"))
    admin.create_topics([NewTopic(topic_name, 3, 1)])[topic_name].result(30)
    md = admin.list_topics(topic_name, timeout=20)
    assert len(md.topics[topic_name].partitions) == 3


def test_librdkafka_reauthenticates_and_expired_sessions_are_closed(tmp_path: Path, topic_name: str) -> None:
    """connections.max.reauth.ms=1500: librdkafka re-authenticates on its connections
    (KIP-368) and keeps producing; a client that does not is disconnected."""
    broker = start_secure_broker(tmp_path, **{"connections.max.reauth.ms": "1500"})
    try:
        conf = scram_conf(broker, "SCRAM-SHA-256")
        errors: list[str] = []
        producer = Producer({**conf, "error_cb": lambda e: errors.append(str(e))})
        delivered: list[bool] = []
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            producer.produce(topic_name, b"x", on_delivery=lambda err, msg: delivered.append(err is None))
            producer.poll(0.2)
        assert producer.flush(30) == 0
        assert delivered and all(delivered)
        assert "re-authenticated as User:bob (SCRAM-SHA-256)" in broker.proc.log_text()
        # dmq's own client told a lifetime, asking after it: closed.
        security = ClientSecurity(client_ssl_context(str(broker.pki.ca)), "SCRAM-SHA-512", USER, PASSWORD)
        with WireClient("127.0.0.1", broker.ports["SASL_SSL"], security=security) as c:
            assert c.session_lifetime_ms == 1500
            time.sleep(1.7)
            with pytest.raises((ConnectionError, OSError)):
                c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False))
        assert "after its SASL session expired" in broker.proc.log_text()
        assert broker.proc.alive()
    finally:
        broker.proc.close()


def test_every_sasl_api_version(secure: SecureBroker) -> None:
    """SaslHandshake and SaslAuthenticate at every advertised version, over SASL_PLAINTEXT
    with PLAIN (the sweep in tests/integration leaves them out: they need a SASL listener);
    after SaslHandshake v0 the tokens are raw frames, as in Kafka."""
    from dmq.handlers import supported_apis
    from dmq.protocol.codec import request_class

    apis = supported_apis()
    host, port = secure.address("SASL_PLAINTEXT").split(":")
    assert apis[17] == (0, 1) and apis[36] == (0, 2)
    pairs = [(0, None)] + [(1, v) for v in range(apis[36][0], apis[36][1] + 1)]
    for hs_version, auth_version in pairs:
        with WireClient(host, int(port), timeout=10) as c:
            hs = c.request(request_class(17, hs_version)(mechanism="PLAIN"))
            assert int(hs.error_code) == 0 and "PLAIN" in hs.mechanisms
            if hs_version == 0:  # v0: the token goes raw, the answer comes raw
                token = b"\0alice\0alice-secret"
                c.send_raw(len(token).to_bytes(4, "big") + token)
                assert c.recv_frame() == b""
            else:
                auth = c.request(request_class(36, auth_version)(auth_bytes=b"\0alice\0alice-secret"))
                assert int(auth.error_code) == 0 and auth.error_message is None
            md = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False))
            assert [b.port for b in md.brokers] == [secure.ports["SASL_PLAINTEXT"]]


def test_describe_configs_hides_passwords(secure: SecureBroker) -> None:
    from confluent_kafka.admin import ConfigResource

    admin = AdminClient({"bootstrap.servers": secure.proc.bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    entries = admin.describe_configs([resource])[resource].result(30)
    key = entries["ssl.key.password"]
    assert key.is_sensitive and key.value is None
    assert entries["ssl.keystore.type"].value == "PEM" and not entries["ssl.keystore.type"].is_sensitive
    assert entries["sasl.enabled.mechanisms"].value == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"


def test_large_fetches_over_tls_are_encrypted_not_sendfiled(secure: SecureBroker, topic_name: str) -> None:
    """A fetch answer above the splice threshold (file ranges, sendfile on plaintext
    connections) goes through TLS: the consumer reads every byte back intact."""
    conf = scram_conf(secure, "SCRAM-SHA-512")
    producer = Producer({**conf, "linger.ms": 50, "compression.type": "none"})
    values = [bytes([i % 251]) * 4000 for i in range(300)]  # 1.2 MB, uncompressed
    for v in values:
        producer.produce(topic_name, v)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"big-{topic_name}", "auto.offset.reset": "earliest",
                         "fetch.min.bytes": 500_000, "fetch.wait.max.ms": 1000})
    consumer.subscribe([topic_name])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            got.append(msg.value())
    consumer.close()
    assert got == values


def test_advertised_listeners_per_listener(tmp_path: Path) -> None:
    from support.broker import BrokerProcess
    from support.ports import free_port

    p1, p2 = free_port(), free_port()
    proc = BrokerProcess(tmp_path / "data", port=p1, listeners=f"PLAINTEXT://127.0.0.1:{p1},SASL_PLAINTEXT://127.0.0.1:{p2}",
                         overrides={"advertised.listeners": f"PLAINTEXT://localhost:{p1},SASL_PLAINTEXT://localhost:{p2}",
                                    "sasl.enabled.mechanisms": "PLAIN",
                                    "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                                        'org.apache.kafka.common.security.plain.PlainLoginModule required user_u="p";'})
    try:
        proc.start()
        assert f"listening on 127.0.0.1:{p1} (PLAINTEXT), 127.0.0.1:{p2} (SASL_PLAINTEXT)" in proc.startup_line
        md = AdminClient({"bootstrap.servers": proc.bootstrap}).list_topics(timeout=20)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("localhost", p1)]
        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{p2}", "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"}
                         ).list_topics(timeout=20)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("localhost", p2)]
    finally:
        proc.close()
