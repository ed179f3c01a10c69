"""The web console (``dmq console``) against a real broker, page by page over HTTP, with
real Kafka clients checking what it shows and what its forms change."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from support.broker import BrokerProcess
from support.console import ConsoleProcess, cells, get, post


@pytest.fixture(scope="module")
def console(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc = ConsoleProcess(broker.bootstrap, tmp_path_factory.mktemp("console") / "console.log").start()
    yield proc.url
    proc.close()


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the future resolves
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes, int]],
            headers: list[tuple[str, bytes]] | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 5})
    for key, value, partition in records:
        p.produce(topic, value, key=key, partition=partition, headers=headers or [])
    assert p.flush(15) == 0


def test_cluster_page_shows_the_broker_its_disk_and_health(broker: BrokerProcess, console: str) -> None:
    page = get(console, "/cluster")
    assert page.status == 200, page.text
    [header, row] = cells(page.text, "brokers")
    assert header[:5] == ["id", "address", "rack", "controller", "up since"]
    by = dict(zip(header, row, strict=True))
    assert by["id"] == "0" and by["address"] == broker.bootstrap and by["controller"] == "yes"
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \(\d+ (s|min)", by["up since"]), by
    assert by["log dir"] == os.path.abspath(broker.data_dir)
    assert re.fullmatch(r"[\d.]+ (B|KiB|MiB|GiB)", by["size"]) and " of " in by["disk free"]
    assert '<b id="under-count" class="ok">0</b>' in page.text
    assert '<b id="offline-count" class="ok">0</b>' in page.text
    assert "embedded" in page.text and 'id="zookeeper"' not in page.text  # one broker, no ZooKeeper
    assert get(console, "/").url.endswith("/cluster")


def test_topic_lifecycle_through_the_forms(broker: BrokerProcess, console: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    page = post(console, "/topics", name="web-life", partitions="3", replication_factor="1",
                configs="retention.ms=3600000")
    assert page.url.endswith("/topics/web-life?notice=Created+topic+web-life.") and "Created topic web-life." in page.text
    assert len(admin.list_topics(timeout=10).topics["web-life"].partitions) == 3
    again = post(console, "/topics", name="web-life", partitions="1")
    assert "TOPIC_ALREADY_EXISTS" in again.text and 'class="error"' in again.text

    produce(broker.bootstrap, "web-life", [(None, b"x" * 200, i % 2) for i in range(40)])
    page = get(console, "/topics/web-life")
    rows = cells(page.text, "partitions")
    assert [r[:7] for r in rows[1:]] == [["0", "0", "0", "0", "0", "20", "20"], ["1", "0", "0", "0", "0", "20", "20"],
                                         ["2", "0", "0", "0", "0", "0", "0"]]
    on_disk = sum(f.stat().st_size for f in (broker.data_dir / "web-life-0").glob("*.log"))
    assert rows[1][7] == f"{on_disk / 1024:.1f} KiB" and rows[3][7] == "0 B"
    configs = {r[0]: (r[1], r[2]) for r in cells(page.text, "configs")[1:]}
    assert configs["retention.ms"] == ("3600000", "topic override")
    assert configs["cleanup.policy"] == ("delete", "default")

    listed = {r[0]: r for r in cells(get(console, "/topics").text, "topics")[1:]}
    # The topic's size is its partitions' sum (partition 1's batches need not be the size of 0's).
    total = sum(f.stat().st_size for i in range(3) for f in (broker.data_dir / f"web-life-{i}").glob("*.log"))
    assert listed["web-life"][1:5] == ["3", "1", f"{total / 1024:.1f} KiB", "40"]

    # Configs: set, then remove an override; checked with confluent-kafka's admin.
    page = post(console, "/topics/web-life/configs", name="segment.bytes", value="1048576", action="set")
    assert "Set segment.bytes=1048576." in page.text
    res = ConfigResource(ConfigResource.Type.TOPIC, "web-life")
    described = admin.describe_configs([res])[res].result(10)
    assert described["segment.bytes"].value == "1048576"
    post(console, "/topics/web-life/configs", name="retention.ms", action="delete")
    described = admin.describe_configs([res])[res].result(10)
    assert described["retention.ms"].value == "604800000"  # back to the default
    bad = post(console, "/topics/web-life/configs", name="retention.ms", value="soon", action="set")
    assert 'class="error"' in bad.text and "retention.ms" in bad.text

    # Partitions: more, never fewer.
    page = post(console, "/topics/web-life/partitions", count="5")
    assert "web-life now has 5 partitions." in page.text
    assert len(admin.list_topics(timeout=10).topics["web-life"].partitions) == 5
    fewer = post(console, "/topics/web-life/partitions", count="2")
    assert "INVALID_PARTITIONS" in fewer.text

    # Delete: only with the name typed.
    refused = post(console, "/topics/web-life/delete", confirm="web")
    assert "type the topic&#39;s name (web-life) to delete it" in refused.text
    assert "web-life" in admin.list_topics(timeout=10).topics
    page = post(console, "/topics/web-life/delete", confirm="web-life")
    assert page.url.split("?")[0].endswith("/topics") and "Deleted topic web-life." in page.text
    deadline = time.monotonic() + 10
    while "web-life" in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "web-life" not in admin.list_topics(timeout=10).topics
    missing = get(console, "/topics/web-life")
    assert missing.status == 502 and "topic web-life does not exist" in missing.text


def messages(console: str, topic: str, **query: str) -> list[dict[str, str]]:
    page = get(console, f"/topics/{topic}/messages", **query)
    assert page.status == 200, page.text
    rows = cells(page.text, "messages")
    header = rows[0]
    return [dict(zip(header, r, strict=True)) for r in rows[1:] if len(r) == len(header)]


def test_message_browser(broker: BrokerProcess, console: str) -> None:
    create(broker.bootstrap, "web-msgs", 2)
    before = int(time.time() * 1000)
    produce(broker.bootstrap, "web-msgs", [(b"order-%d" % (i % 5), json.dumps({"n": i, "item": f"thing {i}"}).encode(),
                                            i % 2) for i in range(20)], headers=[("source", b"web")])
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    produce(broker.bootstrap, "web-msgs", [(b"late", b"\x00\xffbinary", 0)])

    newest = messages(console, "web-msgs")
    assert len(newest) == 21
    assert (newest[0]["partition"], newest[0]["offset"], newest[0]["key"]) == ("0", "10", "late")
    # then the newest of the rest (produced in the same millisecond, perhaps: either partition first)
    assert {json.loads(newest[i]["value"])["n"] for i in (1, 2)} == {18, 19}
    assert json.loads(newest[1]["value"])["item"] == f"thing {json.loads(newest[1]['value'])['n']}"
    assert '\n  "n": 19' in get(console, "/topics/web-msgs/messages").text.replace("&#34;", '"')  # pretty
    assert newest[1]["headers"] == "source: web"
    assert [m["offset"] for m in messages(console, "web-msgs", partition="1", mode="oldest", limit="3")] == ["0", "1", "2"]
    by_offset = messages(console, "web-msgs", partition="0", mode="offset", offset="8")
    assert [(m["offset"], m["key"]) for m in by_offset] == [("8", "order-1"), ("9", "order-3"), ("10", "late")]
    after = messages(console, "web-msgs", mode="timestamp", timestamp=str(middle))
    assert [m["key"] for m in after] == ["late"]
    assert len(messages(console, "web-msgs", mode="timestamp", timestamp=str(before))) == 21
    keyed = messages(console, "web-msgs", key="order-3")
    assert [json.loads(m["value"])["n"] for m in keyed] == [18, 13, 8, 3]  # newest first
    found = messages(console, "web-msgs", search="thing 1")
    assert sorted(json.loads(m["value"])["n"] for m in found) == [1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    hexed = messages(console, "web-msgs", partition="0", mode="offset", offset="10", format="hex")
    assert hexed[0]["value"] == "00 ff 62 69 6e 61 72 79" and hexed[0]["key"] == "6c 61 74 65"
    text = messages(console, "web-msgs", partition="0", mode="offset", offset="10", format="text")
    assert text[0]["value"] == "\x00\ufffdbinary"  # NUL is UTF-8; 0xff is not
    bad = get(console, "/topics/web-msgs/messages", partition="7")
    assert "web-msgs has no partition 7" in bad.text

    # Produce a test message through the form; a real consumer reads it.
    page = post(console, "/topics/web-msgs/produce", partition="1", key="k-form", value='{"from": "form"}',
                headers="a=1, b=two")
    assert "Produced a record to web-msgs-1 at offset 10." in page.text
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "web-reader", "log_level": 0})
    c.assign([TopicPartition("web-msgs", 1, 10)])
    m = c.poll(10)
    c.close()
    assert m is not None and m.error() is None
    assert (m.key(), m.value(), m.headers()) == (b"k-form", b'{"from": "form"}', [("a", b"1"), ("b", b"two")])
    assert 'id="produce"' in get(console, "/topics/web-msgs/messages").text
    # An internal topic is browsed, not written: the broker refuses clients' records there.
    commit(broker.bootstrap, "web-internal", {("web-msgs", 0): 1})
    internal = get(console, "/topics/__consumer_offsets/messages")
    assert internal.status == 200 and "__consumer_offsets" in internal.text and 'id="produce"' not in internal.text


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    c.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    c.close()
    return [tp.offset for tp in got]


def test_group_lag_reset_and_delete(broker: BrokerProcess, console: str) -> None:
    create(broker.bootstrap, "web-lag", 2)
    produce(broker.bootstrap, "web-lag", [(None, b"v", i % 2) for i in range(30)])
    commit(broker.bootstrap, "web-g", {("web-lag", 0): 5, ("web-lag", 1): 12})
    page = get(console, "/groups")
    assert ["web-g", "classic", "Empty"] == next(r[:3] for r in cells(page.text, "groups") if r[0] == "web-g")
    page = get(console, "/groups/web-g")
    assert [r[:5] for r in cells(page.text, "offsets")[1:3]] == [["web-lag", "0", "5", "15", "10"],
                                                                 ["web-lag", "1", "12", "15", "3"]]
    assert '<b id="total-lag">13</b>' in page.text

    # Lag over time: the console samples every second here.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and '<svg class="spark"' not in get(console, "/groups/web-g").text:
        time.sleep(0.5)
    assert '<svg class="spark"' in get(console, "/groups/web-g").text

    dry = post(console, "/groups/web-g/reset", topic="web-lag", strategy="earliest", value="", execute="0")
    assert "Dry run: nothing was changed." in dry.text
    assert cells(dry.text, "plan")[1:] == [["web-lag", "0", "5", "0"], ["web-lag", "1", "12", "0"]]
    assert committed(broker.bootstrap, "web-g", "web-lag", 2) == [5, 12]
    by_offset = post(console, "/groups/web-g/reset", topic="", strategy="offset", value="99", execute="0")
    assert cells(by_offset.text, "plan")[1:] == [["web-lag", "0", "5", "15"], ["web-lag", "1", "12", "15"]]
    done = post(console, "/groups/web-g/reset", topic="web-lag", strategy="offset", value="7", execute="1")
    assert "Reset 2 offsets of web-g." in done.text
    assert committed(broker.bootstrap, "web-g", "web-lag", 2) == [7, 7]
    post(console, "/groups/web-g/reset", topic="web-lag", strategy="latest", value="", execute="1")
    assert committed(broker.bootstrap, "web-g", "web-lag", 2) == [15, 15]
    bad = post(console, "/groups/web-g/reset", topic="web-lag", strategy="timestamp", value="yesterday", execute="0")
    assert "cannot plan the reset" in bad.text

    page = post(console, "/groups/web-g/delete")
    assert "Deleted group web-g." in page.text
    assert "web-g" not in [r[0] for r in cells(get(console, "/groups").text, "groups")]


def test_reset_is_refused_while_the_group_has_members(broker: BrokerProcess, console: str) -> None:
    create(broker.bootstrap, "web-busy", 1)
    produce(broker.bootstrap, "web-busy", [(None, b"v", 0) for _ in range(5)])
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "web-busy-g", "log_level": 0,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["web-busy"])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not c.assignment():
            c.poll(0.2)
        c.commit(offsets=[TopicPartition("web-busy", 0, 3)], asynchronous=False)
        page = get(console, "/groups/web-busy-g")
        assert '<b id="group-state">Stable</b>' in page.text
        assert cells(page.text, "members")[1][3] == "web-busy-0"
        refused = post(console, "/groups/web-busy-g/reset", topic="", strategy="earliest", value="", execute="1")
        assert "has active members (Stable)" in refused.text
        assert committed(broker.bootstrap, "web-busy-g", "web-busy", 1) == [3]
    finally:
        c.close()


def test_open_transactions_with_their_age(broker: BrokerProcess, console: str) -> None:
    create(broker.bootstrap, "web-txn", 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "web-tx-1", "log_level": 0})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("web-txn", b"open")
    p.flush(10)
    try:
        time.sleep(1.1)
        rows = cells(get(console, "/transactions").text, "transactions")
        row = next(r for r in rows if r[0] == "web-tx-1")
        assert row[1] == "Ongoing" and row[7] == "web-txn-0"
        assert re.fullmatch(r"\d+ s", row[5]) and int(row[5].split()[0]) >= 1
    finally:
        p.abort_transaction(10)

    def listed() -> list[str]:
        return [r[0] for r in cells(get(console, "/transactions").text, "transactions")[1:]]

    deadline = time.monotonic() + 10  # PrepareAbort until the markers are written, then gone
    while "web-tx-1" in listed() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "web-tx-1" not in listed()


def test_changes_from_another_sites_page_are_refused(broker: BrokerProcess, console: str) -> None:
    import urllib.error
    import urllib.request

    create(broker.bootstrap, "web-csrf", 1)
    for origin, expected in (("http://evil.example", 403), (console, 200)):
        request = urllib.request.Request(console + "/topics/web-csrf/delete", data=b"confirm=web-csrf-no",
                                         method="POST", headers={"Origin": origin})
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
        assert status == expected, origin
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert "web-csrf" in admin.list_topics(timeout=10).topics


def test_console_served_by_the_broker(tmp_path: Path) -> None:
    """``dmq server --console``: the same pages from inside the broker process."""
    from support.console import SERVING, wait_for_line
    from support.ports import free_port

    port = free_port()
    b = BrokerProcess(tmp_path / "data", extra_args=["--console", f"127.0.0.1:{port}"]).start()
    try:
        assert b.proc is not None
        m = next((SERVING.search(line) for line in b.lines if SERVING.search(line)), None)
        url = m.group(1) if m else wait_for_line(b.proc, 30, b.log_path)
        assert url == f"http://127.0.0.1:{port}"
        page = get(url, "/cluster")
        assert page.status == 200 and cells(page.text, "brokers")[1][1] == b.bootstrap
        metrics = get(url, "/metrics")  # the broker's own metrics, beside the pages
        assert metrics.status == 200
        assert 'dmq_requests_total{request="Metadata"}' in metrics.text, metrics.text[:500]
        assert b.stop() == 0  # SIGTERM stops both, cleanly
    finally:
        b.close()


def test_share_group_members_start_offsets_and_reset(broker: BrokerProcess, console: str) -> None:
    from confluent_kafka import AcknowledgeType, ShareConsumer
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ResourceType

    create(broker.bootstrap, "web-sg", 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    config = ConfigResource(ResourceType.GROUP, "web-share", incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([config])[config].result(10)
    produce(broker.bootstrap, "web-sg", [(None, b"%d" % i, 0) for i in range(20)])
    c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "web-share", "max.poll.records": 5,
                       "share.acknowledgement.mode": "explicit", "log_level": 0})
    try:
        c.subscribe(["web-sg"])
        accepted = 0
        deadline = time.monotonic() + 20
        while accepted < 5 and time.monotonic() < deadline:
            for m in c.poll(0.5):
                if accepted < 5:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                    accepted += 1
                else:
                    c.acknowledge(m, AcknowledgeType.RELEASE)
        c.commit_sync(10)
        assert ["web-share", "share", "Stable"] == next(
            r[:3] for r in cells(get(console, "/groups").text, "groups") if r[0] == "web-share")
        page = get(console, "/groups/web-share")
        assert "Share group web-share" in page.text and '<b id="group-state">Stable</b>' in page.text
        [member] = cells(page.text, "members")[1:]
        assert member[3] == "web-sg-0"
        [row] = cells(page.text, "offsets")[1:2]
        assert row[:2] == ["web-sg", "0"] and row[3] == "20" and int(row[2]) >= 5
        assert int(row[4]) == 20 - int(row[2])  # lag: from the start offset to the end
        refused = post(console, "/groups/web-share/reset", topic="", strategy="earliest", value="", execute="1")
        assert "has active members (Stable)" in refused.text
        deadline = time.monotonic() + 15  # lag over time: sampled every second here
        while time.monotonic() < deadline and '<svg class="spark"' not in get(console, "/groups/web-share").text:
            time.sleep(0.5)
        assert '<svg class="spark"' in get(console, "/groups/web-share").text
    finally:
        c.close()
    deadline = time.monotonic() + 20
    while "Empty" not in get(console, "/groups/web-share").text and time.monotonic() < deadline:
        time.sleep(0.3)
    done = post(console, "/groups/web-share/reset", topic="web-sg", strategy="offset", value="2", execute="1")
    assert "Reset 1 offsets of web-share." in done.text, done.text[-3000:]
    row = cells(get(console, "/groups/web-share").text, "offsets")[1]
    assert row[:4] == ["web-sg", "0", "2", "20"]  # (the broker knows the lag again once the group reads)


def test_names_that_need_quoting_in_urls(broker: BrokerProcess, console: str) -> None:
    create(broker.bootstrap, "web-q", 1)
    produce(broker.bootstrap, "web-q", [(None, b"v", 0)])
    commit(broker.bootstrap, "orders & refunds", {("web-q", 0): 1})
    groups = get(console, "/groups")
    assert 'href="/groups/orders%20%26%20refunds"' in groups.text
    page = get(console, "/groups/orders%20%26%20refunds")
    assert "Consumer group orders &amp; refunds" in page.text
    done = post(console, "/groups/orders%20%26%20refunds/reset", topic="web-q", strategy="earliest", value="",
                execute="1")
    from urllib.parse import unquote

    assert unquote(done.url.split("?")[0]).endswith("/groups/orders & refunds") and "Reset 1 offsets" in done.text
    assert committed(broker.bootstrap, "orders & refunds", "web-q", 1) == [0]


def test_topics_list_shows_the_message_rate(broker: BrokerProcess, console: str) -> None:
    create(broker.bootstrap, "web-rate", 2)

    def rate() -> str:
        return next(r for r in cells(get(console, "/topics").text, "topics")[1:] if r[0] == "web-rate")[5]

    time.sleep(2.5)  # the console samples every second here
    produce(broker.bootstrap, "web-rate", [(None, b"v", i % 2) for i in range(300)])
    shown = rate()
    m = re.fullmatch(r"([\d.]+)/s", shown)
    # 300 records since a sample taken at most a minute ago, at least a second ago
    assert m and 300 / 60 <= float(m.group(1)) <= 300, shown
