"""``dmq groups`` with share groups (KIP-932) against a real broker and real confluent-kafka
ShareConsumers: listed beside classic groups with their type; described with members,
assignments, start offsets, records in flight and acquired, and lag; their start offsets
reset (as kafka-share-groups.sh --reset-offsets) only while no member runs."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from support.broker import BrokerProcess
from support.cli import run_dmq


def rows(text: str, first: str) -> list[list[str]]:
    """The table rows whose first cell is ``first``, split into cells."""
    out = []
    for line in text.splitlines():
        cells = line.replace("│", " ").split()
        if cells and cells[0] == first:
            out.append(cells)
    return out


def share_consumer(bootstrap: str, group: str) -> Any:
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": 10,
                          "share.acknowledgement.mode": "explicit", "log_level": 0})


def test_share_groups_listed_described_and_reset(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("cli-sg", 1, 1)])["cli-sg"].result(10)
    config = ConfigResource(ResourceType.GROUP, "cli-share", incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([config])[config].result(10)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(30):
        p.produce("cli-sg", value=b"%d" % i)
        p.flush(10)  # a batch per record
    classic = Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-classic", "auto.offset.reset": "earliest"})
    classic.subscribe(["cli-sg"])
    classic.consume(1, 5)

    a, b = share_consumer(bootstrap, "cli-share"), share_consumer(bootstrap, "cli-share")
    accepted = 0

    def accept_until_quiet(c: Any, seconds: float = 3) -> None:
        nonlocal accepted
        quiet = time.monotonic()
        while time.monotonic() - quiet < seconds:
            for m in c.poll(0.2):
                c.acknowledge(m, AcknowledgeType.ACCEPT)
                accepted += 1
                quiet = time.monotonic()
        c.commit_sync(10)

    try:
        # b takes records and holds them unanswered (with what its client fetched ahead);
        # a, sharing the partition, accepts everything else it gets.
        b.subscribe(["cli-sg"])
        held: list[Any] = []
        deadline = time.monotonic() + 15
        while not held and time.monotonic() < deadline:
            held = list(b.poll(0.5))
        assert held
        a.subscribe(["cli-sg"])
        accept_until_quiet(a)
        pending = 30 - accepted
        assert pending >= len(held)

        listed = run_dmq(bootstrap, "groups", "list").stdout
        assert rows(listed, "cli-share") == [["cli-share", "share", "Stable"]]
        assert rows(listed, "cli-classic") == [["cli-classic", "classic", "Stable"]]

        out = run_dmq(bootstrap, "groups", "describe", "cli-share").stdout
        assert "Group cli-share  type share  state Stable  members 2  assignor simple" in out
        # start offset, in-flight, acquired, lag, members: b's records are acquired (with what
        # its client fetched ahead), in flight from the start offset; none of them is done
        ((start, in_flight, acquired, lag, sharing),) = [[int(x) for x in r[2:]] for r in rows(out, "cli-sg")]
        assert (lag, sharing) == (pending, 2), out
        assert len(held) <= acquired <= pending <= in_flight and start + in_flight <= 30, out
        assert f"TOTAL-LAG {pending}" in out

        members = run_dmq(bootstrap, "groups", "describe", "cli-share", "--members").stdout
        assert "Group cli-share  type share  state Stable  members 2" in members
        assert members.count("cli-sg:0") == 2, members  # both share the partition
        state = run_dmq(bootstrap, "groups", "describe", "cli-share", "--state").stdout
        assert rows(state, "cli-share")[0][:5] == ["cli-share", "share", "Stable", "simple", "2"]

        refused = run_dmq(bootstrap, "groups", "reset-offsets", "-g", "cli-share", "-t", "cli-sg", "--to-earliest",
                          "--execute", check=False)
        assert refused.returncode == 1 and refused.stderr.startswith("error: offsets can only be reset if the "
                                                                     "share group 'cli-share' is inactive")
        for m in held:
            b.acknowledge(m, AcknowledgeType.ACCEPT)
        accepted += len(held)
        accept_until_quiet(b, 1)
        accept_until_quiet(a, 1)
    finally:
        a.close()
        b.close()
        classic.close()

    everything = run_dmq(bootstrap, "groups", "describe", "--all-groups").stdout
    assert "Group cli-share  type share  state Empty  members 0" in everything and "Group cli-classic" in everything
    done_out = run_dmq(bootstrap, "groups", "describe", "cli-share").stdout
    ((start_now, _, _, lag_now, _),) = [r[2:] for r in rows(done_out, "cli-sg")]
    assert int(lag_now) == 30 - accepted and int(start_now) <= 30, done_out  # what b's client fetched ahead comes back

    dry = run_dmq(bootstrap, "groups", "reset-offsets", "-g", "cli-share", "-t", "cli-sg", "--to-offset", "5")
    assert "Dry run" in dry.stdout and rows(dry.stdout, "cli-sg") == [["cli-sg", "0", start_now, "5"]]
    run_dmq(bootstrap, "groups", "reset-offsets", "-g", "cli-share", "-t", "cli-sg", "--to-offset", "15", "--execute")
    run_dmq(bootstrap, "groups", "reset-offsets", "-g", "cli-share", "-t", "cli-sg", "--shift-by", "-10", "--execute")
    again = [r[2] for r in rows(run_dmq(bootstrap, "groups", "describe", "cli-share").stdout, "cli-sg")]
    assert again == ["5"]
    c = share_consumer(bootstrap, "cli-share")
    try:
        c.subscribe(["cli-sg"])
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(got) < 25 and time.monotonic() < deadline:
            for m in c.poll(0.2):
                got.append(m.value())
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        assert sorted(got) == sorted(b"%d" % i for i in range(5, 30))  # offsets 5-29 again, once each
        c.commit_sync(10)
    finally:
        c.close()
    run_dmq(bootstrap, "groups", "delete", "cli-share")
    assert "cli-share" not in run_dmq(bootstrap, "groups", "list").stdout
