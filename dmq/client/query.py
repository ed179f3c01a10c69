"""Message query for tools (``dmq messages query``, tests, benchmarks): the records with
a key, newest first, or the records of an offset or time window, oldest first, from
every partition of a topic (or one), each asked of its leader with QueryRecords
(dmq's extension 10001, docs/message-query.md).

A partition's leader answers at most ``max_records`` records per request and
reads a bounded number of log bytes; the query asks again from where it stopped
(``resume_offset``) until it has ``max_records`` from every partition or the
partition is searched whole. A moved leader (NOT_LEADER_OR_FOLLOWER) is found
again in fresh metadata. Failures raise ``QueryError`` with one line to show.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.client.security import AuthenticationError, ClientSecurity
from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module
from dmq.protocol.extensions import QueryPartition, QueryRecordsRequest, QueryTopic

RETRIABLE = (ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
             ErrorCode.unknown_topic_or_partition, ErrorCode.request_timed_out)
MAX_BYTES = 4 << 20  # asked per partition and request


class QueryError(Exception):
    """A query that cannot be answered; ``str()`` is one line for a user."""


@dataclass(frozen=True, slots=True)
class QueriedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    aborted: bool  # in an aborted transaction (only with read_committed=False)


@dataclass(slots=True)
class QueryResult:
    records: list[QueriedRecord]
    more: bool  # more records match than ``max_records`` (each partition is asked for one more)
    unindexed_bytes: int  # log bytes the brokers scanned for want of a key index (key queries)
    requests: int


@dataclass(slots=True)
class _Partition:
    index: int
    start: int  # -1: the log start
    end: int  # -1: the high watermark (last stable offset)
    found: list[QueriedRecord] = field(default_factory=list)
    done: bool = False
    more: bool = False


def _code(error: ErrorCode) -> str:
    return error.name.upper()


class _Cluster:
    """Connections to the brokers the bootstrap broker's metadata names."""

    def __init__(self, bootstrap: list[tuple[str, int]], timeout: float, client_id: str,
                 security: ClientSecurity | None = None) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.timeout = timeout
        self.client_id = client_id
        self.addresses: dict[int, tuple[str, int]] = {}
        self.leaders: dict[int, int] = {}
        self.partition_count = 0
        self._clients: dict[tuple[str, int], WireClient] = {}

    def client(self, address: tuple[str, int], what: str) -> WireClient:
        c = self._clients.get(address)
        if c is None:
            try:
                c = self._clients[address] = WireClient(*address, client_id=self.client_id, timeout=self.timeout,
                                                              security=self.security)
            except AuthenticationError as e:
                raise QueryError(f"authentication failed at {address[0]}:{address[1]}: {e}") from None
            except OSError as e:
                raise QueryError(f"cannot reach {what} at {address[0]}:{address[1]}: "
                                 f"{_reason(e)}") from None
        return c

    def ask(self, address: tuple[str, int], request: Any, what: str) -> Any:
        c = self.client(address, what)
        try:
            return c.request(request)
        except TimeoutError:
            self._drop(address)
            raise QueryError(f"{what} at {address[0]}:{address[1]} did not answer within "
                             f"{self.timeout:g} s; is it overloaded or stopped?") from None
        except OSError as e:
            self._drop(address)
            raise QueryError(f"lost the connection to {what} at {address[0]}:{address[1]}: "
                             f"{_reason(e)}") from None

    def _drop(self, address: tuple[str, int]) -> None:
        c = self._clients.pop(address, None)
        if c is not None:
            c.close()

    def refresh(self, topic: str) -> None:
        """Brokers and the topic's leaders from the first bootstrap broker that answers."""
        reasons: list[str] = []
        for address in self.bootstrap:
            try:
                md = self.ask(address, make(request_class(3, 12), topics=(
                    make(request_module(3, 12).MetadataRequestTopic, name=topic, topic_id=None),),
                    allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False), "the bootstrap broker")
            except QueryError as e:
                reasons.append(str(e))
                continue
            self.addresses = {b.node_id: (b.host, b.port) for b in md.brokers}
            t = md.topics[0]
            if t.error_code == ErrorCode.unknown_topic_or_partition:
                raise QueryError(f"topic {topic} does not exist")
            if t.error_code != ErrorCode.none:
                raise QueryError(f"cannot describe topic {topic}: {_code(t.error_code)}")
            self.leaders = {p.partition_index: p.leader_id for p in t.partitions}
            self.partition_count = len(t.partitions)
            return
        raise QueryError("; ".join(reasons) or "no bootstrap server")

    def close(self) -> None:
        for c in self._clients.values():
            c.close()
        self._clients.clear()


def _reason(e: OSError) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    return (e.strerror or str(e) or type(e).__name__).lower()


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    out = []
    for item in servers.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise QueryError(f"bootstrap server {item!r} is not HOST:PORT")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    return out


def query_records(bootstrap: str, topic: str, *, key: bytes | None = None, partition: int | None = None,
                  start_offset: int | None = None, end_offset: int | None = None,
                  start_timestamp: int | None = None, end_timestamp: int | None = None,
                  max_records: int = 100, read_committed: bool = True, timeout: float = 30.0,
                  retry_for: float = 30.0, progress: Callable[[int, int], None] | None = None,
                  client_id: str = "dmq-query", security: ClientSecurity | None = None) -> QueryResult:
    """The records of ``topic`` (or of its ``partition``) with ``key``, newest first, or
    without a key those from ``start_offset``/``start_timestamp`` up to
    ``end_offset``/``end_timestamp`` (exclusive), oldest first: at most
    ``max_records``. "First" is log order within a partition; partitions are
    interleaved by timestamp. ``progress(requests, records)`` is called after each answer."""
    if max_records < 1:
        raise QueryError(f"max_records must be at least 1, got {max_records}")
    cluster = _Cluster(parse_bootstrap(bootstrap), timeout, client_id, security)
    try:
        cluster.refresh(topic)
        if partition is not None and partition not in cluster.leaders:
            raise QueryError(f"topic {topic} has no partition {partition} "
                             f"(it has {cluster.partition_count})")
        indexes = [partition] if partition is not None else sorted(cluster.leaders)
        parts = {i: _Partition(i, -1 if start_offset is None else start_offset,
                               -1 if end_offset is None else end_offset) for i in indexes}
        requests = unindexed = 0
        give_up = time.monotonic() + retry_for
        while True:
            pending = [p for p in parts.values() if not p.done]
            if not pending:
                break
            by_leader: dict[int, list[_Partition]] = {}
            for p in pending:
                by_leader.setdefault(cluster.leaders.get(p.index, -1), []).append(p)
            stale = False
            for leader, group in sorted(by_leader.items()):
                if leader < 0 or leader not in cluster.addresses:
                    stale = True
                    continue
                request = make(
                    QueryRecordsRequest, isolation_level=1 if read_committed else 0, key=key,
                    start_timestamp=-1 if start_timestamp is None else start_timestamp,
                    end_timestamp=-1 if end_timestamp is None else end_timestamp,
                    max_records=max_records + 1 - min(len(p.found) for p in group), max_bytes=MAX_BYTES,
                    topics=(make(QueryTopic, name=topic, partitions=tuple(
                        make(QueryPartition, partition_index=p.index, start_offset=p.start, end_offset=p.end)
                        for p in group)),))
                response = cluster.ask(cluster.addresses[leader], request, f"broker {leader}")
                requests += 1
                if response.error_code != ErrorCode.none:
                    raise QueryError(response.error_message or _code(response.error_code))
                by_index = {p.index: p for p in group}
                for result in response.topics[0].partitions:
                    p = by_index[result.partition_index]
                    if result.error_code in RETRIABLE:
                        stale = True
                        continue
                    if result.error_code != ErrorCode.none:
                        raise QueryError(result.error_message or f"{topic}-{p.index}: {_code(result.error_code)}")
                    unindexed += result.unindexed_bytes
                    p.found += [QueriedRecord(topic, p.index, r.offset, r.timestamp, r.key, r.value,
                                              tuple((h.key, h.value) for h in r.headers), r.aborted)
                                for r in result.records]
                    if len(p.found) > max_records:  # one more than asked for: there are more
                        p.done = p.more = True
                    elif result.resume_offset < 0:
                        p.done = True
                    elif key is not None:
                        p.end = result.resume_offset
                    else:
                        p.start = result.resume_offset
                if progress is not None:
                    progress(requests, sum(len(p.found) for p in parts.values()))
            if stale:
                if time.monotonic() >= give_up:
                    missing = sorted(p.index for p in parts.values() if not p.done)
                    raise QueryError(f"no leader answered for partition(s) {', '.join(map(str, missing))} "
                                     f"of {topic} within {retry_for:g} s")
                time.sleep(0.2)
                cluster.refresh(topic)
        # Each partition's records stay in log order (newest or oldest first); partitions
        # are interleaved by timestamp, lower partitions first at equal timestamps.
        lists = [p.found[:max_records] for p in parts.values()]
        if key is not None:
            found = list(heapq.merge(*lists, key=lambda r: (r.timestamp, -r.partition), reverse=True))
        else:
            found = list(heapq.merge(*lists, key=lambda r: (r.timestamp, r.partition)))
        more = any(p.more for p in parts.values()) or len(found) > max_records
        return QueryResult(found[:max_records], more, unindexed, requests)
    finally:
        cluster.close()
