"""Share groups (KIP-932) for ``dmq groups``, over dmq's wire client: confluent-kafka's
AdminClient (2.16) neither lists share groups nor speaks their APIs.

A share group is described by its coordinator (ShareGroupDescribe: members and
assignments; DescribeShareGroupOffsets v1: start offset and lag per partition) and by
its partitions' leaders (DescribeSharePartitions, dmq's extension: the records in flight,
acquired and waiting for dead letters, as the leader holds them); reset-offsets is
AlterShareGroupOffsets (as ``kafka-share-groups.sh --reset-offsets``).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cli.common import fail, wire_client
from dmq.cli.transactions import Brokers
from dmq.protocol.codec import make, request_class, request_module
from dmq.protocol.extensions import DescribeSharePartitionsRequest, SharePartitionsTopic

COORDINATOR_WAIT = 15.0
RETRIABLE = (ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
             ErrorCode.not_coordinator)


def _code(error: int) -> str:
    return ErrorCode(error).name.upper()


@dataclass
class SharePartitionView:
    """One row of ``dmq groups describe`` for a share group."""
    topic: str
    partition: int
    start_offset: int | None = None
    lag: int | None = None
    in_flight: int | None = None
    acquired: int | None = None
    archiving: int | None = None
    members: list[str] = field(default_factory=list)


@dataclass
class ShareGroupView:
    group_id: str
    coordinator: int
    coordinator_address: tuple[str, int]
    state: str
    group_epoch: int
    assignor: str
    members: list[Any]  # ShareGroupDescribe's members
    partitions: list[SharePartitionView]

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)


class ShareGroups:
    """The share groups of the cluster ``brokers`` shows (one connection per broker)."""

    def __init__(self, brokers: Brokers) -> None:
        self.brokers = brokers

    def list(self) -> list[tuple[str, str]]:
        """(group id, state) of every share group, from every broker (ListGroups v5)."""
        out = []
        for broker_id in sorted(self.brokers.addresses):
            resp = self.brokers.ask_listing(broker_id, make(request_class(16, 5), states_filter=(),
                                                            types_filter=("share",)))
            if resp.error_code != ErrorCode.none:
                fail(f"broker {broker_id} cannot list groups: {_code(resp.error_code)}")
            out += [(g.group_id, g.group_state) for g in resp.groups]
        return sorted(out)

    def coordinator(self, group: str) -> int:
        """The group's coordinator (a coordinator being elected or loaded is waited for)."""
        deadline = time.monotonic() + COORDINATOR_WAIT
        while True:
            (found,) = self.brokers.boot.request(make(request_class(10, 4), key_type=0,
                                                      coordinator_keys=(group,))).coordinators
            if found.error_code == ErrorCode.none:
                return int(found.node_id)
            if found.error_code not in RETRIABLE or time.monotonic() > deadline:
                fail(f"cannot find the coordinator of group {group}: {_code(found.error_code)}")
            time.sleep(0.2)

    def describe_raw(self, group: str) -> tuple[int, Any] | None:
        """(coordinator, ShareGroupDescribe's group) or None when ``group`` is no share group."""
        deadline = time.monotonic() + COORDINATOR_WAIT
        while True:
            coordinator = self.coordinator(group)
            (g,) = self.brokers.ask(coordinator, make(request_class(77, 1), group_ids=(group,),
                                                      include_authorized_operations=False)).groups
            if g.error_code == ErrorCode.none:
                return coordinator, g
            if g.error_code == ErrorCode.group_id_not_found:
                return None
            if g.error_code not in RETRIABLE or time.monotonic() > deadline:
                fail(f"cannot describe share group {group}: {_code(g.error_code)}")
            time.sleep(0.2)

    def offsets(self, coordinator: int, group: str) -> dict[tuple[str, int], tuple[uuid.UUID, int, int]]:
        """(topic id, start offset, lag) of each partition the group has initialized."""
        mod = request_module(90, 1)
        (g,) = self.brokers.ask(coordinator, make(request_class(90, 1), groups=(
            make(mod.DescribeShareGroupOffsetsRequestGroup, group_id=group, topics=None),))).groups
        if g.error_code != ErrorCode.none:
            fail(f"cannot describe the offsets of share group {group}: {_code(g.error_code)}")
        return {(t.topic_name, p.partition_index): (t.topic_id, p.start_offset, p.lag)
                for t in g.topics for p in t.partitions}

    def leaders_view(self, group: str, partitions: dict[tuple[str, int], uuid.UUID]) -> dict[tuple[str, int], Any]:
        """DescribeSharePartitions of each partition at its leader (a leader that does not
        answer leaves its partitions out)."""
        by_leader: dict[int, dict[uuid.UUID, list[int]]] = {}
        names: dict[uuid.UUID, str] = {}
        for (topic, index), topic_id in partitions.items():
            names[topic_id] = topic
            parts = self.brokers.partitions.get(topic) or []
            leader = next((p.leader for p in parts if p.index == index), -1)
            if leader in self.brokers.addresses:
                by_leader.setdefault(leader, {}).setdefault(topic_id, []).append(index)
        out: dict[tuple[str, int], Any] = {}
        for leader, topics in sorted(by_leader.items()):
            resp = self.brokers.ask(leader, make(DescribeSharePartitionsRequest, group_id=group, topics=tuple(
                make(SharePartitionsTopic, topic_id=t, partitions=tuple(sorted(ps))) for t, ps in topics.items())))
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code == ErrorCode.none:
                        out[(names[t.topic_id], p.partition_index)] = p
        return out

    def describe(self, group: str) -> ShareGroupView | None:
        found = self.describe_raw(group)
        if found is None:
            return None
        coordinator, g = found
        offsets = self.offsets(coordinator, group)
        rows: dict[tuple[str, int], SharePartitionView] = {}
        ids: dict[tuple[str, int], uuid.UUID] = {}
        for (topic, index), (topic_id, start, lag) in offsets.items():
            rows[(topic, index)] = SharePartitionView(topic, index, start if start >= 0 else None,
                                                      lag if lag >= 0 else None)
            ids[(topic, index)] = topic_id
        for m in g.members:
            for tp in m.assignment.topic_partitions:
                for index in tp.partitions:
                    row = rows.setdefault((tp.topic_name, index), SharePartitionView(tp.topic_name, index))
                    row.members.append(m.member_id)
                    ids[(tp.topic_name, index)] = tp.topic_id
        for key, p in self.leaders_view(group, ids).items():
            if p.loaded:
                row = rows[key]
                row.in_flight, row.acquired, row.archiving = p.in_flight, p.acquired, p.archiving
                if row.start_offset is None:
                    row.start_offset = p.start_offset
        return ShareGroupView(group, coordinator, self.brokers.addresses[coordinator], g.group_state,
                              g.group_epoch, g.assignor_name, list(g.members),
                              [rows[k] for k in sorted(rows)])

    def alter(self, coordinator: int, group: str, targets: dict[tuple[str, int], int]) -> None:
        """AlterShareGroupOffsets; any error is one line and exit 1."""
        mod = request_module(91, 0)
        topics: dict[str, list[tuple[int, int]]] = {}
        for (topic, index), offset in sorted(targets.items()):
            topics.setdefault(topic, []).append((index, offset))
        resp = self.brokers.ask(coordinator, make(request_class(91, 0), group_id=group, topics=tuple(
            make(mod.AlterShareGroupOffsetsRequestTopic, topic_name=t, partitions=tuple(
                make(mod.AlterShareGroupOffsetsRequestPartition, partition_index=i, start_offset=o) for i, o in ps))
            for t, ps in topics.items())))
        if resp.error_code != ErrorCode.none:
            fail(f"cannot reset offsets of share group {group}: {_code(resp.error_code)}"
                 + (f" ({resp.error_message})" if resp.error_message else ""))
        for t in resp.responses:
            for p in t.partitions:
                if p.error_code != ErrorCode.none:
                    fail(f"cannot reset the offset of share group {group} on {t.topic_name}-{p.partition_index}: "
                         f"{_code(p.error_code)}")


@contextlib.contextmanager
def share_groups(bootstrap: str) -> Iterator[ShareGroups]:
    """The cluster's share groups, through the first bootstrap broker that answers."""
    with wire_client(bootstrap, "dmq-groups") as boot:
        brokers = Brokers(boot)
        try:
            yield ShareGroups(brokers)
        finally:
            brokers.close()
