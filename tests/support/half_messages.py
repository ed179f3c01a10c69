"""Builders for half-message tests: a producer of a group that crashes after its half
message, and the coordinator's view of a group's transactions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kio.schema.errors import ErrorCode

from dmq.client.wire import WireClient
from dmq.protocol.codec import make
from dmq.protocol.extensions import CheckTransactionsRequest

# A producer of the group: sends a half message, runs its "local transaction" (a file in
# ``table`` is the order row), says so, and waits to be killed before it can commit or
# roll back.
CRASHING_PRODUCER = """
import sys, time
from pathlib import Path
from dmq.client.transactions import TransactionProducer
bootstrap, group, topic, key, outcome, table = sys.argv[1:7]
producer = TransactionProducer({"bootstrap.servers": bootstrap, "producer.group": group, "log_level": 0})
txn = producer.begin()
txn.send(topic, key=key.encode(), value=b'{"total": 10}', partition=0)
assert producer.kafka.flush(30) == 0
if outcome == "commit":
    (Path(table) / key).write_text("saved")
print(producer.transactional_id, flush=True)
time.sleep(600)
"""


def crash_producer(bootstrap: str, key: str, outcome: str, table: Path, group: str = "orders",
                   topic: str = "orders") -> str:
    """Run a producer that sends a half message for ``key`` (saving the order when
    ``outcome`` is "commit"), then SIGKILL it; its transactional id."""
    child = subprocess.Popen([sys.executable, "-c", CRASHING_PRODUCER, bootstrap, group, topic, key, outcome,
                              str(table)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        assert line.startswith("__dmq_half/"), line
        return line
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)


def describe_checks(port: int, group: str = "orders") -> dict[str, tuple[str, int, int]]:
    """transactional id -> (state, checks made, last answer) from the group's coordinator."""
    with WireClient("127.0.0.1", port) as c:
        resp = c.request(make(CheckTransactionsRequest, producer_group=group, describe_only=True, answers=()))
    assert resp.error_code == ErrorCode.none, resp
    return {t.transactional_id: (t.state, int(t.checks), int(t.last_answer)) for t in resp.transactions}
