"""The console's view of a cluster: an async Kafka admin over dmq's wire client.

``Cluster`` speaks only the Kafka protocol (and dmq's extension APIs), so the console is
the same program beside a broker (``dmq server --console``, on the broker's own event
loop) as on its own (``dmq console -b``). Every call is a coroutine; nothing blocks the
loop. Connections are pooled per broker (a connection takes one request at a time);
requests to several brokers run concurrently.

Failures raise ``ConsoleError`` with one line for the page.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.client.security import AuthenticationError, ClientSecurity
from dmq.client.wire import AsyncWireClient
from dmq.protocol.codec import make, request_class, request_module
from dmq.protocol.extensions import (
    DescribeBrokerRuntimeRequest,
    QueryPartition,
    QueryRecordsRequest,
    QueryTopic,
)
from dmq.record.records import encode_batch

TIMEOUT = timedelta(seconds=30)
POOL_SIZE = 4  # connections kept per broker
LOADING_WAIT_S = 3.0  # how long a broker whose coordinator is loading is asked again
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE = 0, 1


class ConsoleError(Exception):
    """A request the cluster refused or could not answer; ``str()`` is one line."""


def error_text(code: ErrorCode, message: str | None = None) -> str:
    name = code.name.upper()
    return f"{name}: {message}" if message else name


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    index: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: str
    internal: bool
    partitions: tuple[PartitionInfo, ...]

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


@dataclass(frozen=True, slots=True)
class Metadata:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicInfo]


@dataclass(frozen=True, slots=True)
class BrokerRuntime:
    """DescribeBrokerRuntime's answer (dmq's extension 10004)."""

    start_ms: int
    metadata_mode: str  # "embedded" or "zookeeper"
    zookeeper_connect: str | None
    zookeeper_state: str | None
    zookeeper_session: int
    version: str


@dataclass(frozen=True, slots=True)
class Message:
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int  # Kafka's ConfigSource: 1 topic, 2/3 dynamic broker, 4 static broker, 5 default
    read_only: bool
    sensitive: bool
    documentation: str | None


@dataclass(slots=True)
class GroupMember:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    assignment: list[tuple[str, int]] = field(default_factory=list)


@dataclass(slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol: str
    kind: str  # "classic" or "share"
    coordinator: int
    members: list[GroupMember]


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    start_ms: int  # -1: not started
    timeout_ms: int
    partitions: tuple[tuple[str, int], ...]
    coordinator: int


def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    """Kafka's ConsumerProtocolAssignment (version, [topic, [partition]], user data); an
    assignment of another protocol, or bytes that do not parse, is empty."""
    try:
        pos = 2
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: list[tuple[str, int]] = []
        for _ in range(max(n, 0)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos:pos + length].decode()
            pos += length
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            parts = struct.unpack_from(f">{max(count, 0)}i", data, pos)
            pos += 4 * max(count, 0)
            out += [(topic, p) for p in parts]
        return sorted(out)
    except (struct.error, UnicodeDecodeError):
        return []


class _Pool:
    """Idle connections to one broker; at most POOL_SIZE are kept."""

    def __init__(self, host: str, port: int, client_id: str, security: ClientSecurity | None = None) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.security = security
        self.idle: list[AsyncWireClient] = []

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncWireClient]:
        c = self.idle.pop() if self.idle else AsyncWireClient(
            self.host, self.port, self.client_id, security=self.security)
        ok = False
        try:
            yield c
            ok = True
        finally:
            if ok and len(self.idle) < POOL_SIZE:
                self.idle.append(c)
            else:
                c.close()

    def close(self) -> None:
        for c in self.idle:
            c.close()
        self.idle.clear()


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    out = []
    for item in servers.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected HOST:PORT[,HOST:PORT...], got {servers!r}")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        raise ValueError("no bootstrap server given: pass HOST:PORT")
    return out


class Cluster:
    """The console's connections to one cluster (event-loop thread only), every one over
    TLS and/or SASL as ``security`` says (None: PLAINTEXT)."""

    def __init__(self, bootstrap: str, client_id: str = "dmq-console", timeout: float = 10.0,
                 security: ClientSecurity | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.security = security
        self.client_id = client_id
        self.timeout = timeout
        self._pools: dict[tuple[str, int], _Pool] = {}
        self.brokers: dict[int, BrokerInfo] = {}

    def close(self) -> None:
        for p in self._pools.values():
            p.close()
        self._pools.clear()

    # ------------------------------------------------------------------ plumbing

    async def _send(self, address: tuple[str, int], request: Any, what: str) -> Any:
        pool = self._pools.get(address)
        if pool is None:
            pool = self._pools[address] = _Pool(*address, self.client_id, self.security)
        try:
            async with pool.connection() as c:
                return await c.request(request, self.timeout)
        except TimeoutError:
            raise ConsoleError(f"{what} at {address[0]}:{address[1]} did not answer within "
                               f"{self.timeout:g} s") from None
        except AuthenticationError as e:
            raise ConsoleError(f"authentication failed at {address[0]}:{address[1]}: {e}") from None
        except (OSError, EOFError) as e:
            reason = "connection refused" if isinstance(e, ConnectionRefusedError) else (
                str(e) or type(e).__name__)
            raise ConsoleError(f"cannot reach {what} at {address[0]}:{address[1]}: {reason}") from None

    async def any_broker(self, request: Any) -> Any:
        """Send to a known broker or a bootstrap address, the first that answers."""
        addresses = [(b.host, b.port) for b in self.brokers.values()]
        addresses += [a for a in self.bootstrap if a not in addresses]
        last: ConsoleError | None = None
        for address in addresses:
            try:
                return await self._send(address, request, "the broker")
            except ConsoleError as e:
                last = e
        assert last is not None
        raise last

    async def broker(self, node_id: int, request: Any) -> Any:
        b = self.brokers.get(node_id)
        if b is None:
            await self.metadata()
            b = self.brokers.get(node_id)
            if b is None:
                raise ConsoleError(f"broker {node_id} is not in the cluster's metadata")
        return await self._send((b.host, b.port), request, f"broker {node_id}")

    async def each_broker(self, build: Any) -> dict[int, Any]:
        """``build(node_id)``'s request sent to every broker at once: {node: response or
        ConsoleError}."""
        if not self.brokers:
            await self.metadata()
        ids = sorted(self.brokers)
        answers = await asyncio.gather(*(self.broker(n, build(n)) for n in ids), return_exceptions=True)
        out: dict[int, Any] = {}
        for n, a in zip(ids, answers, strict=True):
            if isinstance(a, BaseException) and not isinstance(a, ConsoleError):
                raise a
            out[n] = a
        return out

    # ------------------------------------------------------------------ metadata

    async def metadata(self, topics: Iterable[str] | None = None) -> Metadata:
        mod = request_module(3, 12)
        names = None if topics is None else tuple(
            make(mod.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
        resp = await self.any_broker(make(
            request_class(3, 12), topics=names, allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False, include_topic_authorized_operations=False))
        brokers = {int(b.node_id): BrokerInfo(int(b.node_id), b.host, int(b.port), b.rack)
                   for b in resp.brokers}
        self.brokers = brokers
        out: dict[str, TopicInfo] = {}
        for t in resp.topics:
            if t.error_code != ErrorCode.none or t.name is None:
                continue
            parts = tuple(sorted((PartitionInfo(int(p.partition_index), int(p.leader_id),
                                                tuple(map(int, p.replica_nodes)), tuple(map(int, p.isr_nodes)),
                                                tuple(map(int, p.offline_replicas)))
                                  for p in t.partitions), key=lambda p: p.index))
            out[t.name] = TopicInfo(t.name, str(t.topic_id or ""), bool(t.is_internal), parts)
        return Metadata(resp.cluster_id, int(resp.controller_id), brokers, dict(sorted(out.items())))

    async def topic(self, name: str) -> TopicInfo:
        md = await self.metadata([name])
        t = md.topics.get(name)
        if t is None:
            raise ConsoleError(f"topic {name} does not exist")
        return t

    async def broker_runtime(self) -> dict[int, BrokerRuntime | None]:
        """Every broker's start time and ZooKeeper session (None: it did not answer)."""
        answers = await self.each_broker(lambda _n: DescribeBrokerRuntimeRequest())
        return {node: None if isinstance(r, ConsoleError) or r.error_code != ErrorCode.none else BrokerRuntime(
            int(r.start_time_ms), r.metadata_mode, r.zookeeper_connect, r.zookeeper_state,
            int(r.zookeeper_session), r.version) for node, r in answers.items()}

    # ------------------------------------------------------------------ offsets and sizes

    async def list_offsets(self, md: Metadata, wanted: Mapping[str, Iterable[int]],
                           timestamp: int) -> dict[tuple[str, int], int]:
        """{(topic, partition): offset} at ``timestamp`` (EARLIEST, LATEST or ms; -1 where a
        timestamp is past the end), asked of each partition's leader at once."""
        found = await self.list_offsets_at(md, wanted, timestamp)
        return {k: o for k, (o, _ts) in found.items()}

    async def list_offsets_at(self, md: Metadata, wanted: Mapping[str, Iterable[int]],
                              timestamp: int) -> dict[tuple[str, int], tuple[int, int]]:
        """ListOffsets with the records' timestamps: {(topic, partition): (offset, timestamp)}
        (MAX_TIMESTAMP: the record with the largest timestamp; (-1, -1): none)."""
        mod = request_module(2, 7)
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, parts in wanted.items():
            t = md.topics.get(topic)
            if t is None:
                continue
            leaders = {p.index: p.leader for p in t.partitions}
            for p in parts:
                leader = leaders.get(p, -1)
                if leader >= 0:
                    by_leader.setdefault(leader, {}).setdefault(topic, []).append(p)

        async def ask(leader: int, topics: dict[str, list[int]]) -> Any:
            return await self.broker(leader, make(
                request_class(2, 7), replica_id=-1, isolation_level=0, topics=tuple(
                    make(mod.ListOffsetsTopic, name=t, partitions=tuple(
                        make(mod.ListOffsetsPartition, partition_index=p, current_leader_epoch=-1,
                             timestamp=timestamp) for p in ps)) for t, ps in topics.items())))

        answers = await asyncio.gather(*(ask(n, ts) for n, ts in by_leader.items()),
                                       return_exceptions=True)
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for a in answers:
            if isinstance(a, ConsoleError):
                continue
            if isinstance(a, BaseException):
                raise a
            for t in a.topics:
                for p in t.partitions:
                    if p.error_code == ErrorCode.none:
                        out[(t.name, int(p.partition_index))] = (int(p.offset), int(p.timestamp))
        return out

    async def offsets(self, md: Metadata, topics: Iterable[str]) -> tuple[dict[tuple[str, int], int],
                                                                          dict[tuple[str, int], int]]:
        """(log start offsets, high watermarks) of every partition of ``topics``."""
        wanted = {t: [p.index for p in md.topics[t].partitions] for t in topics if t in md.topics}
        start, end = await asyncio.gather(self.list_offsets(md, wanted, EARLIEST),
                                          self.list_offsets(md, wanted, LATEST))
        return start, end

    async def log_dirs(self, topics: Mapping[str, Iterable[int]] | None = None
                       ) -> dict[int, list[tuple[str, int, int, dict[tuple[str, int], int]]]]:
        """DescribeLogDirs of every broker: {broker: [(log dir, total bytes, usable bytes,
        {(topic, partition): size})]}; a broker that does not answer is left out."""
        mod = request_module(35, 4)
        names = None if topics is None else tuple(
            make(mod.DescribableLogDirTopic, topic=t, partitions=tuple(ps)) for t, ps in topics.items())
        answers = await self.each_broker(lambda _n: make(request_class(35, 4), topics=names))
        out: dict[int, list[tuple[str, int, int, dict[tuple[str, int], int]]]] = {}
        for node, resp in answers.items():
            if isinstance(resp, ConsoleError):
                continue
            out[node] = [(r.log_dir, int(r.total_bytes), int(r.usable_bytes),
                          {(t.name, int(p.partition_index)): int(p.partition_size)
                           for t in r.topics for p in t.partitions})
                         for r in resp.results if r.error_code == ErrorCode.none]
        return out

    async def leader_sizes(self, md: Metadata) -> dict[tuple[str, int], int]:
        """The size of each partition's log on its leader."""
        dirs = await self.log_dirs()
        out: dict[tuple[str, int], int] = {}
        for t in md.topics.values():
            for p in t.partitions:
                for _path, _total, _usable, sizes in dirs.get(p.leader, ()):
                    size = sizes.get((t.name, p.index))
                    if size is not None:
                        out[(t.name, p.index)] = size
        return out

    # ------------------------------------------------------------------ topics

    async def describe_configs(self, resource_type: int, name: str) -> list[ConfigEntry]:
        mod = request_module(32, 4)
        req = make(request_class(32, 4), include_synonyms=False, include_documentation=True, resources=(
            make(mod.DescribeConfigsResource, resource_type=resource_type, resource_name=name,
                 configuration_keys=None),))
        if resource_type == BROKER_RESOURCE:
            resp = await self.broker(int(name), req)
        else:
            resp = await self.any_broker(req)
        r = resp.results[0]
        if r.error_code != ErrorCode.none:
            raise ConsoleError(error_text(r.error_code, r.error_message))
        return sorted((ConfigEntry(c.name, c.value, int(c.config_source), bool(c.read_only),
                                   bool(c.is_sensitive), c.documentation) for c in r.configs),
                      key=lambda c: c.name)

    async def alter_topic_configs(self, topic: str, changes: dict[str, str | None]) -> None:
        """Set (a value) or remove (None) topic config overrides."""
        mod = request_module(44, 1)
        resp = await self.any_broker(make(request_class(44, 1), validate_only=False, resources=(
            make(mod.AlterConfigsResource, resource_type=TOPIC_RESOURCE, resource_name=topic, configs=tuple(
                make(mod.AlterableConfig, name=k, config_operation=SET if v is not None else DELETE, value=v)
                for k, v in changes.items())),)))
        r = resp.responses[0]
        if r.error_code != ErrorCode.none:
            raise ConsoleError(error_text(r.error_code, r.error_message))

    async def controller_request(self, request: Any) -> Any:
        md = await self.metadata([])
        if md.controller_id in md.brokers:
            return await self.broker(md.controller_id, request)
        return await self.any_broker(request)

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str]) -> None:
        mod = request_module(19, 7)
        resp = await self.controller_request(make(
            request_class(19, 7), timeout=TIMEOUT, validate_only=False, topics=(make(
                mod.CreatableTopic, name=name, num_partitions=partitions,
                replication_factor=replication_factor, assignments=(),
                configs=tuple(make(mod.CreatableTopicConfig, name=k, value=v) for k, v in configs.items())),)))
        t = resp.topics[0]
        if t.error_code != ErrorCode.none:
            raise ConsoleError(error_text(t.error_code, t.error_message))

    async def delete_topic(self, name: str) -> None:
        mod = request_module(20, 6)
        resp = await self.controller_request(make(
            request_class(20, 6), timeout=TIMEOUT, topics=(make(mod.DeleteTopicState, name=name, topic_id=None),)))
        t = resp.responses[0]
        if t.error_code != ErrorCode.none:
            raise ConsoleError(error_text(t.error_code, t.error_message))

    async def create_partitions(self, name: str, count: int) -> None:
        mod = request_module(37, 3)
        resp = await self.controller_request(make(
            request_class(37, 3), timeout=TIMEOUT, validate_only=False,
            topics=(make(mod.CreatePartitionsTopic, name=name, count=count, assignments=None),)))
        t = resp.results[0]
        if t.error_code != ErrorCode.none:
            raise ConsoleError(error_text(t.error_code, t.error_message))

    # ------------------------------------------------------------------ messages

    async def query(self, md: Metadata, topic: str, partitions: list[int], *, key: bytes | None = None,
                    start_offsets: dict[int, int] | None = None, end_offsets: dict[int, int] | None = None,
                    start_timestamp: int = -1, max_records: int = 50,
                    max_bytes: int = 4 << 20) -> dict[int, list[Message]]:
        """Records of ``topic``'s partitions with QueryRecords (dmq's extension API 10001),
        one request per leader: with ``key`` its records newest first (from the key index),
        else the records from the start offsets (or ``start_timestamp``) up to the end
        offsets, oldest first; at most ``max_records`` per partition."""
        t = md.topics.get(topic)
        if t is None:
            raise ConsoleError(f"topic {topic} does not exist")
        leaders = {p.index: p.leader for p in t.partitions}
        by_leader: dict[int, list[int]] = {}
        for p in partitions:
            if p not in leaders:
                raise ConsoleError(f"topic {topic} has no partition {p}")
            if leaders[p] < 0:
                raise ConsoleError(f"partition {topic}-{p} has no leader")
            by_leader.setdefault(leaders[p], []).append(p)
        starts, ends = start_offsets or {}, end_offsets or {}

        async def ask(leader: int, ps: list[int]) -> Any:
            return await self.broker(leader, make(
                QueryRecordsRequest, isolation_level=0, key=key, start_timestamp=start_timestamp,
                end_timestamp=-1, max_records=max_records, max_bytes=max_bytes, topics=(make(
                    QueryTopic, name=topic, partitions=tuple(
                        make(QueryPartition, partition_index=p, start_offset=starts.get(p, -1),
                             end_offset=ends.get(p, -1)) for p in ps)),)))

        answers = await asyncio.gather(*(ask(n, ps) for n, ps in by_leader.items()))
        out: dict[int, list[Message]] = {}
        for resp in answers:
            if resp.error_code != ErrorCode.none:
                raise ConsoleError(error_text(resp.error_code, resp.error_message))
            for r in resp.topics[0].partitions:
                if r.error_code != ErrorCode.none:
                    raise ConsoleError(f"{topic}-{r.partition_index}: "
                                       f"{error_text(r.error_code, r.error_message)}")
                out[int(r.partition_index)] = [
                    Message(int(r.partition_index), int(m.offset), int(m.timestamp), m.key, m.value,
                            tuple((h.key, h.value) for h in m.headers)) for m in r.records]
        return out

    async def produce(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                      headers: list[tuple[str, bytes | None]]) -> int:
        """Produce one record (acks=all) to a partition's leader; returns its offset."""
        t = await self.topic(topic)
        leader = next((p.leader for p in t.partitions if p.index == partition), None)
        if leader is None:
            raise ConsoleError(f"topic {topic} has no partition {partition}")
        if leader < 0:
            raise ConsoleError(f"partition {topic}-{partition} has no leader")
        mod = request_module(0, 9)
        batch = encode_batch([(key, value, headers)], timestamp=int(time.time() * 1000))
        resp = await self.broker(leader, make(
            request_class(0, 9), transactional_id=None, acks=-1, timeout=TIMEOUT, topic_data=(
                make(mod.TopicProduceData, name=topic, partition_data=(
                    make(mod.PartitionProduceData, index=partition, records=batch),)),)))
        p = resp.responses[0].partition_responses[0]
        if p.error_code != ErrorCode.none:
            raise ConsoleError(error_text(p.error_code, p.error_message))
        return int(p.base_offset)

    # ------------------------------------------------------------------ groups

    async def each_coordinator(self, request: Any) -> dict[int, Any]:
        """``request`` (ListGroups, ListTransactions) sent to every broker; a broker whose
        coordinator partitions are loading (COORDINATOR_LOAD_IN_PROGRESS, or not yet
        available) is asked again for up to LOADING_WAIT_S. {node: response or
        ConsoleError}."""
        answers = await self.each_broker(lambda _n: request)
        deadline = time.monotonic() + LOADING_WAIT_S
        while True:
            loading = [n for n, resp in answers.items() if not isinstance(resp, ConsoleError)
                       and resp.error_code in (ErrorCode.coordinator_load_in_progress,
                                               ErrorCode.coordinator_not_available)]
            if not loading or time.monotonic() > deadline:
                return answers
            await asyncio.sleep(0.1)
            again = await asyncio.gather(*(self.broker(n, request) for n in loading), return_exceptions=True)
            for n, a in zip(loading, again, strict=True):
                if isinstance(a, BaseException) and not isinstance(a, ConsoleError):
                    raise a
                answers[n] = a

    async def list_groups(self) -> tuple[list[tuple[str, str, str, int]], bool]:
        """(group id, type, state, coordinator) of every group, from every broker, and
        whether every broker answered (``each_coordinator``: a broker whose coordinator
        is loading is asked again; one that still cannot answer is left out)."""
        answers = await self.each_coordinator(make(request_class(16, 5), states_filter=(), types_filter=()))
        out = []
        complete = True
        for node, resp in answers.items():
            if isinstance(resp, ConsoleError) or resp.error_code != ErrorCode.none:
                complete = False
                continue
            out += [(g.group_id, g.group_type or "classic", g.group_state, node) for g in resp.groups]
        return sorted(out), complete

    async def coordinator(self, key: str, key_type: int = 0) -> int:
        resp = await self.any_broker(make(request_class(10, 4), key_type=key_type, coordinator_keys=(key,)))
        c = resp.coordinators[0]
        if c.error_code != ErrorCode.none:
            raise ConsoleError(f"no coordinator for {key}: {error_text(c.error_code, c.error_message)}")
        if int(c.node_id) not in self.brokers:
            self.brokers[int(c.node_id)] = BrokerInfo(int(c.node_id), c.host, int(c.port), None)
        return int(c.node_id)

    async def describe_group(self, group: str) -> GroupDescription:
        node = await self.coordinator(group)
        resp = await self.broker(node, make(request_class(15, 5), groups=(group,),
                                            include_authorized_operations=False))
        g = resp.groups[0]
        if g.error_code == ErrorCode.none and g.group_state != "Dead":
            members = [GroupMember(m.member_id, m.client_id, m.client_host, m.group_instance_id,
                                   decode_assignment(bytes(m.member_assignment))
                                   if g.protocol_type == "consumer" else [])
                       for m in g.members]
            return GroupDescription(group, g.group_state, g.protocol_data, "classic", node, members)
        # Not a classic group: perhaps a share group (KIP-932).
        share = await self.broker(node, make(request_class(77, 1), group_ids=(group,),
                                             include_authorized_operations=False))
        s = share.groups[0]
        if s.error_code == ErrorCode.none:
            members = [GroupMember(m.member_id, m.client_id, m.client_host, None, sorted(
                (tp.topic_name, int(p)) for tp in m.assignment.topic_partitions for p in tp.partitions))
                for m in s.members]
            return GroupDescription(group, s.group_state, s.assignor_name, "share", node, members)
        if g.error_code != ErrorCode.none:
            raise ConsoleError(f"group {group}: {error_text(g.error_code)}")
        raise ConsoleError(f"group {group} does not exist")

    async def committed(self, group: str, node: int) -> dict[tuple[str, int], int]:
        """A classic group's committed offsets: {(topic, partition): offset}."""
        mod = request_module(9, 8)
        resp = await self.broker(node, make(request_class(9, 8), require_stable=False, groups=(
            make(mod.OffsetFetchRequestGroup, group_id=group, topics=None),)))
        g = resp.groups[0]
        if g.error_code != ErrorCode.none:
            raise ConsoleError(f"offsets of {group}: {error_text(g.error_code)}")
        return {(t.name, int(p.partition_index)): int(p.committed_offset)
                for t in g.topics for p in t.partitions
                if p.error_code == ErrorCode.none and p.committed_offset >= 0}

    async def share_offsets(self, group: str, node: int) -> dict[tuple[str, int], tuple[int, int]]:
        """A share group's start offsets and lag (DescribeShareGroupOffsets v1):
        {(topic, partition): (start offset, lag)}."""
        mod = request_module(90, 1)
        resp = await self.broker(node, make(request_class(90, 1), groups=(
            make(mod.DescribeShareGroupOffsetsRequestGroup, group_id=group, topics=None),)))
        g = resp.groups[0]
        if g.error_code != ErrorCode.none:
            raise ConsoleError(f"offsets of {group}: {error_text(g.error_code, g.error_message)}")
        return {(t.topic_name, int(p.partition_index)): (int(p.start_offset), int(getattr(p, "lag", -1)))
                for t in g.topics for p in t.partitions if p.error_code == ErrorCode.none}

    async def commit(self, group: str, node: int, offsets: dict[tuple[str, int], int]) -> None:
        """Commit offsets for a group without members (generation -1, as
        kafka-consumer-groups.sh --reset-offsets does)."""
        mod = request_module(8, 9)
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (t, p), o in sorted(offsets.items()):
            by_topic.setdefault(t, []).append((p, o))
        resp = await self.broker(node, make(
            request_class(8, 9), group_id=group, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, topics=tuple(make(mod.OffsetCommitRequestTopic, name=t, partitions=tuple(
                make(mod.OffsetCommitRequestPartition, partition_index=p, committed_offset=o,
                     committed_leader_epoch=-1, committed_metadata=None) for p, o in ps))
                for t, ps in by_topic.items())))
        errors = {(t.name, int(p.partition_index)): p.error_code for t in resp.topics for p in t.partitions
                  if p.error_code != ErrorCode.none}
        if errors:
            (t, p), code = next(iter(errors.items()))
            raise ConsoleError(f"cannot commit {t}-{p} for {group}: {error_text(code)}")

    async def alter_share_offsets(self, group: str, node: int, offsets: dict[tuple[str, int], int]) -> None:
        mod = request_module(91, 0)
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (t, p), o in sorted(offsets.items()):
            by_topic.setdefault(t, []).append((p, o))
        resp = await self.broker(node, make(request_class(91, 0), group_id=group, topics=tuple(
            make(mod.AlterShareGroupOffsetsRequestTopic, topic_name=t, partitions=tuple(
                make(mod.AlterShareGroupOffsetsRequestPartition, partition_index=p, start_offset=o)
                for p, o in ps)) for t, ps in by_topic.items())))
        if resp.error_code != ErrorCode.none:
            raise ConsoleError(f"cannot reset {group}: {error_text(resp.error_code, resp.error_message)}")
        for t in resp.responses:
            for p in t.partitions:
                if p.error_code != ErrorCode.none:
                    raise ConsoleError(f"cannot reset {t.topic_name}-{p.partition_index} for {group}: "
                                       f"{error_text(p.error_code, p.error_message)}")

    async def delete_group(self, group: str) -> None:
        node = await self.coordinator(group)
        resp = await self.broker(node, make(request_class(42, 2), groups_names=(group,)))
        r = resp.results[0]
        if r.error_code != ErrorCode.none:
            raise ConsoleError(f"cannot delete {group}: {error_text(r.error_code)}")

    # ------------------------------------------------------------------ transactions

    async def open_transactions(self) -> list[OpenTransaction]:
        """Transactions in progress (Ongoing, PrepareCommit, PrepareAbort) on every coordinator."""
        states = ("Ongoing", "PrepareCommit", "PrepareAbort")
        answers = await self.each_coordinator(make(request_class(66, 0), state_filters=states,
                                                   producer_id_filters=()))
        out: list[OpenTransaction] = []
        for node, resp in answers.items():
            if isinstance(resp, ConsoleError) or resp.error_code != ErrorCode.none or not resp.transaction_states:
                continue
            ids = tuple(s.transactional_id for s in resp.transaction_states)
            try:
                described = await self.broker(node, make(request_class(65, 0), transactional_ids=ids))
            except ConsoleError:
                continue
            for s in described.transaction_states:
                if s.error_code != ErrorCode.none or s.transaction_state not in states:
                    continue
                start = s.transaction_start_time
                start_ms = int(start.timestamp() * 1000) if start is not None else -1
                out.append(OpenTransaction(
                    s.transactional_id, int(s.producer_id), int(s.producer_epoch), s.transaction_state,
                    start_ms if start_ms > 0 else -1,
                    int(s.transaction_timeout.total_seconds() * 1000),
                    tuple(sorted((t.topic, int(p)) for t in s.topics for p in t.partitions)), node))
        return sorted(out, key=lambda t: (t.start_ms, t.transactional_id))
