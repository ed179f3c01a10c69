"""``dmq transactions`` (like kafka-transactions.sh) against a real broker, with real
transactional producers (issue 11): list, describe, describe-producers, and a hanging
transaction found and aborted."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from support.broker import BrokerProcess
from support.cli import closed_port, run_dmq, run_dmq_at_terminal
from support.cluster import Cluster
from support.zookeeper import available as zookeeper_available

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module
from dmq.record.batch import TRANSACTIONAL_MASK
from dmq.record.records import encode_batch

HOUR_MS = 3_600_000
# A hanging transaction is made as Kafka's own tests make one: a transactional batch the
# coordinator never heard of, written with verification (KIP-890) turned off.
UNVERIFIED = {"transaction.partition.verification.enable": "false"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The module's broker (instead of conftest's): it does not verify transactions."""
    proc = BrokerProcess(tmp_path_factory.mktemp("broker") / "data",
                         overrides={"group.initial.rebalance.delay.ms": "0", **UNVERIFIED}).start()
    yield proc
    proc.close()


def _create(broker: BrokerProcess, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


@pytest.fixture
def open_txn(broker: BrokerProcess) -> Iterator[Callable[[str], Producer]]:
    """A confluent-kafka transactional producer whose transaction the test opens; aborted
    at the end if still open."""
    producers: list[Producer] = []

    def make_producer(txn_id: str) -> Producer:
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id, "log_level": 0,
                      "transaction.timeout.ms": 300_000})
        p.init_transactions(30)
        producers.append(p)
        return p

    yield make_producer
    for p in producers:
        try:
            p.abort_transaction(10)
        except Exception:  # noqa: BLE001 - no transaction open
            pass


def _hanging(broker: BrokerProcess, topic: str, values: list[bytes], age_ms: int = HOUR_MS) -> tuple[int, int]:
    """A transaction the coordinator never heard of: an idempotent producer id writes a
    transactional batch under a transactional id the coordinator does not know, without
    AddPartitionsToTxn (the broker does not verify: UNVERIFIED).
    Its records are stamped ``age_ms`` ago. Returns (producer id, first offset)."""
    with WireClient("127.0.0.1", broker.port) as c:
        init = c.request(make(request_class(22, 4), transactional_id=None, transaction_timeout=timedelta(seconds=60),
                              producer_id=-1, producer_epoch=-1))
        assert init.error_code == ErrorCode.none
        batch = encode_batch([(None, v, []) for v in values], timestamp=int(time.time() * 1000) - age_ms,
                             producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=0,
                             attributes_extra=TRANSACTIONAL_MASK)
        mod = request_module(0, 9)
        resp = c.request(make(request_class(0, 9), transactional_id="ghost", acks=-1, timeout=timedelta(seconds=10),
                              topic_data=(make(mod.TopicProduceData, name=topic, partition_data=(
                                  make(mod.PartitionProduceData, index=0, records=batch),)),)))
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.none, part
        return init.producer_id, part.base_offset


def _read_committed(broker: BrokerProcess, topic: str, expect: int, seconds: float = 8) -> list[str]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"rc-{topic}-{time.monotonic()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 0})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(got) < expect:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            got.append(msg.value().decode())
    consumer.close()
    return got


def _stable_and_end(broker: BrokerProcess, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) of partition 0."""
    ends = []
    for isolation in ("read_committed", "read_uncommitted"):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso-probe", "isolation.level": isolation,
                      "log_level": 0})
        ends.append(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1])
        c.close()
    return ends[0], ends[1]


def _cell_row(out: str, *cells: str) -> bool:
    """Whether a table row holds these cells, in this order."""
    return re.search(r"│\s*" + r"\s*│.*?".join(re.escape(c) for c in cells) + r"\s*│", out) is not None


def test_list_and_describe_show_an_open_transaction(broker: BrokerProcess, open_txn: Callable[[str], Producer]) -> None:
    topic = "cli-txn-listed"
    _create(broker, topic, 2)
    producer = open_txn("cli-txn-open")
    producer.begin_transaction()
    producer.produce(topic, b"pending", partition=1)
    assert producer.flush(10) == 0
    listed = run_dmq(broker.bootstrap, "transactions", "list").stdout
    m = re.search(r"│ cli-txn-open\s+│\s+0 │\s+(\d+) │ Ongoing\s+│", listed)
    assert m, listed
    pid = m.group(1)
    out = run_dmq(broker.bootstrap, "transactions", "describe", "--transactional-id", "cli-txn-open").stdout
    fields = dict(line.split(None, 1) for line in out.splitlines())
    assert fields["transactional-id"] == "cli-txn-open" and fields["coordinator"] == "0"
    assert fields["producer-id"] == pid and fields["producer-epoch"] == "0"
    assert fields["state"] == "Ongoing" and fields["timeout-ms"] == "300000"
    assert fields["partitions"] == f"{topic}-1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", fields["start-time"]), out
    assert 0 <= int(fields["duration-ms"]) < 120_000
    producer.commit_transaction(30)

    # No transaction yet: its start time is -1 on the wire, which kio alone cannot decode.
    open_txn("cli-txn-idle")
    idle = run_dmq(broker.bootstrap, "transactions", "describe", "--transactional-id", "cli-txn-idle").stdout
    fields = dict(line.split(None, 1) for line in idle.splitlines())
    assert (fields["state"], fields["start-time"], fields["duration-ms"], fields["partitions"]) == (
        "Empty", "-", "-", "-"), idle


def test_describe_producers_shows_the_open_transaction(broker: BrokerProcess, open_txn: Callable[[str], Producer]) -> None:
    topic = "cli-txn-producers"
    _create(broker, topic, 2)
    producer = open_txn("cli-txn-producers")
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(10) == 0
    described = run_dmq(broker.bootstrap, "transactions", "describe", "--transactional-id", "cli-txn-producers").stdout
    pid = dict(line.split(None, 1) for line in described.splitlines())["producer-id"]
    out = run_dmq(broker.bootstrap, "transactions", "describe-producers", "--topic", topic, "--partition", "0").stdout
    assert f"Partition {topic}-0  broker 0  active producers 1" in out, out
    # producer id, epoch, coordinator epoch (no marker yet), last sequence, ..., txn start offset
    assert re.search(rf"│\s+{pid} │\s+0 │\s+-1 │\s+2 │ \d{{4}}-\S+Z │\s+0 │", out), out
    empty = run_dmq(broker.bootstrap, "transactions", "describe-producers", "-t", topic, "-p", "1").stdout
    assert f"Partition {topic}-1  broker 0  active producers 0" in empty and "│" not in empty
    producer.commit_transaction(30)
    after = run_dmq(broker.bootstrap, "transactions", "describe-producers", "-t", topic, "-p", "0").stdout
    # The COMMIT marker: coordinator epoch 0, no open transaction.
    assert re.search(rf"│\s+{pid} │\s+0 │\s+0 │\s+2 │ \S+ │\s+-1 │", after), after


def test_find_hanging_and_abort(broker: BrokerProcess, open_txn: Callable[[str], Producer]) -> None:
    topic = "cli-txn-hanging"
    _create(broker, topic, 1)
    ghost, start = _hanging(broker, topic, [b"ghost-0", b"ghost-1"])
    assert start == 0
    healthy = open_txn("cli-txn-healthy")
    healthy.begin_transaction()
    healthy.produce(topic, b"healthy", partition=0)
    assert healthy.flush(10) == 0

    row = (topic, "0", str(ghost), "0", "-1", "0")
    found = run_dmq(broker.bootstrap, "transactions", "find-hanging", "--topic", topic).stdout
    assert _cell_row(found, *row), found
    assert found.count(f"│ {topic}") == 1, found
    assert f"dmq transactions abort --topic {topic} --partition 0 --start-offset 0" in found
    # Every open transaction is old enough now; the healthy one is still not hanging (its
    # coordinator has it Ongoing on this partition).
    every = run_dmq(broker.bootstrap, "transactions", "find-hanging", "--max-transaction-timeout", "0").stdout
    assert _cell_row(every, *row) and every.count(f"│ {topic}") == 1, every
    by_broker = run_dmq(broker.bootstrap, "transactions", "find-hanging", "--broker-id", "0").stdout
    assert _cell_row(by_broker, *row), by_broker
    for args in (("find-hanging", "-t", topic), ("describe-producers", "-t", topic, "-p", "0")):
        shown = run_dmq_at_terminal(broker.bootstrap, "transactions", *args, columns=80)
        table = [line for line in shown.stdout.splitlines() if line[:1] in "┏┃┡│└"]
        assert shown.returncode == 0 and table and max(map(len, table)) <= 80, shown.stdout
        assert re.search(rf"│\s+{ghost} │\s+0 │\s+-1 │", shown.stdout), shown.stdout  # one line, not folded
    recent = run_dmq(broker.bootstrap, "transactions", "find-hanging", "--topic", topic,
                     "--max-transaction-timeout", "120").stdout
    assert "No hanging transactions." in recent, recent

    healthy.commit_transaction(30)
    stable, end = _stable_and_end(broker, topic)
    assert (stable, end) == (0, 4)  # 2 ghost records, "healthy", its COMMIT marker
    assert _read_committed(broker, topic, 1, seconds=3) == []  # held behind the hanging transaction

    wrong = run_dmq(broker.bootstrap, "transactions", "abort", "--topic", topic, "--partition", "0",
                    "--start-offset", "1", check=False)
    assert wrong.returncode == 1
    assert wrong.stderr.splitlines() == [f"error: no open transaction starts at offset 1 of {topic}-0 "
                                         f"(open ones start at 0)"], wrong.stderr
    aborted = run_dmq(broker.bootstrap, "transactions", "abort", "--topic", topic, "--partition", "0",
                      "--start-offset", "0").stdout
    assert f"Aborted the transaction of producer {ghost} (epoch 0) that started at offset 0 of {topic}-0." in aborted
    assert _stable_and_end(broker, topic) == (5, 5)
    assert _read_committed(broker, topic, 2, seconds=3) == ["healthy"]
    after = run_dmq(broker.bootstrap, "transactions", "find-hanging", "--topic", topic,
                    "--max-transaction-timeout", "0").stdout
    assert "No hanging transactions." in after, after
    again = run_dmq(broker.bootstrap, "transactions", "abort", "-t", topic, "-p", "0", "--start-offset", "0",
                    check=False)
    assert again.returncode == 1 and again.stderr.splitlines() == [
        f"error: no open transaction starts at offset 0 of {topic}-0 (it has none)"], again.stderr


def test_describe_producers_errors_on_the_wire(broker: BrokerProcess) -> None:
    _create(broker, "cli-txn-wire", 1)
    mod = request_module(61, 0)
    with WireClient("127.0.0.1", broker.port) as c:
        resp = c.request(make(request_class(61, 0), topics=(
            make(mod.TopicRequest, name="cli-txn-wire", partition_indexes=(0, 7)),
            make(mod.TopicRequest, name="cli-txn-nowhere", partition_indexes=(0,)))))
    got = {(t.name, p.partition_index): (p.error_code, p.active_producers) for t in resp.topics for p in t.partitions}
    assert got == {("cli-txn-wire", 0): (ErrorCode.none, ()),
                   ("cli-txn-wire", 7): (ErrorCode.unknown_topic_or_partition, ()),
                   ("cli-txn-nowhere", 0): (ErrorCode.unknown_topic_or_partition, ())}


@pytest.mark.skipif(not zookeeper_available(), reason="Debian's zookeeper package is not installed")
def test_in_a_cluster_followers_describe_producers_and_the_leader_aborts(tmp_path: Path) -> None:
    """As Kafka, any replica answers DescribeProducers from its own log (find-hanging
    --broker-id asks that broker); a broker without a replica answers NOT_LEADER_OR_FOLLOWER."""
    topic = "cli-txn-rf2"
    c = Cluster(tmp_path, size=3, overrides=UNVERIFIED).start()
    try:
        c.create_topic(topic, partitions=1, rf=2)
        part = c.partition(topic)
        leader = part.leader
        follower = next(r for r in part.replicas if r != leader)
        outsider = next(b for b in c.brokers if b not in part.replicas)
        ghost, start = _hanging(c.brokers[leader], topic, [b"ghost"])  # acks=all: the follower has it
        mod = request_module(61, 0)
        for broker_id, expected in ((leader, ErrorCode.none), (follower, ErrorCode.none),
                                    (outsider, ErrorCode.not_leader_or_follower)):
            with WireClient("127.0.0.1", c.brokers[broker_id].port) as w:
                resp = w.request(make(request_class(61, 0), topics=(
                    make(mod.TopicRequest, name=topic, partition_indexes=(0,)),)))
            got = resp.topics[0].partitions[0]
            assert got.error_code == expected, (broker_id, got)
            assert [(p.producer_id, p.current_txn_start_offset) for p in got.active_producers] == (
                [(ghost, start)] if expected == ErrorCode.none else [])
        boot = c.brokers[outsider].bootstrap  # every answer comes from another broker
        row = (topic, "0", str(ghost), "0", "-1", str(start))
        assert _cell_row(run_dmq(boot, "transactions", "find-hanging", "--broker-id", str(follower)).stdout, *row)
        assert "No hanging transactions." in run_dmq(boot, "transactions", "find-hanging", "--broker-id",
                                                     str(outsider)).stdout
        described = run_dmq(boot, "transactions", "describe-producers", "-t", topic, "-p", "0").stdout
        assert f"Partition {topic}-0  broker {leader}  active producers 1" in described, described
        run_dmq(boot, "transactions", "abort", "-t", topic, "-p", "0", "--start-offset", str(start))
        c.wait_for(lambda: "No hanging transactions." in run_dmq(
            boot, "transactions", "find-hanging", "--broker-id", str(follower)).stdout,
            "the abort marker on the follower")
    finally:
        c.stop()


@pytest.mark.parametrize("args, message", [
    (("describe", "--transactional-id", "cli-txn-never"), "error: transactional id cli-txn-never does not exist"),
    (("describe-producers", "--topic", "cli-txn-none", "--partition", "0"), "error: topic cli-txn-none does not exist"),
    (("describe-producers", "--topic", "cli-txn-wire", "--partition", "3"),
     "error: topic cli-txn-wire has no partition 3 (it has 1)"),
    (("describe-producers", "--topic", "cli-txn-wire", "--partition", "0", "--broker-id", "5"),
     "error: broker 5 is not in the cluster (brokers: 0)"),
    (("find-hanging", "--topic", "cli-txn-none"), "error: topic cli-txn-none does not exist"),
    (("abort", "--topic", "cli-txn-none", "--partition", "0", "--start-offset", "0"),
     "error: topic cli-txn-none does not exist"),
], ids=["unknown-id", "unknown-topic", "unknown-partition", "unknown-broker", "find-hanging-topic", "abort-topic"])
def test_bad_input_is_one_line(broker: BrokerProcess, args: tuple[str, ...], message: str) -> None:
    _create(broker, "cli-txn-wire", 1)
    res = run_dmq(broker.bootstrap, "transactions", *args, check=False)
    assert res.returncode == 1 and res.stderr.splitlines() == [message], res.stderr


@pytest.mark.parametrize("args", [
    ("list",), ("describe", "--transactional-id", "x"), ("describe-producers", "-t", "x", "-p", "0"),
    ("find-hanging",), ("abort", "-t", "x", "-p", "0", "--start-offset", "0"),
], ids=lambda a: a[0])
def test_no_broker_is_one_line(args: tuple[str, ...]) -> None:
    bootstrap = f"127.0.0.1:{closed_port()}"
    res = run_dmq(bootstrap, "transactions", *args, check=False, timeout=60)
    assert res.returncode == 1
    assert res.stderr.splitlines() == [f"error: cannot reach {bootstrap}: connection refused; is `dmq server` "
                                       f"running? (pass --bootstrap-server HOST:PORT)"], res.stderr


def test_usage_errors_exit_2() -> None:
    res = run_dmq(None, "transactions", "find-hanging", "--partition", "0", check=False)
    assert res.returncode == 2 and res.stderr.splitlines() == ["error: --partition needs --topic"], res.stderr
    res = run_dmq(None, "transactions", "abort", "--topic", "t", "--partition", "0", check=False)
    assert res.returncode == 2 and "--start-offset" in res.stderr and "Traceback" not in res.stderr
