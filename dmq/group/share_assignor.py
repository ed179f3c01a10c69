"""The share groups' SimpleAssignor (KIP-932), as a pure function.

Share-group members do not own partitions exclusively: the records of a
partition are handed out record by record, so several members may share one
partition, and every partition that anyone subscribes to must have a member.
Kafka's SimpleAssignor (``SimpleHomogeneousAssignmentBuilder`` and
``SimpleHeterogeneousAssignmentBuilder``) puts balance first, stickiness second:

- **Homogeneous** subscriptions (every member subscribes to the same topics):
  the P target partitions are shared among the M members with
  ``sharing = ceil(M / P)`` members per partition, so ``sharing * P`` slots in
  all; each member fills ``floor`` or ``ceil`` of ``sharing * P / M`` of them.
  3 members and 1 partition: all three get it; 2 members and 4 partitions: 2
  each; 3 members and 2 partitions: 2, 1 and 1.
- **Heterogeneous** subscriptions: the same, topic by topic, among the members
  subscribed to that topic; the per-topic assignments are combined.

Stickiness: members keep what they had as far as the counts allow; the members
that held most keep the larger counts. Should keeping old partitions leave a
partition that only already-full members could take (rare), the topic's
assignment is laid out afresh instead, in the same balanced counts: balance
before stickiness, as in Kafka.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence

ASSIGNOR_NAME = "simple"

TopicPartition = tuple[uuid.UUID, int]
MemberAssignment = dict[uuid.UUID, frozenset[int]]


def assign(subscriptions: Mapping[str, Iterable[uuid.UUID]],
           partitions: Mapping[uuid.UUID, Sequence[int]],
           previous: Mapping[str, Mapping[uuid.UUID, Iterable[int]]],
           homogeneous: bool | None = None) -> dict[str, MemberAssignment]:
    """The target assignment of a share group.

    ``subscriptions``: member id -> the ids of the topics it subscribes to;
    ``partitions``: topic id -> its assignable partitions (topics missing here
    are not assignable); ``previous``: the current target assignment;
    ``homogeneous``: whether all members subscribe to the same topic *names*
    (Kafka decides by names, topics that do not exist included), by default
    whether they subscribe to the same assignable topics. Every member gets an
    entry (possibly empty); only topics with partitions appear.
    """
    members = sorted(subscriptions)
    subscribed = {m: frozenset(t for t in subscriptions[m] if partitions.get(t)) for m in members}
    old: dict[str, set[TopicPartition]] = {
        m: {(t, p) for t, ps in previous.get(m, {}).items() for p in ps} for m in members}
    result: dict[str, set[TopicPartition]] = {m: set() for m in members}
    if homogeneous is None:
        homogeneous = len({subscribed[m] for m in members}) == 1
    if members and homogeneous:
        groups = [(members, sorted((t, p) for t in subscribed[members[0]] for p in partitions[t]))]
    else:
        topics = sorted({t for m in members for t in subscribed[m]})
        groups = [([m for m in members if t in subscribed[m]], [(t, p) for p in partitions[t]])
                  for t in topics]
    for group_members, targets in groups:
        for member, owned in share(group_members, targets, old).items():
            result[member] |= owned
    out: dict[str, MemberAssignment] = {}
    for member, owned in result.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic, partition in owned:
            by_topic.setdefault(topic, set()).add(partition)
        out[member] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out


def sharing(members: int, partitions: int) -> int:
    """How many members share each partition: ``ceil(members / partitions)``."""
    return -(-members // partitions) if partitions else 0


def share(members: Sequence[str], targets: Sequence[TopicPartition],
          previous: Mapping[str, set[TopicPartition]]) -> dict[str, set[TopicPartition]]:
    """Share ``targets`` among ``members``: each target gets ``sharing(M, P)`` distinct
    members, each member ``floor`` or ``ceil`` of the slots per member; sticky to
    ``previous`` where that keeps those counts."""
    result: dict[str, set[TopicPartition]] = {m: set() for m in members}
    if not members or not targets:
        return result
    per_partition = sharing(len(members), len(targets))
    base, extra = divmod(per_partition * len(targets), len(members))
    wanted = set(targets)
    kept = {m: sorted(previous.get(m, set()) & wanted) for m in members}
    # The larger counts go to the members that held the most: they keep more.
    order = sorted(members, key=lambda m: -len(kept[m]))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
    owners: dict[TopicPartition, set[str]] = {tp: set() for tp in targets}
    for member in order:
        for tp in kept[member]:
            if len(result[member]) < quota[member] and len(owners[tp]) < per_partition:
                result[member].add(tp)
                owners[tp].add(member)
    for tp in targets:
        while len(owners[tp]) < per_partition:
            candidates = [m for m in order if len(result[m]) < quota[m] and m not in owners[tp]]
            if not candidates:
                return _lay_out(order, targets, per_partition, quota)
            member = max(candidates, key=lambda m: quota[m] - len(result[m]))
            result[member].add(tp)
            owners[tp].add(member)
    return result


def _lay_out(order: Sequence[str], targets: Sequence[TopicPartition], per_partition: int,
             quota: Mapping[str, int]) -> dict[str, set[TopicPartition]]:
    """A fresh balanced assignment: the targets repeated ``per_partition`` times, cut
    into consecutive runs of each member's quota. No quota exceeds the number of
    targets, so a run never holds a partition twice."""
    slots = list(targets) * per_partition
    result: dict[str, set[TopicPartition]] = {}
    start = 0
    for member in order:
        result[member] = set(slots[start:start + quota[member]])
        start += quota[member]
    return result
