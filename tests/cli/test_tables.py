"""The tables of the admin commands at an 80-column terminal (issue 10: "tables fit 80
columns or wrap sensibly"): no line wider than the terminal, headers and ids never cut
with "…" (long topic names and member ids fold onto more lines, whole), numbers
right-aligned. The commands run on a pseudo-terminal 80 columns wide, as a user's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from support.broker import BrokerProcess
from support.cli import run_dmq, run_dmq_at_terminal

WIDTH = 80
# Longer than any column can be at 80 columns: it has to fold.
TOPIC = "tbl-orders-service-events-with-a-name-long-enough-to-wrap-at-80-columns"
CLIENT_ID = "billing-service-worker-instance-number-seven"
GROUP = "tbl-billing-group-with-a-rather-long-name"
IDLE_GROUP = "tbl-idle-group"


@dataclass
class Table:
    """A Rich table as printed: header lines (┃) and body lines (│), split into cells."""

    header_lines: list[list[str]] = field(default_factory=list)
    body_lines: list[list[str]] = field(default_factory=list)

    @property
    def headers(self) -> list[str]:
        """Each column's header, its lines joined by a space ("current offset")."""
        columns = zip(*self.header_lines, strict=True)
        return [" ".join(c.strip() for c in column if c.strip()) for column in columns]

    def column(self, header: str) -> list[str]:
        """The cells (one per printed line, unstripped) of the column with this header."""
        i = self.headers.index(header)
        return [cells[i] for cells in self.body_lines]

    def text(self, header: str) -> str:
        """A column's text read top to bottom, folded pieces joined again."""
        return "".join(c.strip() for c in self.column(header))


def tables(out: str) -> list[Table]:
    found: list[Table] = []
    for line in out.splitlines():
        if line.startswith("┏"):
            found.append(Table())
        elif line.startswith("┃") and found:
            found[-1].header_lines.append(line.split("┃")[1:-1])
        elif line.startswith("│") and found:
            found[-1].body_lines.append(line.split("│")[1:-1])
    return found


def right_aligned(cell: str) -> bool:
    """One space of padding on the right, the number against it."""
    return cell.endswith(" ") and not cell.endswith("  ") and cell.strip() != ""


def numbers_right_aligned(table: Table, *headers: str) -> None:
    for header in headers:
        cells = [c for c in table.column(header) if c.strip()]
        assert cells, f"no {header} values"
        assert all(right_aligned(c) for c in cells), (header, cells)


def at_80(bootstrap: str, *args: str) -> str:
    res = run_dmq_at_terminal(bootstrap, *args, columns=WIDTH)
    assert res.returncode == 0, f"dmq {' '.join(args)} exited {res.returncode}: {res.stderr}"
    out = res.stdout
    wide = [line for line in out.splitlines() if len(line) > WIDTH]
    assert not wide, f"dmq {' '.join(args)}: lines wider than {WIDTH}:\n" + "\n".join(wide)
    assert "…" not in out, f"dmq {' '.join(args)} cut something short:\n{out}"
    return out


def _wait_for(check: Any, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout} s")


@pytest.fixture(scope="module")
def member(broker: BrokerProcess) -> Iterator[dict[str, Any]]:
    """TOPIC with records, a group with a member that has joined and committed, and an idle
    group with committed offsets only."""
    run_dmq(broker.bootstrap, "topics", "create", TOPIC, "-p", "2", "-c", "retention.ms=86400000")
    p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for i in range(30):
        p.produce(TOPIC, f"v{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    idle = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": IDLE_GROUP, "log_level": 0})
    idle.commit(offsets=[TopicPartition(TOPIC, 0, 4), TopicPartition(TOPIC, 1, 9)], asynchronous=False)
    idle.close()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "client.id": CLIENT_ID,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0})
    c.subscribe([TOPIC])
    _wait_for(lambda: c.poll(0.2) is not None and len(c.assignment()) == 2, "assignment")
    c.commit(offsets=[TopicPartition(TOPIC, 0, 5), TopicPartition(TOPIC, 1, 7)], asynchronous=False)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})

    def joined() -> Any:
        desc = admin.describe_consumer_groups([GROUP])[GROUP].result(10)
        return desc if desc.members else None

    desc = _wait_for(joined, "member of the group")
    stop = False

    def keep_polling() -> None:  # heartbeats run in librdkafka; polling keeps it in the group
        while not stop:
            c.poll(0.2)

    import threading

    poller = threading.Thread(target=keep_polling, daemon=True)
    poller.start()
    try:
        yield {"member_id": desc.members[0].member_id, "host": desc.members[0].host}
    finally:
        stop = True
        poller.join(5)
        c.close()


def test_topics_at_80_columns(broker: BrokerProcess, member: dict[str, Any]) -> None:
    assert TOPIC in at_80(broker.bootstrap, "topics", "list").splitlines()
    out = at_80(broker.bootstrap, "topics", "describe", TOPIC)
    (table,) = tables(out)
    assert table.headers == ["partition", "leader", "replicas", "isr", "delayed", "size"]
    numbers_right_aligned(table, "partition", "leader", "delayed", "size")
    assert TOPIC in "".join(out.split()), out  # the title wraps at a space, the name whole


def test_groups_describe_at_80_columns(broker: BrokerProcess, member: dict[str, Any]) -> None:
    out = at_80(broker.bootstrap, "groups", "describe", GROUP)
    (table,) = tables(out)
    # headers were cut to "current-off…" and "log-end-off…"
    assert table.headers == ["topic", "partition", "current offset", "log-end offset", "lag", "consumer-id"]
    # and topics and member ids to "tbl-orders-se…" and "billing-serv…"
    assert table.text("topic") == TOPIC * 2
    assert table.text("consumer-id") == member["member_id"] * 2
    numbers_right_aligned(table, "partition", "current offset", "log-end offset", "lag")
    assert "TOTAL-LAG 18" in out  # (15 - 5) + (15 - 7)

    out = at_80(broker.bootstrap, "groups", "describe", GROUP, "--members")
    (table,) = tables(out)
    assert table.headers == ["consumer-id", "host", "client-id", "partitions", "assignment"]
    assert table.text("consumer-id") == member["member_id"]
    assert table.text("client-id") == CLIENT_ID
    assert table.text("host") == member["host"]
    assert table.text("assignment") == f"{TOPIC}:0,1"
    assert [c.strip() for c in table.column("partitions") if c.strip()] == ["2"]
    numbers_right_aligned(table, "partitions")

    out = at_80(broker.bootstrap, "groups", "describe", GROUP, "--state")
    (table,) = tables(out)
    assert table.headers == ["group", "state", "assignor", "members", "coordinator"]
    assert table.text("group") == GROUP and table.text("state") == "Stable"
    numbers_right_aligned(table, "members")

    out = at_80(broker.bootstrap, "groups", "list")
    (table,) = tables(out)
    assert GROUP in [c.strip() for c in table.column("group")] or GROUP in table.text("group")


def test_reset_offsets_table_at_80_columns(broker: BrokerProcess, member: dict[str, Any]) -> None:
    out = at_80(broker.bootstrap, "groups", "reset-offsets", "-g", IDLE_GROUP, "-t", TOPIC,
                "--shift-by", "-2")
    (table,) = tables(out)
    assert table.headers == ["topic", "partition", "current offset", "new offset"]
    assert table.text("topic") == TOPIC * 2
    # the numbers were left-aligned
    numbers_right_aligned(table, "partition", "current offset", "new offset")
    rows = [[c.strip() for c in cells] for cells in table.body_lines if cells[1].strip()]
    assert [r[1:] for r in rows] == [["0", "4", "2"], ["1", "9", "7"]], out


def test_configs_describe_all_at_80_columns(broker: BrokerProcess, member: dict[str, Any]) -> None:
    out = at_80(broker.bootstrap, "configs", "describe", "--topic", TOPIC, "--all")
    (table,) = tables(out)
    assert table.headers == ["name", "value", "source"]
    rows = [[c.strip() for c in cells] for cells in table.body_lines]
    # the override, then its synonyms (the broker config the default comes from), whole
    i = rows.index(["retention.ms", "86400000", "DYNAMIC_TOPIC_CONFIG"])
    assert rows[i + 1] == ["↳ retention.ms", "86400000", "DYNAMIC_TOPIC_CONFIG"], rows[i:i + 3]
    assert rows[i + 2][0].startswith("↳ log.retention.") and rows[i + 2][2] == "DEFAULT_CONFIG", rows[i:i + 3]
    # A synonym too long for its column stays under its arrow, indented: it once wrapped
    # after the "↳", its name starting the next line like a config of its own.
    for cells, row in zip(table.body_lines, rows, strict=True):
        assert row[0] != "↳", rows
        if row[0] and not row[1] and not row[2]:  # a name's continuation line (an empty value has a source)
            assert cells[0].startswith("     "), f"{cells[0]!r} reads as a config of its own:\n{out}"
    out = at_80(broker.bootstrap, "configs", "describe", "--broker", "0", "--all")
    (table,) = tables(out)
    sources = {c.strip() for c in table.column("source")}
    assert {"STATIC_BROKER_CONFIG", "DEFAULT_CONFIG"} <= sources, sources


def test_cluster_status_at_80_columns(broker: BrokerProcess, member: dict[str, Any]) -> None:
    out = at_80(broker.bootstrap, "cluster", "status", "-b", broker.bootstrap)
    brokers, partitions = tables(out)
    assert brokers.headers == ["broker", "state", "host", "port", "role"]
    numbers_right_aligned(brokers, "broker", "port")
    assert partitions.headers == ["topic", "partition", "leader", "replicas", "isr", "status"]
    assert TOPIC * 2 in partitions.text("topic")
    numbers_right_aligned(partitions, "partition", "leader")
