"""``dmq messages query`` against a real broker: by key (newest first), by time range and
from an offset (oldest first), the table (JSON values pretty-printed, headers, binary
shown as hex), read_uncommitted marking aborted records, and one-line errors."""

from __future__ import annotations

import json
import re
import socket
import time
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess
from support.cli import run_dmq, run_dmq_at_terminal

from dmq.cli.messages import show_bytes, show_value, when

T0 = int(datetime(2026, 11, 22, 10, 0, tzinfo=UTC).timestamp() * 1000)  # 10:00Z, then a record a minute


@pytest.fixture(scope="module")
def orders(broker: BrokerProcess) -> str:
    """Topic "orders-cli": 3 partitions, 60 records a minute apart from 10:00Z, keys 0..9,
    record i in partition i % 3 (so a key's records are in every partition), JSON values,
    headers; one aborted transaction with key 7."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("orders-cli", 3, 1)])["orders-cli"].result(15)
    p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "compression.type": "gzip"})
    for i in range(60):
        p.produce("orders-cli", key=b"%d" % (i % 10), value=json.dumps({"order": i, "total": i * 1.5}).encode(),
                  headers=[("source", b"web"), ("trace", b"\x00\x01")], timestamp=T0 + i * 60_000,
                  partition=i % 3)
    assert p.flush(30) == 0
    t = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "cli-aborted", "log_level": 0})
    t.init_transactions(30)
    t.begin_transaction()
    t.produce("orders-cli", key=b"7", value=b"never happened", timestamp=T0 + 61 * 60_000)
    assert t.flush(30) == 0
    t.abort_transaction(30)
    return "orders-cli"


def rows(stdout: str) -> list[list[str]]:
    """The table's rows, each cell with its lines joined by spaces."""
    out: list[list[str]] = []
    for line in stdout.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0]:  # a new row (its partition); otherwise more lines of the last one
            out.append(cells)
        else:
            out[-1] = [f"{a} {b}".strip() for a, b in zip(out[-1], cells, strict=True)]
    return out


def test_by_key_newest_first_with_json_pretty_printed(broker: BrokerProcess, orders: str) -> None:
    res = run_dmq(broker.bootstrap, "messages", "query", "--topic", orders, "--key", "3")
    table = rows(res.stdout)
    assert [int(r[1]) for r in table] == sorted((int(r[1]) for r in table), reverse=True)
    orders_found = [json.loads(r[5])["order"] for r in table]
    assert orders_found == [53, 43, 33, 23, 13, 3]
    assert all(r[3] == "3" and r[4] == "source=web trace=0x0001" for r in table)
    assert re.search(r'^│.*│ +"order": 53,', res.stdout, re.MULTILINE)  # pretty-printed: a line per field
    assert table[0][2] == when(T0 + 53 * 60_000)
    assert res.stderr.splitlines() == ["6 records with key '3' in orders-cli, newest first."]
    # -b instead of DMQ_BOOTSTRAP_SERVER, a partition, fewer records than match.
    res = run_dmq(None, "messages", "query", "-b", broker.bootstrap, "-t", orders, "-k", "3", "-n", "2")
    assert [json.loads(r[5])["order"] for r in rows(res.stdout)] == [53, 43]
    assert res.stderr.splitlines() == [
        "2 records with key '3' in orders-cli, newest first; more match (raise --max-messages, now 2)."]
    res = run_dmq(broker.bootstrap, "messages", "query", "-t", orders, "-k", "no-such-key")
    assert res.stdout == "" and res.stderr.splitlines() == ["No record with key 'no-such-key' in orders-cli."]


def test_aborted_records_only_with_read_uncommitted(broker: BrokerProcess, orders: str) -> None:
    res = run_dmq(broker.bootstrap, "messages", "query", "-t", orders, "-k", "7")
    assert "never happened" not in res.stdout and "aborted" not in res.stdout
    res = run_dmq(broker.bootstrap, "messages", "query", "-t", orders, "-k", "7",
                  "--isolation-level", "read_uncommitted")
    table = rows(res.stdout)
    assert table[0][5:] == ["never happened", "aborted"] and all(r[6] == "" for r in table[1:])


def test_by_time_range_and_from_an_offset(broker: BrokerProcess, orders: str) -> None:
    res = run_dmq(broker.bootstrap, "messages", "query", "-t", orders, "--from", "2026-11-22T10:05:00Z",
                  "--to", "2026-11-22T10:09:00+00:00")
    table = rows(res.stdout)
    assert [json.loads(r[5])["order"] for r in table] == [5, 6, 7, 8]  # oldest first, every partition
    assert res.stderr.splitlines() == ["4 records in that time range in orders-cli, oldest first."]
    res = run_dmq(broker.bootstrap, "messages", "query", "-t", orders, "--from", "2026-11-22T10:58Z")
    assert [json.loads(r[5])["order"] for r in rows(res.stdout)] == [58, 59]
    res = run_dmq(broker.bootstrap, "messages", "query", "-t", orders, "-p", "1", "-o", "4", "-n", "3")
    table = rows(res.stdout)
    assert [(r[0], r[1], json.loads(r[5])["order"]) for r in table] == [("1", "4", 13), ("1", "5", 16), ("1", "6", 19)]
    assert res.stderr.splitlines() == [
        "3 records from offset 4 in orders-cli-1, oldest first; more match (raise --max-messages, now 3)."]


def test_the_table_fits_80_columns(broker: BrokerProcess, orders: str) -> None:
    res = run_dmq_at_terminal(broker.bootstrap, "messages", "query", "-t", orders, "-k", "4", "-n", "2")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 80, res.stdout
    assert when(T0 + 54 * 60_000) in res.stdout  # the timestamp whole, on one line


@pytest.mark.parametrize("args, message", [
    (("-t", "nope", "-k", "1"), "error: topic nope does not exist"),
    (("-t", "orders-cli", "-p", "9", "-o", "0"), "error: topic orders-cli has no partition 9 (it has 3)"),
    (("-t", "orders-cli", "-p", "0", "-o", "999"), "error: offset 999 is outside orders-cli-0's offsets"),
], ids=["unknown-topic", "unknown-partition", "offset-out-of-range"])
def test_failures_are_one_line(broker: BrokerProcess, orders: str, args: tuple[str, ...], message: str) -> None:
    res = run_dmq(broker.bootstrap, "messages", "query", *args, check=False)
    assert res.returncode == 1 and res.stdout == ""
    assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith(message), res.stderr


def test_a_stalled_broker_is_one_line() -> None:
    """A broker that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(50)
        address = f"127.0.0.1:{s.getsockname()[1]}"
        started = time.monotonic()
        res = run_dmq(address, "messages", "query", "-t", "T", "-k", "1", check=False, timeout=60)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.splitlines() == [f"error: the bootstrap broker at {address} did not answer within 10 s; "
                                       f"is it overloaded or stopped?"]
    assert time.monotonic() - started < 30


def test_how_bytes_are_shown() -> None:
    assert show_bytes(None) == "null" and show_bytes(b"") == "" and show_bytes("ключ".encode()) == "ключ"
    assert show_bytes(b"\x00\xff") == "0x00ff" and show_bytes(b"a\x1bb") == "0x611b62"
    assert show_value(b'{"a": [1, {"b": null}]}') == '{\n  "a": [\n    1,\n    {\n      "b": null\n    }\n  ]\n}'
    assert show_value(b"[not json") == "[not json" and show_value(b"42") == "42"
