"""Share groups (KIP-932, "Queues for Kafka"): the sans-io core.

``records`` is the ``__share_group_state`` record codec (Kafka's byte format);
``partition`` is ``SharePartition``, the pure state machine of one share-partition
(group x topic-partition) on the partition leader. Neither awaits nor touches the
network: the async layers (the share coordinator, the share fetch path) drive them.
"""
