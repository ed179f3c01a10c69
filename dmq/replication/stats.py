"""Plain counters the replication layer keeps for metrics (``dmq.metrics`` reads them).

The produce and fetch paths only add to integer attributes here: no locks, no
lookups, nothing allocated per request. A scrape (``dmq.metrics``) reads them on
the event loop and turns them into Prometheus families. Event-loop thread only.
"""

from __future__ import annotations


class TopicStats:
    """Kafka's BrokerTopicMetrics of one topic on this broker, as running totals.

    Invariant: every attribute only grows, for as long as the ReplicaManager keeps
    this object (it drops it when the topic's last partition here is deleted, as
    Kafka removes a deleted topic's metrics). Writers: ``Partition`` (appends) and
    ``ReplicaManager`` (fetches); readers: ``dmq.metrics`` at scrape time."""

    __slots__ = ("messages_in", "bytes_in", "bytes_out", "replication_bytes_in",
                 "replication_bytes_out")

    def __init__(self) -> None:
        self.messages_in = 0  # records appended as leader (MessagesInPerSec)
        self.bytes_in = 0  # batch bytes appended as leader (BytesInPerSec)
        self.bytes_out = 0  # bytes read by consumers' fetches (BytesOutPerSec)
        self.replication_bytes_in = 0  # bytes appended as follower (ReplicationBytesInPerSec)
        self.replication_bytes_out = 0  # bytes read by followers' fetches (ReplicationBytesOutPerSec)
