#!/usr/bin/env python3
"""Micro-benchmark of the hot-path codecs: kio's generic path against dmq.protocol.fast.

For each case, times kio and fast alternately (--repeats rounds of --number calls
each) and prints the median microseconds per call and the speedup. The messages are
shaped as the broker builds them (the Produce and Fetch handlers, the follower's
fetcher); records of a FetchResponse are SpliceRecords, as the Fetch handler sends
them. Decoding stays with kio's native readers; "kio" there is the generic walk for
nulls (``codec.decode_request_with_kio``), "fast" the per-message check.

    .venv/bin/python bench/codec.py [--repeats 7] [--number 20000]
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.client.wire import encode_request, encode_request_with_kio
from dmq.protocol.codec import (
    SpliceRecords,
    decode_request,
    decode_request_with_kio,
    encode_response,
    encode_response_with_kio,
    make,
    request_module,
    response_module,
)


class Source:
    """A file range as the Fetch handler hands it over (only ``length`` is read)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def read(self) -> bytes:
        return bytes(self.length)


def produce_response(partitions: int) -> Any:
    m = response_module(0, 9)
    parts = tuple(make(m.PartitionProduceResponse, index=i, error_code=ErrorCode.none, base_offset=1234567,
                       log_append_time=None, log_start_offset=0, record_errors=(), error_message=None)
                  for i in range(partitions))
    return make(m.ProduceResponse, responses=(make(m.TopicProduceResponse, name="bench-topic",
                                                   partition_responses=parts),),
                throttle_time=timedelta(0))


def fetch_response(partitions: int) -> Any:
    m = response_module(1, 12)
    parts = tuple(make(m.PartitionData, partition_index=i, error_code=ErrorCode.none, high_watermark=1000,
                       last_stable_offset=1000, log_start_offset=0, aborted_transactions=None,
                       preferred_read_replica=-1, records=SpliceRecords.of(Source(16384)))
                  for i in range(partitions))
    return make(m.FetchResponse, throttle_time=timedelta(0), error_code=ErrorCode.none, session_id=0,
                responses=(make(m.FetchableTopicResponse, topic="bench-topic", partitions=parts),))


def fetch_request(partitions: int) -> Any:
    """A follower's fetch, as dmq/replication/fetcher.py builds it."""
    m = request_module(1, 12)
    parts = tuple(make(m.FetchPartition, partition=i, current_leader_epoch=3, fetch_offset=1000,
                       last_fetched_epoch=-1, log_start_offset=0, partition_max_bytes=1 << 20)
                  for i in range(partitions))
    return make(m.FetchRequest, cluster_id=None, replica_id=2, max_wait=timedelta(milliseconds=500),
                min_bytes=1, max_bytes=10 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                forgotten_topics_data=(), rack_id="",
                topics=(make(m.FetchTopic, topic="bench-topic", partitions=parts),))


def produce_request(partitions: int) -> bytes:
    m = request_module(0, 9)
    parts = tuple(m.PartitionProduceData(index=i, records=bytes(1000)) for i in range(partitions))
    request = m.ProduceRequest(transactional_id=None, acks=-1, timeout=timedelta(seconds=30),
                               topic_data=(m.TopicProduceData(name="bench-topic", partition_data=parts),))
    return encode_request_with_kio(request, 7, "rdkafka")[4:]


def cases() -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    out: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = []
    for n in (1, 6):
        pr, fr, fq = produce_response(n), fetch_response(n), fetch_request(n)
        frame = produce_request(n)
        fetch_frame = encode_request_with_kio(fq, 7, "dmq-replica-2")[4:]
        out += [
            (f"encode ProduceResponse v9, {n} partition(s)",
             lambda pr=pr: encode_response_with_kio(1, 0, pr), lambda pr=pr: encode_response(1, 0, pr)),
            (f"encode FetchResponse v12, {n} partition(s)",
             lambda fr=fr: encode_response_with_kio(1, 1, fr), lambda fr=fr: encode_response(1, 1, fr)),
            (f"encode FetchRequest v12, {n} partition(s)",
             lambda fq=fq: encode_request_with_kio(fq, 1, "dmq-replica-2"),
             lambda fq=fq: encode_request(fq, 1, "dmq-replica-2")),
            (f"decode ProduceRequest v9, {n} partition(s)",
             lambda f=frame: decode_request_with_kio(f, 0, 9), lambda f=frame: decode_request(f, 0, 9)),
            (f"decode FetchRequest v12, {n} partition(s)",
             lambda f=fetch_frame: decode_request_with_kio(f, 1, 12),
             lambda f=fetch_frame: decode_request(f, 1, 12)),
        ]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--number", type=int, default=20000, help="calls per timing")
    args = ap.parse_args()
    print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, median of {args.repeats} alternated repeats "
          f"of {args.number} calls")
    print(f"{'case':45s} {'kio µs':>8s} {'fast µs':>8s} {'speedup':>8s}")
    for name, with_kio, with_fast in cases():
        assert _flat(with_kio()) == _flat(with_fast()), name
        kio_times, fast_times = [], []
        for i in range(args.repeats):
            pair = [(kio_times, with_kio), (fast_times, with_fast)]
            for times, fn in pair if i % 2 == 0 else reversed(pair):
                times.append(timeit.timeit(fn, number=args.number) / args.number * 1e6)
        k, f = statistics.median(kio_times), statistics.median(fast_times)
        print(f"{name:45s} {k:8.2f} {f:8.2f} {k / f:7.1f}×")
    return 0


def _flat(result: Any) -> Any:
    """Comparable form of a result: spliced parts by their length, a header by its fields."""
    if isinstance(result, tuple):
        header, body = result
        return [getattr(header, name) for name in header.__slots__], body
    if isinstance(result, list):
        return [p if isinstance(p, bytes) else ("source", p.length) for p in result]
    return result


if __name__ == "__main__":
    raise SystemExit(main())
