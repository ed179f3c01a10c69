"""The progress table of `dmq pipeline run`: "read by Spark" counts every line Spark read,
however many micro-batches the run takes, and not the generator's end marker."""

from __future__ import annotations

from dmq.cli.pipeline import _SparkReads


def _progress(batch: int, rows: int) -> dict[str, int]:
    return {"batchId": batch, "numInputRows": rows}


def test_reads_count_every_batch_beyond_the_hundred_spark_keeps() -> None:
    reads = _SparkReads()
    batches = [_progress(b, 10) for b in range(250)]
    total = 0
    for seen in [*range(0, 250, 7), 250]:  # polled now and then; Spark shows the last 100 updates
        total = reads.update(batches[max(0, seen - 100):seen])
    assert total == 2500  # summing recentProgress said 1000


def test_an_idle_update_does_not_undo_the_last_batch() -> None:
    reads = _SparkReads()
    assert reads.update([_progress(0, 600), _progress(1, 400)]) == 1000
    assert reads.update([_progress(0, 600), _progress(1, 400), _progress(1, 0)]) == 1000
