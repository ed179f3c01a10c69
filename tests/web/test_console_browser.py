"""The console in a real headless browser (Debian's chromium driven by Playwright): click
through the pages, use the message browser, reset a group's offsets (dry run, then for
real, checked with a real consumer's committed offsets). Screenshots go to
``tests/web/screenshots/`` (or ``$DMQ_SCREENSHOTS``), printed at the start of the test."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.broker import BrokerProcess
from support.console import CHROMIUM, CHROMIUM_ARGS, ConsoleProcess, screenshots_dir

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason="Debian's chromium is not installed (scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module")
def console(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc = ConsoleProcess(broker.bootstrap, tmp_path_factory.mktemp("console") / "console.log").start()
    yield proc.url
    proc.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    c.close()
    return [tp.offset for tp in got]


def consume_and_commit(bootstrap: str, group: str, topic: str, n: int) -> None:
    """A real consumer of ``group`` reads ``n`` records, commits and leaves."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
            c.commit(m, asynchronous=False)
    c.close()
    assert got == n


def test_click_through_browse_messages_and_reset_offsets(broker: BrokerProcess, console: str,
                                                        browser: Any) -> None:
    shots = screenshots_dir()
    print(f"\nscreenshots in {shots}")
    page = browser.new_page(viewport={"width": 1400, "height": 900})

    # Cluster
    page.goto(console + "/cluster")
    assert page.locator("#brokers tr").count() == 2
    assert page.locator("#brokers td").nth(1).inner_text() == broker.bootstrap
    page.screenshot(path=str(shots / "cluster.png"), full_page=True)

    # Topics: create one through the form
    page.click("header >> text=Topics")
    page.wait_for_url("**/topics")
    page.click("summary")
    page.fill("#create-topic input[name=name]", "orders")
    page.fill("#create-topic input[name=partitions]", "3")
    page.fill("#create-topic input[name=configs]", "retention.ms=86400000")
    page.click("#create-topic button")
    page.wait_for_url("**/topics/orders?**")
    assert page.inner_text("#notice") == "Created topic orders."
    assert page.inner_text("#partition-count") == "3"

    p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for i in range(30):
        p.produce("orders", json.dumps({"order": i, "total": i * 10}).encode(), key=f"customer-{i % 4}".encode(),
                  partition=i % 3, headers=[("origin", b"shop")])
    assert p.flush(10) == 0
    page.reload()
    assert page.inner_text("#message-count") == "30"
    page.screenshot(path=str(shots / "topic.png"), full_page=True)

    # Message browser: newest first, by partition and offset, by key, by search, as hex
    page.click("#browse")
    page.wait_for_url("**/topics/orders/messages")
    assert page.locator("#messages tr").count() == 31
    page.fill("#browse-form input[name=partition]", "1")
    page.select_option("#browse-form select[name=mode]", "offset")
    page.fill("#browse-form input[name=offset]", "7")
    page.click("#browse-form button")
    page.wait_for_load_state()
    offsets = page.locator("#messages tr td:nth-child(2)").all_inner_texts()
    assert offsets == ["7", "8", "9"]
    assert json.loads(page.locator("#messages pre.value").first.inner_text()) == {"order": 22, "total": 220}
    page.screenshot(path=str(shots / "messages-offset.png"), full_page=True)
    page.fill("#browse-form input[name=partition]", "all")
    page.select_option("#browse-form select[name=mode]", "newest")
    page.fill("#browse-form input[name=key]", "customer-3")
    page.click("#browse-form button")
    page.wait_for_load_state()
    orders = [json.loads(v)["order"] for v in page.locator("#messages pre.value").all_inner_texts()]
    assert orders == [27, 23, 19, 15, 11, 7, 3]
    page.fill("#browse-form input[name=key]", "")
    page.fill("#browse-form input[name=search]", '"total": 290')
    page.select_option("#browse-form select[name=format]", "hex")
    page.click("#browse-form button")
    page.wait_for_load_state()
    assert page.locator("#messages pre.value").all_inner_texts() == [
        json.dumps({"order": 29, "total": 290}).encode().hex(" ")]
    page.screenshot(path=str(shots / "messages-search-hex.png"), full_page=True)

    # Produce a test message from the page
    page.fill("#produce input[name=partition]", "2")
    page.fill("#produce input[name=key]", "from-browser")
    page.fill("#produce textarea[name=value]", '{"order": 1000}')
    page.click("#produce button")
    page.wait_for_url("**/topics/orders/messages?**")
    assert page.inner_text("#notice") == "Produced a record to orders-2 at offset 10."

    # A consumer group: a real consumer commits, the console resets it
    consume_and_commit(broker.bootstrap, "billing", "orders", 31)
    assert committed(broker.bootstrap, "billing", "orders", 3) == [10, 10, 11]
    page.click("header >> text=Consumer groups")
    page.wait_for_url("**/groups")
    page.click("#groups >> text=billing")
    page.wait_for_url("**/groups/billing")
    assert page.inner_text("#total-lag") == "0"
    page.select_option("#reset-form select[name=strategy]", "offset")
    page.fill("#reset-form input[name=value]", "4")
    page.click("#dry-run")
    page.wait_for_load_state()
    assert page.inner_text("#plan-title").startswith("Dry run: nothing was changed.")
    plan = [r.split("\t") for r in page.locator("#plan tr").all_inner_texts()[1:]]
    assert plan == [["orders", "0", "10", "4"], ["orders", "1", "10", "4"], ["orders", "2", "11", "4"]]
    assert committed(broker.bootstrap, "billing", "orders", 3) == [10, 10, 11]
    page.screenshot(path=str(shots / "group-dry-run.png"), full_page=True)
    page.click("#execute")
    page.wait_for_url("**/groups/billing?**")
    assert page.inner_text("#notice") == "Reset 3 offsets of billing."
    assert committed(broker.bootstrap, "billing", "orders", 3) == [4, 4, 4]
    assert page.inner_text("#total-lag") == str(6 + 6 + 7)
    page.screenshot(path=str(shots / "group-reset.png"), full_page=True)

    page.click("header >> text=Transactions")
    page.wait_for_url("**/transactions")
    assert page.locator("#transactions").count() == 1
    page.screenshot(path=str(shots / "transactions.png"), full_page=True)
    for name in ("cluster", "topic", "messages-offset", "messages-search-hex", "group-dry-run",
                 "group-reset", "transactions"):
        assert (shots / f"{name}.png").stat().st_size > 10_000
    page.close()
