"""The contract between share-partitions and the share coordinator (Kafka's ``Persister``).

A share-partition lives on its topic-partition's leader; its durable state lives in
``__share_group_state``, in the shard of the share coordinator that leads the partition
of that topic its key ``group:topicId:partition`` hashes to (``dmq.share.records
.partition_for``). The share-partition manager reads and writes that state only through
a ``SharePersister``: the broker's implementation calls the local share coordinator when
this broker leads the state partition and sends Kafka's inter-broker requests
(InitializeShareGroupState 83, ReadShareGroupState 84, WriteShareGroupState 85,
DeleteShareGroupState 86, ReadShareGroupStateSummary 87) to the broker that does
otherwise.

Every call answers with Kafka's error codes rather than raising:

- ``not_coordinator`` / ``coordinator_not_available`` / ``coordinator_load_in_progress``:
  retriable, the caller tries again (the persister may already have retried);
- ``fenced_leader_epoch`` (a newer partition leader wrote) and ``fenced_state_epoch``
  (the group reset the state, AlterShareGroupOffsets): the share-partition is stale and
  must be dropped and loaded again; the share-partition maps both to
  NOT_LEADER_OR_FOLLOWER for its clients, as Kafka does;
- ``invalid_request`` (writing a state never initialized), ``unknown_topic_or_partition``.

A write is durable (replicated to the state partition's in-sync replicas) when it
answers ``none``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from dmq.share.records import UNKNOWN_DELIVERY_COMPLETE_COUNT, StateBatch


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ReadStateResult:
    """ReadShareGroupState's answer for one share-partition. ``start_offset`` -1: the
    state is initialized but has no start yet (the reset policy decides)."""
    error: ErrorCode
    state_epoch: int = 0
    start_offset: int = -1
    state_batches: tuple[StateBatch, ...] = ()
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class StateSummary:
    """ReadShareGroupStateSummary's answer (DescribeShareGroupOffsets, lag)."""
    error: ErrorCode
    state_epoch: int = 0
    leader_epoch: int = -1
    start_offset: int = -1
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT


class SharePersister(Protocol):
    """Durable share-partition state. Called from the event loop; implementations never
    block it. ``leader_epoch`` is the caller's leader epoch of the topic-partition: a
    read with a newer one records it, and later writes with an older one are fenced."""

    async def initialize_state(self, key: SharePartitionKey, state_epoch: int,
                               start_offset: int) -> ErrorCode:
        """Create (or reset) the state: no batches, ``start_offset`` (-1: not yet known)."""
        ...

    async def read_state(self, key: SharePartitionKey, leader_epoch: int) -> ReadStateResult:
        ...

    async def write_state(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                          start_offset: int, state_batches: tuple[StateBatch, ...],
                          delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT) -> ErrorCode:
        """Replace the state from ``start_offset`` on (-1: the stored start) with
        ``state_batches`` merged over it: batches below the start are dropped; where
        batches overlap, the higher delivery count wins, then the higher delivery state,
        then the written batch (Kafka's PersisterStateBatchCombiner; a share-partition's
        counts only grow and done states are final, so what it writes wins in practice)."""
        ...

    async def delete_state(self, key: SharePartitionKey) -> ErrorCode:
        ...

    async def read_state_summary(self, key: SharePartitionKey, leader_epoch: int) -> StateSummary:
        ...
