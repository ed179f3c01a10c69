"""The web console and secured listeners: ``dmq console --command-config`` serves a
cluster through a SASL_SSL listener; ``dmq server --console`` connects through the
broker's PLAINTEXT listener and says so at startup when it has none."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.console import ConsoleProcess, cells, get
from support.ports import free_port
from support.security import PASSWORD, USER, SecureBroker, start_secure_broker


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("console-sec"))
    yield broker
    broker.proc.close()


def test_standalone_console_over_sasl_ssl(secured: SecureBroker, tmp_path: Path) -> None:
    admin = AdminClient({"bootstrap.servers": secured.proc.bootstrap})
    admin.create_topics([NewTopic("sec-console", 2, 1)])["sec-console"].result(15)
    p = Producer({"bootstrap.servers": secured.proc.bootstrap, "log_level": 0})
    p.produce("sec-console", b"hello over TLS", key=b"k1", partition=1)
    assert p.flush(15) == 0
    config = tmp_path / "console.properties"
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={secured.pki.ca}\n")
    console = ConsoleProcess(secured.address("SASL_SSL"), tmp_path / "console.log",
                             extra_args=["--command-config", str(config)]).start()
    try:
        page = get(console.url, "/cluster")
        assert page.status == 200, page.text
        [header, row] = cells(page.text, "brokers")
        # The metadata came through the SASL_SSL listener: its address is the broker's.
        assert dict(zip(header, row, strict=True))["address"] == secured.address("SASL_SSL")
        page = get(console.url, "/topics/sec-console/messages", partition="all")
        assert page.status == 200 and "hello over TLS" in page.text, page.text[-2000:]
    finally:
        console.close()


def test_console_refuses_a_wrong_password(secured: SecureBroker, tmp_path: Path) -> None:
    config = tmp_path / "bad.properties"
    config.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.username={USER}\n"
                      f"sasl.password=wrong\nssl.ca.location={secured.pki.ca}\n")
    res = subprocess.run([sys.executable, "-m", "dmq", "console", "-b", secured.address("SASL_SSL"),
                          "--listen", "127.0.0.1:0", "--command-config", str(config)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith("error: authentication failed at "), res.stderr


def test_broker_console_needs_a_plaintext_listener(tmp_path: Path) -> None:
    port = free_port()
    res = subprocess.run(
        [sys.executable, "-m", "dmq", "server", "--listen", f"SASL_PLAINTEXT://127.0.0.1:{port}",
         "--data-dir", str(tmp_path / "data"), "--override", "sasl.enabled.mechanisms=SCRAM-SHA-256",
         "--console", f"127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith(
        "error: --console connects to the broker through a PLAINTEXT listener"), res.stderr


def test_broker_console_uses_the_plaintext_listener_when_it_is_not_the_first(tmp_path: Path) -> None:
    from support.broker import BrokerProcess
    from support.console import SERVING, wait_for_line

    sasl, plain, console_port = free_port(), free_port(), free_port()
    b = BrokerProcess(tmp_path / "data", port=sasl,
                      listeners=f"SASL_PLAINTEXT://127.0.0.1:{sasl},PLAINTEXT://127.0.0.1:{plain}",
                      overrides={"sasl.enabled.mechanisms": "SCRAM-SHA-256"},
                      extra_args=["--console", f"127.0.0.1:{console_port}"]).start()
    try:
        assert b.proc is not None
        m = next((SERVING.search(line) for line in b.lines if SERVING.search(line)), None)
        url = m.group(1) if m else wait_for_line(b.proc, 30, b.log_path)
        page = get(url, "/cluster")
        assert page.status == 200, page.text
        [header, row] = cells(page.text, "brokers")
        assert dict(zip(header, row, strict=True))["address"] == f"127.0.0.1:{plain}"
    finally:
        b.close()
