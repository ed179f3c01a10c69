from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from dmq.spark.source import DmqDataSource, DmqSourceError, SourceConfig, split_ranges  # noqa: E402


def test_kafka_prefixed_options_reach_the_consumers() -> None:
    cfg = SourceConfig({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.client.id": "etl",
                        "kafka.group.id": "ignored", "kafka.fetch.max.bytes": "1000000"})
    conf = cfg.client_conf()
    assert conf["bootstrap.servers"] == "h:1" and conf["client.id"] == "etl"
    assert conf["fetch.max.bytes"] == "1000000"
    assert conf["group.id"].startswith("dmq-spark-") and conf["enable.auto.commit"] is False


@pytest.mark.parametrize("options,message", [
    ({"subscribe": "t"}, "bootstrap.servers"),
    ({"bootstrap.servers": "h:1"}, "exactly one"),
    ({"bootstrap.servers": "h:1", "assign": "[1]"}, "assign must be JSON"),
    ({"bootstrap.servers": "h:1", "subscribe": "t", "maxOffsetsPerTrigger": "lots"}, "integer"),
    ({"bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "maybe"}, "true or false"),
])
def test_bad_options_are_clear(options: dict[str, str], message: str) -> None:
    with pytest.raises(DmqSourceError, match=message):
        SourceConfig(options)


@pytest.mark.parametrize("options,message", [
    ({"startingOffsets": "latest"}, "starting offset can't be latest for batch queries"),
    ({"endingOffsets": " earliest"}, "ending offset can't be earliest for batch queries"),
    ({"startingOffsets": '{"t": {"0": 5, "1": -1}}'}, "startingOffsets for t-1 can't be latest"),
    ({"endingOffsets": '{"t": {"0": -2}}'}, "endingOffsets for t-0 can't be earliest"),
])
def test_a_batch_read_refuses_what_spark_refuses(options: dict[str, str], message: str) -> None:
    """A batch read from latest or to earliest read nothing without a word; Spark refuses it."""
    source = DmqDataSource({"bootstrap.servers": "h:1", "subscribe": "t", **options})
    with pytest.raises(DmqSourceError, match=message):
        source.reader(source.schema())
    if "endingOffsets" not in options:  # a stream may start at the latest offsets
        source.streamReader(source.schema())
        # startingTimestamp wins over startingOffsets (Spark's precedence): nothing to refuse.
        DmqDataSource({**source.options, "startingTimestamp": "1"}).reader(source.schema())


def test_a_stream_refuses_ending_offsets() -> None:
    """endingOffsets was ignored by a stream; Spark refuses it."""
    source = DmqDataSource({"bootstrap.servers": "h:1", "subscribe": "t", "endingOffsets": "latest"})
    with pytest.raises(DmqSourceError, match="ending offset not valid in streaming queries"):
        source.streamReader(source.schema())
    source.reader(source.schema())


def test_subscribe_without_a_topic_is_refused() -> None:
    """subscribe="," subscribed to nothing and read nothing, without a word."""
    with pytest.raises(DmqSourceError, match="No topics to subscribe to as specified value for option 'subscribe' "
                                             "is ' , '"):
        SourceConfig({"bootstrap.servers": "h:1", "subscribe": " , "})


def test_min_partitions_splits_ranges_without_gaps() -> None:
    parts = split_ranges({"t": {"0": 10, "1": 0}}, {"t": {"0": 1010, "1": 10}}, 6)
    covered = sorted((p.partition, o) for p in parts for o in range(p.start, p.end))
    assert covered == [(0, o) for o in range(10, 1010)] + [(1, o) for o in range(10)]
    assert len(parts) >= 6


@pytest.mark.parametrize("sizes,wanted", [([1010, 1010, 1013], 4), ([5, 5], 8), ([1, 1, 100], 4),
                                          ([3], 10), ([1000, 1], 7), ([7, 9, 11, 13], 32)])
def test_min_partitions_gives_at_least_that_many_read_tasks(sizes: list[int], wanted: int) -> None:
    """Shares of minPartitions rounded per range once gave fewer tasks (3 ranges of ~1000
    records and minPartitions 4: 3 tasks); pieces are even and never empty."""
    end = {"t": {str(i): n for i, n in enumerate(sizes)}}
    parts = split_ranges({}, end, wanted)
    assert len(parts) >= min(wanted, sum(sizes)) and all(p.end > p.start for p in parts)
    covered = sorted((p.partition, o) for p in parts for o in range(p.start, p.end))
    assert covered == [(i, o) for i, n in enumerate(sizes) for o in range(n)]
    for i in range(len(sizes)):
        lengths = [p.end - p.start for p in parts if p.partition == i]
        assert max(lengths) - min(lengths) <= 1


def test_a_read_whose_broker_is_gone_fails_within_poll_timeout() -> None:
    """An executor reading a range from a broker that does not answer gives up after
    kafkaConsumer.pollTimeoutMs with a clear error, rather than wait forever."""
    import threading
    import time

    from support.cli import closed_port

    from dmq.spark.source import RangePartition, read_range

    port = closed_port()
    cfg = SourceConfig({"bootstrap.servers": f"127.0.0.1:{port}", "subscribe": "gone",
                        "kafkaConsumer.pollTimeoutMs": "2000", "kafka.log_level": "0"})
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            list(read_range(cfg, RangePartition("gone", 0, 0, 10)))
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - inspected below
            outcome.append(e)

    started = time.monotonic()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)
    assert outcome, "the read still waits after 30 s"
    assert isinstance(outcome[0], RuntimeError), outcome[0]
    assert f"nothing from 127.0.0.1:{port} for 2 s at offset 0" in str(outcome[0])
    assert time.monotonic() - started < 15


def test_poll_timeout_must_be_a_positive_integer() -> None:
    with pytest.raises(DmqSourceError, match="kafkaConsumer.pollTimeoutMs must be an integer"):
        SourceConfig({"bootstrap.servers": "h:1", "subscribe": "t", "kafkaConsumer.pollTimeoutMs": "soon"})


def test_a_read_from_an_unreachable_broker_prints_no_client_log_lines() -> None:
    """librdkafka writes its own log lines to stderr (``%3|...|FAIL|...``); the source keeps
    them off unless ``kafka.log_level`` asks for them, and fails with its own error."""
    import subprocess
    import sys

    from support.cli import closed_port

    code = (
        "from dmq.spark.source import RangePartition, SourceConfig, read_range\n"
        f"cfg = SourceConfig({{'bootstrap.servers': '127.0.0.1:{closed_port()}', 'subscribe': 't',"
        " 'kafkaConsumer.pollTimeoutMs': '3000'})\n"
        "try:\n"
        "    list(read_range(cfg, RangePartition('t', 0, 0, 10)))\n"
        "except RuntimeError as e:\n"
        "    print('failed:', e)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "failed: reading t-0: nothing from 127.0.0.1" in res.stdout, res.stdout + res.stderr
    assert "%3|" not in res.stderr and "FAIL" not in res.stderr, res.stderr


def test_a_read_goes_on_across_a_broker_restart(fresh_broker) -> None:  # noqa: ANN001
    """The executors' fetch finds the leader again after the connection drops (a restart
    of the broker here) and returns every record once, within kafkaConsumer.pollTimeoutMs."""
    from confluent_kafka import Producer

    from dmq.spark.source import RangePartition, read_range

    b = fresh_broker.start()
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(20_000):
        p.produce("restart", b"%08d" % i + b"." * 92)
    assert p.flush(30) == 0
    cfg = SourceConfig({"bootstrap.servers": b.bootstrap, "subscribe": "restart", "kafka.log_level": "0",
                        "kafka.max.partition.fetch.bytes": "200000", "kafkaConsumer.pollTimeoutMs": "30000"})
    offsets: list[int] = []
    batches = read_range(cfg, RangePartition("restart", 0, 0, 20_000))
    offsets += next(batches).column("offset").to_pylist()
    assert 0 < len(offsets) < 20_000
    b.stop()
    b.start()
    for rb in batches:
        offsets += rb.column("offset").to_pylist()
    assert offsets == list(range(20_000))
