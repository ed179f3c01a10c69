"""The source's offsets without a broker or Spark: what a read task does where records are
missing, and what the driver plans (fakes in support.spark_fakes)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402
from support.spark_fakes import FakeFetcher, FakeMetadata  # noqa: E402

from dmq.spark.fetch import read_offsets  # noqa: E402
from dmq.spark.source import DmqStreamReader, SourceConfig, rate_limit  # noqa: E402


def _read(fetcher: FakeFetcher, start: int, end: int, fail_on_data_loss: bool,
          poll_timeout_ms: int = 5000) -> tuple[list[int], list[str]]:
    losses: list[str] = []

    def data_loss(why: str) -> None:
        losses.append(why)
        if fail_on_data_loss:
            raise RuntimeError(f"data loss: {why}")

    got = [o for rb in read_offsets(fetcher, start, end, include_headers=False, poll_timeout_ms=poll_timeout_ms,
                                    data_loss=data_loss, describe="t-0")
           for o in rb.column("offset").to_pylist()]
    return got, losses


@pytest.mark.parametrize("fail_on_data_loss", [False, True])
@pytest.mark.parametrize("lagging_answers", [2, 5])
def test_a_high_watermark_lagging_after_a_failover_is_waited_for(fail_on_data_loss: bool,
                                                                  lagging_answers: int) -> None:
    """The range [80, 100) was planned against the old leader; the new one's high watermark
    stays at 90 for a few answers. The first empty answer below the end was taken for the log's
    end: data loss, 90..99 skipped for good (failOnDataLoss=false) or the task failed (true)."""
    fetcher = FakeFetcher(log_end=100, high_watermark=lambda n: 90 if n <= lagging_answers else 100)
    got, losses = _read(fetcher, 80, 100, fail_on_data_loss)
    assert got == list(range(80, 100))
    assert losses == []


@pytest.mark.parametrize("fail_on_data_loss", [False, True])
def test_a_log_that_ends_before_the_range_is_data_loss_after_the_poll_timeout(fail_on_data_loss: bool) -> None:
    """Records that never come (the log really ends at 90, say after an unclean election) are
    data loss once the poll timeout has passed and the partition's offsets say so."""
    fetcher = FakeFetcher(log_end=90, high_watermark=lambda n: 90)
    if fail_on_data_loss:
        with pytest.raises(RuntimeError, match="data loss: the log ends at 90"):
            _read(fetcher, 80, 100, True, poll_timeout_ms=300)
    else:
        got, losses = _read(fetcher, 80, 100, False, poll_timeout_ms=300)
        assert got == list(range(80, 90)) and losses == ["the log ends at 90"]
    assert fetcher.offsets_asked == 1 and fetcher.answers > 2


def test_offsets_deleted_while_waiting_are_data_loss_and_the_read_goes_on() -> None:
    """Past the poll timeout, the partition's earliest offset decides: deleted offsets are
    skipped (failOnDataLoss=false) and the rest of the range read."""

    class DeletedWhileLagging(FakeFetcher):
        def offsets(self) -> tuple[int, int]:
            self.log_start = 95  # DeleteRecords while the high watermark lagged
            return super().offsets()

    fetcher = DeletedWhileLagging(log_end=100, high_watermark=lambda n: 100 if fetcher.log_start else 90)
    got, losses = _read(fetcher, 80, 100, False, poll_timeout_ms=300)
    assert got == list(range(80, 90)) + list(range(95, 100))
    assert losses == ["the offsets were deleted (retention or DeleteRecords)"]


def _stream(monkeypatch: pytest.MonkeyPatch, marks: dict[tuple[str, int], tuple[int, int]],
            **options: str) -> tuple[DmqStreamReader, FakeMetadata]:
    md = FakeMetadata(marks)
    md.install(monkeypatch)
    reader = DmqStreamReader(SourceConfig({"bootstrap.servers": "h:1", "subscribe": "t",
                                           "fetchOffset.retryIntervalMs": "1", **options}))
    return reader, md


def test_a_recreated_topic_fails_the_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """The query has read t-0 to 1000; t is deleted and re-created with 600 records. The end
    was clamped to 1000: the new topic's first 1000 records were skipped without an error."""
    reader, md = _stream(monkeypatch, {("t", 0): (0, 600)})
    start = {"t": {"0": 1000}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 600}}
    assert md.watermark_calls == 3  # asked again before believing it (fetchOffset.numRetries)
    with pytest.raises(RuntimeError, match="t-0's offset was changed from 1000 to 600.*failOnDataLoss=false"):
        reader.partitions(start, end)


def test_a_recreated_topic_is_read_from_its_new_end_with_fail_on_data_loss_false(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reader, md = _stream(monkeypatch, {("t", 0): (0, 600)}, failOnDataLoss="false")
    start = {"t": {"0": 1000}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 600}} and reader.partitions(start, end) == []
    md.marks[("t", 0)] = (0, 700)
    later = reader.latestOffset(end, ReadAllAvailable())
    assert [(p.start, p.end) for p in reader.partitions(end, later)] == [(600, 700)]


def test_an_end_behind_for_a_moment_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale answer below the start (KAFKA-7703 in Spark's case) is not data loss when the
    next one is right."""
    answers = iter([500, 1000, 1200])

    def stale_once(md: FakeMetadata) -> None:
        md.marks[("t", 0)] = (0, next(answers))

    reader, md = _stream(monkeypatch, {("t", 0): (0, 0)})
    md.on_watermarks = stale_once
    start = {"t": {"0": 1000}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 1000}} and md.watermark_calls == 2
    assert reader.partitions(start, end) == []


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_vanished_partition_is_data_loss(monkeypatch: pytest.MonkeyPatch, fail_on_data_loss: str) -> None:
    """A deleted topic's partitions kept their old position without a word, so a topic of
    the same name created later was read from there."""
    reader, md = _stream(monkeypatch, {("u", 0): (0, 10)}, subscribe="t,u", failOnDataLoss=fail_on_data_loss)
    start = {"t": {"0": 1000}, "u": {"0": 0}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"u": {"0": 10}}
    if fail_on_data_loss == "true":
        with pytest.raises(RuntimeError, match="t-0 are gone"):
            reader.partitions(start, end)
    else:
        assert [(p.topic, p.start, p.end) for p in reader.partitions(start, end)] == [("u", 0, 10)]
        md.marks[("t", 0)] = (0, 600)  # re-created: a new partition, read from its earliest
        later = reader.latestOffset(end, ReadAllAvailable())
        assert later == {"t": {"0": 600}, "u": {"0": 10}}
        assert [(p.topic, p.start, p.end) for p in reader.partitions(end, later)] == [("t", 0, 600)]


def test_max_offsets_per_trigger_does_not_starve_a_small_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    """Partition 0 has a large backlog fed as fast as it is read, partition 1 ten records:
    its share of 100 offsets a trigger was floored to 0, every trigger, for ever."""
    reader, md = _stream(monkeypatch, {("t", 0): (0, 1_000_000), ("t", 1): (0, 10)}, maxOffsetsPerTrigger="100")
    start: dict = {"t": {"0": 0, "1": 0}}
    for _ in range(3):
        md.marks[("t", 0)] = (0, md.marks[("t", 0)][1] + 100)
        start = reader.latestOffset(start, ReadMaxRows(100))
    assert start["t"]["1"] == 3
    assert start["t"]["0"] == 3 * 99


def test_max_offsets_per_trigger_shares_in_proportion() -> None:
    frm = {("t", 0): 0, ("t", 1): 50, ("t", 2): 7}
    until = {("t", 0): 300, ("t", 1): 150, ("t", 2): 7}
    assert rate_limit(100, frm, until) == {("t", 0): 75, ("t", 1): 75, ("t", 2): 7}
    assert rate_limit(1000, frm, until) == until


def test_batch_zero_starts_where_it_was_planned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark 4 calls initialOffset() twice for batch 0 (getStartOffset, then runBatch); with
    startingOffsets=latest and a producer writing, the second answer was later than the
    first, and the records between them were read by no batch."""

    def produce(md: FakeMetadata) -> None:
        md.marks[("t", 0)] = (0, md.marks[("t", 0)][1] + 5)

    reader, md = _stream(monkeypatch, {("t", 0): (0, 100)})
    md.on_watermarks = produce
    first = reader.initialOffset()
    end = reader.latestOffset(first, ReadAllAvailable())
    again = reader.initialOffset()
    assert again == first == {"t": {"0": 105}}
    assert [(p.start, p.end) for p in reader.partitions(again, end)] == [(105, 110)]


@pytest.mark.parametrize("options,expected", [
    ({"startingOffsets": "earliest", "startingTimestamp": "1700000000000"}, {"0": 40, "1": 60}),
    ({"startingTimestamp": "1700000000000", "startingOffsetsByTimestamp": '{"t": {"0": 1}}'}, {"0": 40, "1": 60}),
    ({"startingOffsets": "latest", "startingOffsetsByTimestamp": '{"t": {"0": 1}}'}, {"0": 40, "1": 10}),
    ({"startingOffsets": "latest"}, {"0": 100, "1": 100}),
])
def test_starting_options_take_sparks_precedence(options: dict[str, str], expected: dict[str, int]) -> None:
    """startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets (Spark's
    KafkaSourceProvider); the order was the reverse. The end of a batch read ignores them."""
    md = FakeMetadata({("t", 0): (10, 100), ("t", 1): (10, 100)}, timestamps={("t", 0): 40, ("t", 1): 60})
    md.config = SourceConfig({"bootstrap.servers": "h:1", "subscribe": "t", **options})
    tps = [("t", 0), ("t", 1)]
    assert md.resolve(md.config.starting, "latest", tps) == {"t": expected}
    assert md.resolve(md.config.ending, "latest-end", tps) == {"t": {"0": 100, "1": 100}}
