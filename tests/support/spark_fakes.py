"""Stand-ins for the dmq Spark source's broker access, so its reads can be tested without a
broker or Spark: ``FakeFetcher`` for ``dmq.spark.fetch.read_offsets`` (a partition's leader
answering fetches)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.record.records import encode_batch
from dmq.spark.fetch import READ_COMMITTED


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
