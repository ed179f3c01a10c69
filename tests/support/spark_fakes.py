"""Stand-ins for the dmq Spark source's broker access, so its planning and its reads can be
tested without a broker or Spark: ``FakeFetcher`` for ``dmq.spark.fetch.read_offsets`` (a
partition's leader answering fetches) and ``FakeMetadata`` for ``dmq.spark.source.Metadata``
(the driver's view of partitions and offsets)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.record.records import encode_batch
from dmq.spark.fetch import READ_COMMITTED
from dmq.spark.source import Metadata, SourceConfig


def batch(lo: int, hi: int) -> bytes:
    """One record batch of offsets [lo, hi), values b"v<offset>"."""
    return encode_batch([(None, b"v%d" % i, []) for i in range(lo, hi)], base_offset=lo, timestamp=1)


class FakeFetcher:
    """A partition leader for ``read_offsets``: the log holds offsets [log_start, log_end); the
    n-th fetch answer (from 1) sees them below ``high_watermark(n)``, as a new leader whose high
    watermark lags behind the old one's for a moment after a failover."""

    topic, partition, isolation, bootstrap_servers = "t", 0, READ_COMMITTED, "fake:9092"

    def __init__(self, log_end: int, high_watermark: Callable[[int], int], log_start: int = 0) -> None:
        self.log_start, self.log_end = log_start, log_end
        self.high_watermark = high_watermark
        self.partition_max_bytes = 1 << 20
        self.answers = 0
        self.offsets_asked = 0
        self._pending: int | None = None

    def send_fetch(self, offset: int) -> None:
        self._pending = offset

    def receive(self) -> Any:
        assert self._pending is not None
        offset, self._pending = self._pending, None
        self.answers += 1
        hw = min(self.high_watermark(self.answers), self.log_end)
        data = batch(offset, hw) if self.log_start <= offset < hw else b""
        return SimpleNamespace(error_code=ErrorCode.none, records=data, high_watermark=hw,
                               last_stable_offset=hw, aborted_transactions=None)

    def offsets(self) -> tuple[int, int]:
        self.offsets_asked += 1
        return self.log_start, min(self.high_watermark(self.answers), self.log_end)

    def close(self) -> None:
        self._pending = None


class FakeMetadata(Metadata):
    """``dmq.spark.source.Metadata`` over a dict: ``marks`` maps (topic, partition) to its
    (earliest, latest) offsets, and the partitions are its keys. ``on_watermarks`` runs before
    each answer (a producer writing between calls, a topic re-created); ``timestamps`` maps a
    partition to the offset ``offsets_for_times`` finds for it. ``install`` makes the source's
    readers use it."""

    def __init__(self, marks: dict[tuple[str, int], tuple[int, int]],
                 on_watermarks: Callable[[FakeMetadata], None] | None = None,
                 timestamps: dict[tuple[str, int], int] | None = None) -> None:
        self.marks = marks
        self.on_watermarks = on_watermarks
        self.timestamps = timestamps or {}
        self.watermark_calls = 0

    def install(self, monkeypatch: Any) -> None:
        import dmq.spark.source as source

        def bind(config: SourceConfig) -> FakeMetadata:
            self.config = config
            return self

        monkeypatch.setattr(source, "Metadata", bind)

    def close(self) -> None:
        pass

    def partitions(self) -> list[tuple[str, int]]:
        return sorted(self.marks)

    def watermarks(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        self.watermark_calls += 1
        if self.on_watermarks is not None:
            self.on_watermarks(self)
        return {tp: self.marks[tp] for tp in tps if tp in self.marks}

    def offsets_for_times(self, stamps: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        return {tp: self.timestamps[tp] for tp in stamps}
