"""Exit codes as Kafka's tools and rpk users expect: bad usage is exit 2, checked before
any broker is asked; a failed operation is exit 1 with one clear line, also when the
broker accepts connections but never answers (issue 10)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.broker import BrokerProcess
from support.cli import closed_port, run_dmq

# Each is bad usage whatever the broker says. The bootstrap server is a closed port: a
# command that asked the broker before it checked its arguments would fail with "cannot
# reach" and exit 1 instead.
USAGE_ERRORS = [
    (("topics", "alter", "T"), "error: nothing to alter: give --partitions, --config or --delete-config"),
    (("topics", "alter", "T", "--partitions", "0"), "error: --partitions must be at least 1, got 0"),
    (("topics", "alter", "T", "--partitions", "4", "--config", "retention.ms"),
     "error: expected key=value, got 'retention.ms'"),
    (("topics", "create", "T", "--partitions", "0"),
     "error: --partitions must be at least 1 (or -1 for the broker's default), got 0"),
    (("topics", "create", "T", "--replication-factor", "-3"),
     "error: --replication-factor must be at least 1 (or -1 for the broker's default), got -3"),
    (("groups", "reset-offsets", "-g", "g", "-t", "T", "--to-datetime", "yesterday"),
     "error: cannot parse --to-datetime 'yesterday': use ISO 8601 like 2026-01-02T03:04:05 "
     "(local time) or 2026-01-02T03:04:05Z"),
    (("groups", "reset-offsets", "-g", "g", "-t", "T:x", "--to-earliest"),
     "error: --topic expects TOPIC or TOPIC:P1,P2 with partition numbers, got 'T:x'"),
    (("groups", "reset-offsets", "-g", "g", "-t", "T", "--to-earliest", "--to-latest"),
     "error: give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by"),
    (("produce", "T", "--key-separator", ""), "error: --key-separator must not be empty"),
    (("produce", "T", "--acks", "1", "--idempotence"),
     "error: --idempotence needs --acks all (got --acks 1): a retried batch is only deduplicated "
     "when every in-sync replica has it"),
    (("partitions", "elect-leaders", "--partition", "0"), "error: --partition needs --topic"),
    (("bench", "consume", "--timeout", "0"), "error: --timeout must be positive"),
    (("messages", "query", "-t", "T"), "error: give --key KEY, --from/--to DATETIME, or --partition with --offset"),
    (("messages", "query", "-t", "T", "-o", "3"), "error: --offset needs --partition: offsets are per partition"),
    (("messages", "query", "-t", "T", "-p", "0", "-o", "3", "-k", "x"),
     "error: --offset reads from an offset on: leave out --key, --from and --to"),
    (("messages", "query", "-t", "T", "--from", "yesterday"),
     "error: cannot parse --from 'yesterday': use ISO 8601 like 2026-11-22T10:00 (local time) or "
     "2026-11-22T10:00:00Z"),
    (("messages", "query", "-t", "T", "--from", "2026-11-22T10:00Z", "--to", "2026-11-22T09:00Z"),
     "error: --to 2026-11-22T09:00Z is before --from 2026-11-22T10:00Z"),
]

# Rejected by the option's declared range: click's usage message, exit 2.
RANGE_ERRORS = [
    ("consume", "T", "--partition", "-1"),
    ("produce", "T", "--partition", "-1"),
    ("bench", "consume", "--messages", "0"),
    ("bench", "produce", "--num-records", "0"),
    ("messages", "query", "-t", "T", "-k", "1", "-n", "0"),
    ("messages", "query", "-t", "T", "-p", "-1", "-o", "1"),
]


@pytest.mark.parametrize("args, message", USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_errors_exit_2_before_asking_a_broker(args: tuple[str, ...], message: str) -> None:
    res = run_dmq(f"127.0.0.1:{closed_port()}", *args, stdin=b"", check=False, timeout=60)
    assert (res.returncode, res.stderr.splitlines()) == (2, [message]), res.stderr


@pytest.mark.parametrize("args", RANGE_ERRORS, ids=[" ".join(a) for a in RANGE_ERRORS])
def test_out_of_range_options_exit_2(args: tuple[str, ...]) -> None:
    res = run_dmq(f"127.0.0.1:{closed_port()}", *args, stdin=b"", check=False, timeout=60)
    assert res.returncode == 2, res.stderr
    assert "Invalid value for" in res.stderr and "cannot reach" not in res.stderr, res.stderr


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """An address that accepts connections and never answers: a stalled broker."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(50)
        yield f"127.0.0.1:{s.getsockname()[1]}"


def test_reset_offsets_with_a_stalled_broker_is_one_line(silent_broker: str) -> None:
    started = time.monotonic()
    res = run_dmq(silent_broker, "groups", "reset-offsets", "-g", "g", "-t", "T", "--to-earliest",
                  check=False, timeout=90)
    assert res.returncode == 1, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot list topics: "), res.stderr
    assert "KafkaError{" not in res.stderr and "unexpected" not in res.stderr, res.stderr
    assert time.monotonic() - started < 60


def test_partitions_with_a_stalled_broker_is_one_line(silent_broker: str) -> None:
    started = time.monotonic()
    res = run_dmq(silent_broker, "partitions", "elect-leaders", "--topic", "T", check=False,
                  timeout=60)
    took = time.monotonic() - started
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines() == [
        f"error: {silent_broker} did not answer within 10 s; is the broker overloaded or stopped?"]
    assert res.stdout == "" and took < 30, (res.stdout, took)


@pytest.mark.parametrize("args", [
    ("partitions", "elect-leaders"),
    ("partitions", "reassign", "--topic", "T", "--partition", "0", "--replicas", "1,2"),
    ("partitions", "throttle", "--brokers", "1", "--rate", "1000"),
], ids=["elect-leaders", "reassign", "throttle"])
def test_partitions_with_an_unreachable_broker_is_one_line_at_once(args: tuple[str, ...]) -> None:
    bootstrap = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    res = run_dmq(bootstrap, *args, check=False, timeout=60)
    took = time.monotonic() - started
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines() == [
        f"error: cannot reach {bootstrap}: connection refused; is `dmq server` running? "
        f"(pass --bootstrap-server HOST:PORT)"], res.stderr
    assert res.stdout == "" and took < 10, (res.stdout, took)


def test_a_refused_reassignment_goes_to_stderr(broker: BrokerProcess) -> None:
    run_dmq(broker.bootstrap, "topics", "create", "exit-reassign", "-p", "1")
    res = run_dmq(broker.bootstrap, "partitions", "reassign", "--topic", "exit-reassign",
                  "--partition", "0", "--replicas", "7", "--no-wait", check=False)
    assert res.returncode == 1
    assert res.stdout == "", res.stdout  # the error was printed to stdout, in red
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: exit-reassign-0: INVALID_REPLICA_ASSIGNMENT"), res.stderr


def test_reset_offsets_of_a_partition_the_topic_lacks(broker: BrokerProcess) -> None:
    run_dmq(broker.bootstrap, "topics", "create", "exit-reset", "-p", "2")
    res = run_dmq(broker.bootstrap, "groups", "reset-offsets", "-g", "g", "-t", "exit-reset:1,5",
                  "--to-earliest", check=False)
    assert res.returncode == 1
    # it said "cannot list offsets: Failed to query partition leaders: No leaders found"
    assert res.stderr.splitlines() == ["error: topic exit-reset has no partition 5 (it has 2)"]


def test_groups_list_with_a_stalled_broker_fails_rather_than_show_no_groups(silent_broker: str) -> None:
    for args in (("groups", "list"), ("groups", "describe", "--all-groups")):
        res = run_dmq(silent_broker, *args, check=False, timeout=60)
        # it exited 0 with an empty table: the client's error sat beside an empty list
        assert res.returncode == 1, (args, res.stdout, res.stderr)
        assert res.stderr.splitlines() == ["error: cannot list groups: Local: Timed out"], res.stderr
        assert res.stdout == "", res.stdout


def test_cluster_status_without_a_cluster_says_so(tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{closed_port()}"  # from DMQ_BOOTSTRAP_SERVER, as a user's shell has it
    res = run_dmq(bootstrap, "cluster", "status", "--data-dir", str(tmp_path), check=False)
    assert res.returncode == 1
    # it said "cannot reach ...; is `dmq server` running?": the local cluster was never mentioned
    assert res.stderr.splitlines() == [
        f"error: no cluster is running in {tmp_path}, and nothing answers at {bootstrap} "
        f"(connection refused); start one with `dmq cluster start --data-dir {tmp_path}`, or pass "
        f"--bootstrap-server HOST:PORT"]
    # Asked about a broker by name, it speaks of that broker only.
    res = run_dmq(None, "cluster", "status", "-b", bootstrap, "--data-dir", str(tmp_path), check=False)
    assert res.returncode == 1 and "no cluster is running" in res.stderr
    res = run_dmq(None, "cluster", "status", "-b", bootstrap, check=False)
    assert res.returncode == 1 and res.stderr.splitlines() == [
        f"error: cannot reach {bootstrap}: connection refused; is `dmq server` running? "
        f"(pass --bootstrap-server HOST:PORT)"]


def test_groups_list_without_groups_says_so(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    for args in (("groups", "list"), ("groups", "describe", "--all-groups")):
        res = run_dmq(fresh_broker.bootstrap, *args)
        assert res.stdout == "No consumer groups.\n", res.stdout  # an empty table, before
