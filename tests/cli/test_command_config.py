"""``--command-config FILE`` (and ``DMQ_COMMAND_CONFIG``): every command reaches a TLS or
SASL listener with Kafka's client properties, against a real broker with PLAINTEXT, SSL,
SASL_SSL and SASL_PLAINTEXT listeners and an ACL authorizer; wrong passwords and bad
files are one line each."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from support.cli import dmq_env, run_dmq
from support.security import PASSWORD, USER, SecureBroker, start_secure_broker

# bob (SCRAM) and alice (PLAIN) may do everything; ANONYMOUS too, for the fixture's setup
# over PLAINTEXT. The ACLs only need to be there for `dmq acls list` to have something.
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "super.users": f"User:{USER};User:alice;User:ANONYMOUS"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("cmdcfg"), **AUTHORIZER)
    yield broker
    broker.proc.close()


def scram_file(path: Path, secured: SecureBroker, password: str = PASSWORD) -> Path:
    """Kafka's (Java client's) names: a JAAS line and a PEM trust store."""
    path.write_text(
        "# as for kafka-topics.sh --command-config\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={secured.pki.ca}\n")
    return path


def plain_file(path: Path, password: str = "alice-secret") -> Path:
    """librdkafka's names."""
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    f"sasl.username=alice\nsasl.password={password}\n")
    return path


def run(secured: SecureBroker, listener: str, *args: str, config: Path | None = None,
        env_config: Path | None = None, stdin: bytes | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    """``dmq ARGS -b <listener's address>`` with the file as ``--command-config`` or
    (``env_config``) as DMQ_COMMAND_CONFIG."""
    env = dmq_env(secured.address(listener))
    env.pop("DMQ_COMMAND_CONFIG", None)
    if env_config is not None:
        env["DMQ_COMMAND_CONFIG"] = str(env_config)
    argv = [*args, *(["--command-config", str(config)] if config is not None else [])]
    res = subprocess.run([sys.executable, "-m", "dmq", *argv], input=stdin, capture_output=True,
                         timeout=120, env=env)
    out = subprocess.CompletedProcess(res.args, res.returncode, res.stdout.decode(errors="replace"),
                                      res.stderr.decode(errors="replace"))
    if check:
        assert res.returncode == 0, f"dmq {' '.join(argv)} exited {res.returncode}:\n{out.stderr}"
    return out


def exercise(secured: SecureBroker, listener: str, topic: str, **how: Path) -> None:
    """Topics, produce and consume, groups, messages, configs and ACLs through ``listener``."""
    assert f"Created topic {topic}" in run(secured, listener, "topics", "create", topic, "-p", "2", **how).stdout
    assert topic in run(secured, listener, "topics", "list", **how).stdout.split()
    desc = run(secured, listener, "topics", "describe", topic, **how).stdout
    assert "2 partitions" in desc
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(20))
    res = run(secured, listener, "produce", topic, "--key-separator", ":", stdin=lines, **how)
    assert "produced 20 records" in res.stderr
    out = run(secured, listener, "consume", topic, "--from-beginning", "--max-messages", "20",
              "--print-key", **how).stdout.splitlines()
    assert sorted(out) == sorted(f"k{i}\tv{i}" for i in range(20))
    group = f"{topic}-readers"  # `dmq consume` commits nothing: a group with offsets, over PLAINTEXT
    c = Consumer({"bootstrap.servers": secured.proc.bootstrap, "group.id": group})
    c.commit(offsets=[TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 1)], asynchronous=False)
    c.close()
    assert group in run(secured, listener, "groups", "list", **how).stdout
    described = run(secured, listener, "groups", "describe", group, **how).stdout
    assert topic in described
    found = run(secured, listener, "messages", "query", "-t", topic, "-k", "k7", **how).stdout
    assert "v7" in found and "v8" not in found
    run(secured, listener, "configs", "alter", "--topic", topic, "--set", "retention.ms=60000", **how)
    assert "retention.ms" in run(secured, listener, "configs", "describe", "--topic", topic, **how).stdout
    run(secured, listener, "acls", "add", "--allow-principal", "User:carol", "--operation", "Read",
        "--topic", topic, **how)
    acls = run(secured, listener, "acls", "list", "--topic", topic, **how).stdout
    assert "User:carol" in acls
    # dmq's wire client to every broker (DescribeProducers, ListTransactions, ElectLeaders)
    producers = run(secured, listener, "transactions", "describe-producers", "-t", topic, "-p", "0", **how)
    assert producers.returncode == 0
    run(secured, listener, "transactions", "list", **how)
    run(secured, listener, "partitions", "elect-leaders", "--topic", topic, **how)
    run(secured, listener, "topics", "create", f"{topic}-dlq", **how)
    redrive = run(secured, listener, "retry", "redrive", "--topic", f"{topic}-dlq", "--dry-run", **how)
    assert f"No dead letters to re-drive in {topic}-dlq" in redrive.stdout, redrive.stdout + redrive.stderr


def test_scram_over_sasl_ssl_with_kafka_names(secured: SecureBroker, tmp_path: Path) -> None:
    exercise(secured, "SASL_SSL", "cc-scram", config=scram_file(tmp_path / "client.properties", secured))


def test_plain_over_sasl_plaintext_from_the_environment(secured: SecureBroker, tmp_path: Path) -> None:
    exercise(secured, "SASL_PLAINTEXT", "cc-plain", env_config=plain_file(tmp_path / "plain.properties"))


@pytest.mark.parametrize("command", [("topics", "list"), ("configs", "describe", "--broker", "1"),
                                     ("consume", "cc-none", "--timeout-ms", "2000")])
def test_wrong_password_is_one_line(secured: SecureBroker, tmp_path: Path, command: tuple[str, ...]) -> None:
    """confluent-kafka's clients (topics, consume) and dmq's wire client (configs)."""
    res = run(secured, "SASL_SSL", *command, config=scram_file(tmp_path / "bad.properties", secured, "nope"),
              check=False)
    assert res.returncode == 1, res.stderr
    assert len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith("error: ") and "authentication" in res.stderr.lower(), res.stderr
    assert "nope" not in res.stderr


@pytest.mark.parametrize(("content", "says"), [
    (None, "cannot read --command-config"),
    ("security.protocol\n", "line 1: expected key=value"),
    ("security.protocol=SASL_TLS\n", "security.protocol=SASL_TLS"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\nsasl.username=a\nsasl.password=b\n",
     "sasl.mechanism=GSSAPI"),
    ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n", "needs sasl.username and sasl.password"),
    ("security.protocol=SSL\nssl.truststore.location=/etc/hostname\n", "ssl.truststore.type=JKS"),
    ("security.protocol=SSL\nssl.ca.location=/no/such/ca.pem\n", "cannot set up TLS"),
    ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=x required username=\"a\n",
     "sasl.jaas.config"),
    ("no.such.property=1\n", "no.such.property"),
])
def test_a_bad_file_is_one_line(secured: SecureBroker, tmp_path: Path, content: str | None, says: str) -> None:
    path = tmp_path / "client.properties"
    if content is not None:
        path.write_text(content)
    for command in (("topics", "list"), ("console", "--listen", "127.0.0.1:0")):
        res = run(secured, "SASL_SSL", *command, config=path, check=False)
        assert res.returncode == 2, res.stderr
        assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith("error: ")
        assert says in res.stderr, res.stderr


def test_an_unreadable_file_is_one_line(secured: SecureBroker, tmp_path: Path) -> None:
    binary = tmp_path / "client.jks"
    binary.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    cases = [(tmp_path, "is a directory"), (binary, "not a text file")]
    locked = tmp_path / "locked.properties"
    locked.write_text("security.protocol=PLAINTEXT\n")
    locked.chmod(0)
    if not os.access(locked, os.R_OK):  # as root every file is readable
        cases.append((locked, "permission denied"))
    for path, says in cases:
        res = run(secured, "PLAINTEXT", "topics", "list", config=path, check=False)
        assert res.returncode == 2 and len(res.stderr.splitlines()) == 1, res.stderr
        assert res.stderr.strip().endswith(says), res.stderr


def test_dmq_users_still_takes_librdkafka_names(secured: SecureBroker, tmp_path: Path) -> None:
    res = run(secured, "SASL_PLAINTEXT", "users", "list", config=plain_file(tmp_path / "p.properties"))
    assert USER in res.stdout.split()


def test_plaintext_without_a_file_is_unchanged(secured: SecureBroker) -> None:
    assert run_dmq(secured.address("PLAINTEXT"), "topics", "list").returncode == 0


def ssl_file(path: Path, secured: SecureBroker, cert: Path, key: Path | None = None) -> Path:
    """A client certificate: Kafka's PEM key store (key and chain in one file), or
    librdkafka's certificate and key files."""
    store = ("ssl.keystore.type=PEM\n" f"ssl.keystore.location={cert}\n" if key is None else
             f"ssl.certificate.location={cert}\nssl.key.location={key}\n")
    path.write_text(f"security.protocol=SSL\nssl.ca.location={secured.pki.ca}\n{store}")
    return path


def test_client_certificate_over_ssl(secured: SecureBroker, tmp_path: Path) -> None:
    """The SSL listener requires a client certificate; its subject is the principal, which
    the ACLs (no super user) let list nothing it may not describe."""
    good = ssl_file(tmp_path / "ssl.properties", secured, secured.pki.client_keystore)
    assert run(secured, "SSL", "topics", "list", config=good).returncode == 0
    refused = run(secured, "SSL", "acls", "list", config=good, check=False)
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr, refused.stderr
    other = ssl_file(tmp_path / "other.properties", secured, secured.pki.other_cert, secured.pki.other_key)
    for command in (("topics", "list"), ("acls", "list")):
        res = run(secured, "SSL", *command, config=other, check=False)
        assert res.returncode == 1 and len(res.stderr.splitlines()) == 1, res.stderr
        # Refused by the broker after the client's side of the TLS 1.3 handshake: the
        # connection ends, or ends with an alert.
        assert res.stderr.startswith("error: ") and ("--command-config" in res.stderr
                                                     or "TLS handshake" in res.stderr), res.stderr


def test_console_clients_take_kafkas_producer_and_consumer_config(secured: SecureBroker, tmp_path: Path) -> None:
    """kafka-console-producer.sh's --producer.config and -consumer.sh's --consumer.config."""
    plain = plain_file(tmp_path / "plain.properties")
    run(secured, "PLAINTEXT", "topics", "create", "cc-console")
    res = run(secured, "SASL_PLAINTEXT", "produce", "cc-console", "--producer.config", str(plain),
              stdin=b"one\ntwo\n")
    assert "produced 2 records" in res.stderr
    out = run(secured, "SASL_PLAINTEXT", "consume", "cc-console", "--from-beginning", "-n", "2",
              "--consumer.config", str(plain)).stdout
    assert out.splitlines() == ["one", "two"]


def test_cluster_status_of_a_secured_cluster(secured: SecureBroker, tmp_path: Path) -> None:
    res = run(secured, "SASL_SSL", "cluster", "status", "-b", secured.address("SASL_SSL"),
              config=scram_file(tmp_path / "client.properties", secured))
    row = next(line.replace("│", " ").split() for line in res.stdout.splitlines() if "controller" in line
               and "running" in line)
    assert row[2:4] == ["127.0.0.1", str(secured.ports["SASL_SSL"])], res.stdout


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL", "SASL_PLAINTEXT"])
def test_a_secured_listener_without_a_file_says_to_pass_one(secured: SecureBroker, listener: str) -> None:
    """At once, not after librdkafka's 30 s of retries."""
    for command in (("topics", "list"), ("acls", "list")):
        started = time.monotonic()
        res = run(secured, listener, *command, check=False)
        assert res.returncode == 1 and len(res.stderr.splitlines()) == 1, res.stderr
        assert res.stderr.strip().endswith("(a TLS or SASL listener? pass --command-config FILE)"), res.stderr
        assert time.monotonic() - started < 15


def test_bench_over_sasl_ssl(secured: SecureBroker, tmp_path: Path) -> None:
    config = scram_file(tmp_path / "client.properties", secured)
    res = run(secured, "SASL_SSL", "bench", "produce", "-t", "cc-bench", "-n", "2000", "-s", "100", config=config)
    assert "2,000" in res.stderr and "records/s" in res.stderr
    res = run(secured, "SASL_SSL", "bench", "consume", "-t", "cc-bench", "-n", "2000", config=config)
    assert "2,000" in res.stderr and "records/s" in res.stderr
