"""The dmq command line against a real broker."""

from __future__ import annotations

import re
import subprocess
import sys

from support.broker import BrokerProcess
from support.cli import run_dmq


def dmq(broker: BrokerProcess, *args: str, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_dmq(broker.bootstrap, *args, stdin=stdin, check=check)


def test_topics_lifecycle(broker: BrokerProcess) -> None:
    assert "Created topic cli-a" in dmq(broker, "topics", "create", "cli-a", "-p", "3", "-c", "retention.ms=60000").stdout
    assert "cli-a" in dmq(broker, "topics", "list").stdout.split()
    desc = dmq(broker, "topics", "describe", "cli-a").stdout
    assert "3 partitions" in desc and "retention.ms=60000" in desc
    dmq(broker, "topics", "alter", "cli-a", "-p", "5", "-c", "segment.bytes=100000", "--delete-config", "retention.ms")
    desc = dmq(broker, "topics", "describe", "cli-a").stdout
    assert "5 partitions" in desc and "segment.bytes=100000" in desc and "retention.ms" not in desc
    again = dmq(broker, "topics", "create", "cli-a", check=False)
    assert again.returncode == 1 and "already exists" in again.stderr
    dmq(broker, "topics", "delete", "cli-a")
    assert "cli-a" not in dmq(broker, "topics", "list").stdout.split()
    missing = dmq(broker, "topics", "describe", "no-such-topic", check=False)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert "no-such-topic" not in dmq(broker, "topics", "list").stdout.split()
    bad = dmq(broker, "topics", "create", "bad name", check=False)
    assert bad.returncode == 1 and "topic name is invalid" in bad.stderr.lower()


def test_console_produce_consume(broker: BrokerProcess) -> None:
    dmq(broker, "topics", "create", "cli-b", "-p", "2")
    lines = b"".join(b"k%d:value %d\n" % (i, i) for i in range(50))
    res = dmq(broker, "produce", "cli-b", "--key-separator", ":", "-H", "origin=cli", stdin=lines)
    assert "produced 50 records" in res.stderr
    out = dmq(broker, "consume", "cli-b", "--from-beginning", "--max-messages", "50", "--print-key",
              "--print-headers").stdout.splitlines()
    assert sorted(out) == sorted(f"origin=cli\tk{i}\tvalue {i}" for i in range(50))
    part = dmq(broker, "consume", "cli-b", "-p", "0", "-o", "0", "--timeout-ms", "1500",
               "--print-offset").stdout.splitlines()
    assert part and all(line.startswith("0:") for line in part)
    assert len(part) < 50


def _final_rate(stderr: str, phase: str) -> int:
    """The rate on the progress bar's last line ("produce ━━━ 20000/20000 263,621 rec/s")."""
    bar = [line for line in stderr.splitlines() if line.startswith(f"{phase} ")][-1]
    m = re.search(r"20000/20000 ([\d,]+) rec/s", bar)
    assert m, bar
    return int(m.group(1).replace(",", ""))


def test_bench(broker: BrokerProcess) -> None:
    res = dmq(broker, "bench", "produce", "-t", "cli-bench", "-n", "20000", "-s", "200", "-p", "2")
    assert "records/s" in res.stderr and "20,000" in res.stderr
    assert _final_rate(res.stderr, "produce") > 0  # it ended at '0 rec/s'
    res = dmq(broker, "bench", "consume", "-t", "cli-bench", "-n", "20000")
    assert "records/s" in res.stderr and "20,000" in res.stderr
    assert _final_rate(res.stderr, "consume") > 0


def test_bench_takes_client_properties_and_says_its_acks(broker: BrokerProcess) -> None:
    res = dmq(broker, "bench", "produce", "-t", "cli-bench-x", "-n", "2000", "-X", "acks=all",
              "-X", "compression.type=lz4")
    assert "acks=all" in res.stderr  # the summary names the acks in effect...
    bad = dmq(broker, "bench", "produce", "-t", "cli-bench-x", "-n", "10", "-X", "no.such.property=1",
              check=False)
    assert bad.returncode == 2 and "no.such.property" in bad.stderr  # ...and -X reaches librdkafka
    assert len(bad.stderr.splitlines()) == 1
    res = dmq(broker, "bench", "consume", "-t", "cli-bench-x", "-n", "2000", "-X", "fetch.wait.max.ms=50")
    assert "2,000" in res.stderr


def test_server_refuses_bad_config(tmp_path) -> None:  # noqa: ANN001
    res = subprocess.run([sys.executable, "-m", "dmq", "server", "--data-dir", str(tmp_path),
                          "--override", "num.partitions=zero"], capture_output=True, timeout=30)
    assert res.returncode == 2
    assert b"num.partitions" in res.stderr


def test_second_broker_on_the_same_data_dir_is_refused(broker: BrokerProcess) -> None:
    res = subprocess.run([sys.executable, "-m", "dmq", "server", "--listen", "127.0.0.1:0",
                          "--data-dir", str(broker.data_dir)], capture_output=True, timeout=30)
    assert res.returncode != 0
    assert b"in use by another dmq broker" in res.stderr
    assert broker.alive()


def test_groups_describe_lag_and_reset(broker: BrokerProcess) -> None:
    import time

    from confluent_kafka import Consumer, TopicPartition

    dmq(broker, "topics", "create", "cli-g", "-p", "2")
    dmq(broker, "produce", "cli-g", "-p", "0", stdin=b"".join(b"%d\n" % i for i in range(40)))
    dmq(broker, "produce", "cli-g", "-p", "1", stdin=b"".join(b"%d\n" % i for i in range(25)))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cli-group", "client.id": "lag-client",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["cli-g"])
    got: list = []
    deadline = time.monotonic() + 20
    while len(got) < 65 and time.monotonic() < deadline:
        got += [m for m in c.consume(100, 0.5) if not m.error()]
    c.commit(offsets=[TopicPartition("cli-g", 0, 30), TopicPartition("cli-g", 1, 5)], asynchronous=False)
    # While the member is active: it shows up with its partitions, and reset is refused.
    active = dmq(broker, "groups", "describe", "cli-group").stdout
    assert "Stable" in active and "lag-client" in active
    refused = dmq(broker, "groups", "reset-offsets", "-g", "cli-group", "-t", "cli-g", "--to-earliest",
                  "--execute", check=False)
    assert refused.returncode == 1 and "inactive" in refused.stderr
    # Lag as the client sees it: log end offset minus committed offset.
    lags = {}
    for p in (0, 1):
        committed = c.committed([TopicPartition("cli-g", p)], 10)[0].offset
        lags[p] = c.get_watermark_offsets(TopicPartition("cli-g", p), 10)[1] - committed
    c.close()
    rows = [line.replace("│", " ").split() for line in dmq(broker, "groups", "describe", "cli-group").stdout.splitlines()
            if "cli-g " in line.replace("│", " ")]
    described = {int(r[1]): (int(r[2]), int(r[3]), int(r[4])) for r in rows}
    assert described == {0: (30, 40, lags[0]), 1: (5, 25, lags[1])}
    assert "cli-group" in dmq(broker, "groups", "list").stdout
    dry = dmq(broker, "groups", "reset-offsets", "-g", "cli-group", "-t", "cli-g", "--to-earliest")
    assert "Dry run" in dry.stdout
    c2 = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cli-group"})
    assert [tp.offset for tp in c2.committed([TopicPartition("cli-g", 0), TopicPartition("cli-g", 1)], 10)] == [30, 5]
    dmq(broker, "groups", "reset-offsets", "-g", "cli-group", "-t", "cli-g:0", "--shift-by", "-10", "--execute")
    dmq(broker, "groups", "reset-offsets", "-g", "cli-group", "-t", "cli-g:1", "--to-latest", "--execute")
    assert [tp.offset for tp in c2.committed([TopicPartition("cli-g", 0), TopicPartition("cli-g", 1)], 10)] == [20, 25]
    dmq(broker, "groups", "reset-offsets", "-g", "cli-group", "-t", "cli-g", "--to-offset", "1000", "--execute")
    assert [tp.offset for tp in c2.committed([TopicPartition("cli-g", 0), TopicPartition("cli-g", 1)], 10)] == [40, 25]
    c2.close()
    dmq(broker, "groups", "delete", "cli-group")
    assert "cli-group" not in dmq(broker, "groups", "list").stdout
