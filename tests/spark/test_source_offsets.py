"""The source's offsets without a broker or Spark: what a read task does where records are
missing, and what the driver plans (fakes in support.spark_fakes)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from support.spark_fakes import FakeFetcher  # noqa: E402

from dmq.spark.fetch import read_offsets  # noqa: E402


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
