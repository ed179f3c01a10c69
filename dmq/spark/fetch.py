"""An executor's read of one partition's offset range, straight from the partition's leader.

The source's tasks fetch raw record batches with dmq's own wire client
(Fetch v12, one partition, no consumer group) and turn them into Arrow in bulk
(``dmq.spark.arrow_records``). The next fetch is sent before the answer in hand
is decoded, so the broker prepares it meanwhile.

What a task sees, as with Spark's Kafka source: records of [start, end) below
the high watermark (read_committed, librdkafka's default and so the source's:
below the last stable offset, aborted transactions left out; ``kafka.isolation.level``
= read_uncommitted reads everything); offsets missing below the end (compaction)
are skipped; deleted offsets (retention, DeleteRecords) and a log that ends
before ``end`` are data loss (an error unless failOnDataLoss=false); a leader
change or a broker restart is retried; no progress for ``poll_timeout_ms`` fails
the task. Like Spark's consumer, a task that finds no records visible below
``end`` waits for them up to ``poll_timeout_ms`` (a new leader's high watermark
can lag behind the old one's for a moment) and only then asks for the
partition's earliest and latest offsets to decide whether they are lost.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.client.wire import WireClient, decode_response
from dmq.protocol.codec import make, request_class, request_module
from dmq.spark.arrow_records import CorruptRecordsError, arrow_batches, next_offset

FETCH, LIST_OFFSETS, METADATA = (1, 12), (2, 7), (3, 12)
EARLIEST, LATEST = -2, -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
DEFAULT_PARTITION_MAX_BYTES = 8 << 20
MAX_PARTITION_MAX_BYTES = 256 << 20


class _Client(WireClient):
    """The wire client, receiving each answer straight into one buffer."""

    def recv_frame(self) -> Any:
        size = struct.unpack(">i", self._recv_exact(4))[0]
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = self.sock.recv_into(view[got:])
            if not n:
                raise ConnectionError("connection closed by the broker")
            got += n
        return view.toreadonly()  # kio's readers want read-only buffers


class PartitionFetcher:
    """Fetches one partition from its leader over one connection (blocking).

    ``send_fetch`` then ``receive`` lets one fetch be in flight while the caller
    works; any connection or leadership error drops the connection, and the next
    call finds the leader again (Metadata from the bootstrap servers)."""

    def __init__(self, bootstrap: str, topic: str, partition: int, *, client_id: str = "dmq-spark",
                 read_committed: bool = True, max_wait_ms: int = 50,
                 partition_max_bytes: int = DEFAULT_PARTITION_MAX_BYTES, timeout: float = 30.0) -> None:
        self.bootstrap_servers = bootstrap
        self.bootstrap = [_address(a) for a in bootstrap.split(",") if a.strip()]
        self.topic, self.partition = topic, partition
        self.client_id = client_id
        self.isolation = READ_COMMITTED if read_committed else READ_UNCOMMITTED
        self.max_wait_ms = max_wait_ms
        self.partition_max_bytes = partition_max_bytes
        self.timeout = timeout
        self.leader_epoch = -1
        self._conn: _Client | None = None
        self._pending: tuple[type[Any], int] | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self._pending = None

    def _leader(self) -> _Client:
        if self._conn is not None:
            return self._conn
        errors = []
        for host, port in self.bootstrap:
            try:
                with _Client(host, port, self.client_id, timeout=self.timeout) as boot:
                    md = boot.request(make(request_class(*METADATA), topics=(make(
                        request_module(*METADATA).MetadataRequestTopic, name=self.topic, topic_id=None),),
                        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                        include_topic_authorized_operations=False))
            except (OSError, ValueError) as e:
                errors.append(f"{host}:{port}: {e}")
                continue
            brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
            for t in md.topics:
                if t.error_code != ErrorCode.none:
                    raise RetriableError(f"metadata: {t.error_code.name.upper()}")
                for p in t.partitions:
                    if p.partition_index != self.partition:
                        continue
                    if p.error_code not in (ErrorCode.none, ErrorCode.replica_not_available) \
                            or p.leader_id not in brokers:
                        raise RetriableError(f"metadata: no leader ({p.error_code.name.upper()})")
                    self.leader_epoch = p.leader_epoch
                    self._conn = _Client(*brokers[p.leader_id], self.client_id, timeout=self.timeout)
                    return self._conn
            raise RetriableError("metadata: UNKNOWN_TOPIC_OR_PARTITION")
        raise RetriableError("; ".join(errors) or "no bootstrap server")

    def send_fetch(self, offset: int) -> None:
        """Send a fetch from ``offset``; ``receive`` returns its answer."""
        mod = request_module(*FETCH)
        request = make(request_class(*FETCH), replica_id=-1, max_wait=timedelta(milliseconds=self.max_wait_ms),
                       min_bytes=1, max_bytes=self.partition_max_bytes, isolation_level=self.isolation,
                       session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                       topics=(make(mod.FetchTopic, topic=self.topic, partitions=(make(
                           mod.FetchPartition, partition=self.partition, current_leader_epoch=self.leader_epoch,
                           fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                           partition_max_bytes=self.partition_max_bytes),)),))
        conn = self._leader()
        corr, frame = conn.encode(request)
        try:
            conn.send_raw(frame)
        except OSError:
            self.close()
            raise
        self._pending = (type(request), corr)

    def receive(self) -> Any:
        """The partition's part of the answer to the fetch in flight."""
        assert self._conn is not None and self._pending is not None
        cls, corr = self._pending
        self._pending = None
        try:
            response = decode_response(cls, corr, self._conn.recv_frame())
        except (OSError, ValueError):
            self.close()
            raise
        for t in response.responses:
            for p in t.partitions:
                if p.partition_index == self.partition:
                    if p.error_code in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                                        ErrorCode.unknown_leader_epoch, ErrorCode.leader_not_available,
                                        ErrorCode.unknown_topic_or_partition):
                        self.close()  # ask the cluster for the leader again
                    return p
        self.close()
        raise ValueError("the fetch answer does not name the partition")

    def offsets(self) -> tuple[int, int]:
        """(earliest, latest) offsets of the partition, from its leader."""
        assert self._pending is None
        conn = self._leader()
        mod = request_module(*LIST_OFFSETS)
        out = []
        for which in (EARLIEST, LATEST):
            try:
                resp = conn.request(make(request_class(*LIST_OFFSETS), replica_id=-1,
                                         isolation_level=self.isolation, topics=(make(
                                             mod.ListOffsetsTopic, name=self.topic, partitions=(make(
                                                 mod.ListOffsetsPartition, partition_index=self.partition,
                                                 current_leader_epoch=-1, timestamp=which),)),)))
            except (OSError, ValueError):
                self.close()
                raise
            p = resp.topics[0].partitions[0]
            if p.error_code != ErrorCode.none:
                self.close()
                raise RetriableError(f"list offsets: {p.error_code.name.upper()}")
            out.append(int(p.offset))
        return out[0], out[1]


class RetriableError(Exception):
    """Leadership or metadata not settled yet: try again (within the poll timeout)."""


def _address(text: str) -> tuple[str, int]:
    text = text.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    host, _, port = text.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def read_offsets(fetcher: PartitionFetcher, start: int, end: int, *, include_headers: bool,
                 poll_timeout_ms: int, data_loss: Callable[[str], None], describe: str) -> Iterator[Any]:
    """Arrow record batches of the records in [start, end) of the fetcher's partition.

    ``data_loss(why)`` is called where records that should be there are not (it
    raises unless failOnDataLoss=false, and the read then goes on with what is
    left); ``describe`` names the partition in errors."""
    position = start
    last_progress = time.monotonic()
    backoff = 0.05
    last_error = ""
    in_flight = False
    topic, partition = fetcher.topic, fetcher.partition
    read_committed = fetcher.isolation == READ_COMMITTED

    def overdue() -> bool:
        return time.monotonic() - last_progress > poll_timeout_ms / 1000

    def stalled(why: str) -> None:
        nonlocal backoff, last_error
        last_error = why
        if overdue():
            raise RuntimeError(
                f"reading {describe}: nothing from {fetcher.bootstrap_servers} "
                f"for {poll_timeout_ms / 1000:g} s at offset {position} (of [{start}, {end})); is the "
                f"broker reachable? (kafkaConsumer.pollTimeoutMs; last: {last_error})")
        time.sleep(backoff)
        backoff = min(backoff * 2, 1.0)

    try:
        while position < end:
            try:
                if not in_flight:
                    fetcher.send_fetch(position)
                in_flight = False
                answer = fetcher.receive()
            except (OSError, ValueError, RetriableError) as e:
                in_flight = False
                stalled(str(e) or type(e).__name__)
                continue
            error = answer.error_code
            if error == ErrorCode.none:
                data = answer.records or b""
                after = next_offset(data)
                if after is not None and after > position:
                    last_progress, backoff = time.monotonic(), 0.05
                    if after < end:  # the broker reads the next part while this one is decoded
                        try:
                            fetcher.send_fetch(after)
                            in_flight = True
                        except (OSError, RetriableError):
                            pass
                    aborted = [(int(a.producer_id), int(a.first_offset))
                               for a in (answer.aborted_transactions or ())]
                    try:
                        yield from arrow_batches(data, position, end, topic=topic, partition=partition,
                                                 read_committed=read_committed, aborted=aborted,
                                                 include_headers=include_headers)
                    except CorruptRecordsError as e:
                        raise RuntimeError(f"reading {describe}: the batches fetched from offset {position} "
                                           f"cannot be read: {e}") from None
                    position = after
                    continue
                stable = answer.high_watermark
                if read_committed and answer.last_stable_offset >= 0:
                    stable = answer.last_stable_offset
                if position >= stable >= 0:
                    # Nothing visible at ``position`` yet, below the planned end. A new leader's
                    # high watermark can lag behind the old one's for a moment after a failover:
                    # wait for the records as Spark's consumer polls for them, and only after the
                    # poll timeout ask for the partition's offsets to decide whether they are gone.
                    if not overdue():
                        stalled(f"no records visible at {position} (high watermark {stable})")
                        continue
                    try:
                        earliest, latest = fetcher.offsets()
                    except (OSError, ValueError, RetriableError) as e:
                        stalled(str(e) or type(e).__name__)
                        continue
                    if position < earliest:
                        data_loss("the offsets were deleted (retention or DeleteRecords)")
                        if earliest >= end:
                            return
                        position, last_progress = earliest, time.monotonic()
                        continue
                    if position >= latest:
                        data_loss(f"the log ends at {latest}")
                        return
                    stalled(f"no records visible at {position} (high watermark {stable}, latest {latest})")
                    continue
                if data:  # one batch larger than the fetch size: ask for more
                    fetcher.partition_max_bytes = min(fetcher.partition_max_bytes * 2, MAX_PARTITION_MAX_BYTES)
                stalled("no records")
            elif error == ErrorCode.offset_out_of_range:
                try:
                    earliest, latest = fetcher.offsets()
                except (OSError, ValueError, RetriableError) as e:
                    stalled(str(e))
                    continue
                if position < earliest:
                    data_loss("the offsets were deleted (retention or DeleteRecords)")
                    if earliest >= end:
                        return
                    position = earliest
                elif position >= latest:
                    if position < end:
                        data_loss(f"the log ends at {latest}")
                    return
                else:
                    stalled(f"fetch: {error.name.upper()}")
            elif error.retriable:
                stalled(f"fetch: {error.name.upper()}")
            else:
                raise RuntimeError(f"reading {describe} at offset {position}: {error.name.upper()}")
    finally:
        fetcher.close()


def connect_timeout(poll_timeout_ms: int) -> float:
    """Seconds a connection attempt or an answer may take: within the poll timeout, at most 30 s."""
    return max(1.0, min(30.0, poll_timeout_ms / 1000))

