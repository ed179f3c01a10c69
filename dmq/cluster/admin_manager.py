"""AdminManager: validates and applies admin requests (Kafka's ZkAdminManager), then tells the broker.

On a single broker this broker is the controller and the only replica: a
change is written to the metadata store first (durable), then
``on_topic_change``/``on_topic_delete`` make the local ReplicaManager follow
it. ``validate_only`` requests run every check and change nothing.

Runs on the event loop; the changing methods are ``async`` because the store's
writes are (ZooKeeper, or an fsync off the loop), and raise MetadataError
(REQUEST_TIMED_OUT when the store cannot be reached in time).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from dmq.cluster.metadata import (
    CLUSTER_METADATA_TOPIC,
    DEFAULT_BROKER_ENTITY,
    INTERNAL_TOPICS,
    ConfigChange,
    MetadataError,
    MetadataStore,
    TopicMetadata,
    colliding_topics,
    validate_topic_name,
)
from dmq.config import (
    BrokerConfig,
    ConfigError,
    validate_dynamic_broker_configs,
    validate_group_configs,
    validate_topic_configs,
)


def manual_assignment(pairs: list[tuple[int, list[int]]]) -> dict[int, list[int]] | None:
    """CreateTopics' assignments as partition -> replicas (None: there are none); a partition
    given twice is INVALID_REPLICA_ASSIGNMENT, as in KRaft's ReplicationControlManager (a
    map took the last one)."""
    out: dict[int, list[int]] = {}
    for partition, replicas in pairs:
        if partition in out:
            raise MetadataError("invalid_replica_assignment",
                                f"Found multiple manual partition assignments for partition {partition}")
        out[partition] = list(replicas)
    return out or None


class AdminManager:
    def __init__(self, store: MetadataStore, config: BrokerConfig,
                 on_topic_change: Callable[[TopicMetadata], Awaitable[None]],
                 on_topic_delete: Callable[[TopicMetadata], Awaitable[None]],
                 on_config_change: Callable[[str], None],
                 on_broker_config_change: Callable[[], None] | None = None) -> None:
        self.store = store
        self.config = config
        self.on_topic_change = on_topic_change
        self.on_topic_delete = on_topic_delete
        self.on_config_change = on_config_change
        self.on_broker_config_change = on_broker_config_change
        # name -> creates that internal topic as its coordinator does (partitions, replication
        # factor, configs); registered by the broker. Answers whether it exists afterwards.
        self.internal_topic_creators: dict[str, Callable[[], Awaitable[bool]]] = {}

    async def auto_create_topic(self, name: str) -> TopicMetadata:
        """A topic a client asked for (Metadata with auto-creation allowed): an internal topic
        is created by its coordinator's rules (Kafka's AutoTopicCreationManager), any
        other with the broker's defaults."""
        if name in INTERNAL_TOPICS:
            creator = self.internal_topic_creators.get(name)
            if creator is None or not await creator():
                raise MetadataError("leader_not_available", f"{name} is not available yet")
            topic = self.store.topic(name)
            if topic is None:
                raise MetadataError("leader_not_available", f"{name} is being created")
            return topic
        if name == CLUSTER_METADATA_TOPIC:
            raise MetadataError("invalid_topic_exception",
                                f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.")
        return await self.create_topic(name, -1, -1, {})

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, str | None],
                     assignment: dict[int, list[int]] | None = None,
                     validate_only: bool = False) -> TopicMetadata:
        """Create a topic; -1 partitions/replication factor mean the broker defaults."""
        if name == CLUSTER_METADATA_TOPIC:
            raise MetadataError("invalid_request", f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.")
        validate_topic_name(name)
        if name in self.store.topics():
            raise MetadataError("topic_already_exists", f"Topic '{name}' already exists.")
        colliding = colliding_topics(name, self.store.topics())
        if colliding:
            raise MetadataError("invalid_topic_exception",
                                f"Topic '{name}' collides with existing topics: {', '.join(colliding)}")
        if assignment:
            if num_partitions != -1 or replication_factor != -1:
                raise MetadataError(
                    "invalid_request",
                    "Both numPartitions or replicationFactor and replicasAssignments were set.",
                )
            self._check_manual_assignment(assignment)
            num_partitions = len(assignment)
            replication_factor = len(next(iter(assignment.values())))
        if num_partitions == -1:
            num_partitions = int(self.config["num.partitions"])
        if replication_factor == -1:
            replication_factor = int(self.config["default.replication.factor"])
        if num_partitions <= 0:
            raise MetadataError("invalid_partitions", "Number of partitions must be larger than 0.")
        if replication_factor <= 0:
            raise MetadataError("invalid_replication_factor",
                                "Replication factor must be larger than 0.")
        try:
            validate_topic_configs(configs, self.config)
        except ConfigError as e:
            raise MetadataError("invalid_config", str(e)) from None
        live_count = len(self.store.brokers()) or 1
        if replication_factor > live_count:
            raise MetadataError(
                "invalid_replication_factor",
                f"Unable to replicate the partition {replication_factor} time(s): The target "
                f"replication factor of {replication_factor} cannot be reached because only "
                f"{live_count} broker(s) are registered.",
            )
        if validate_only:
            return TopicMetadata(name, "0" * 32, {}, {k: v for k, v in configs.items() if v is not None})
        topic = await self.store.create_topic(
            name, num_partitions, replication_factor,
            {k: v for k, v in configs.items() if v is not None}, assignment,
        )
        await self.on_topic_change(topic)
        return topic

    def _check_manual_assignment(self, assignment: dict[int, list[int]]) -> None:
        """A CreateTopics manual assignment, as Kafka checks it (AdminZkClient.validateTopicCreate,
        and ReplicationControlManager.validateManualPartitionAssignment where ZooKeeper-mode
        Kafka checks nothing), with their messages: INVALID_REPLICA_ASSIGNMENT."""
        registered = {b.broker_id for b in self.store.brokers()}
        sizes = set()
        for replicas in assignment.values():
            if not replicas:
                raise MetadataError("invalid_replica_assignment",
                                    "The manual partition assignment includes an empty replica list.")
            for broker in sorted(replicas):
                if broker not in registered:
                    raise MetadataError("invalid_replica_assignment",
                                        f"The manual partition assignment includes broker {broker}, but no such "
                                        f"broker is registered.")
                if replicas.count(broker) > 1:
                    raise MetadataError("invalid_replica_assignment",
                                        f"The manual partition assignment includes the broker {broker} more than "
                                        f"once.")
            sizes.add(len(replicas))
        if len(sizes) != 1:
            raise MetadataError("invalid_replica_assignment", "All partitions should have the same number of replicas")
        if sorted(assignment) != list(range(len(assignment))):
            raise MetadataError("invalid_replica_assignment",
                                "partitions should be a consecutive 0-based integer sequence")

    async def delete_topic(self, name: str) -> TopicMetadata:
        if not self.config["delete.topic.enable"]:
            raise MetadataError("topic_deletion_disabled", "Topic deletion is disabled.")
        topic = await self.store.delete_topic(name)
        await self.on_topic_delete(topic)
        return topic

    async def create_partitions(self, name: str, total: int, validate_only: bool = False,
                                assignments: list[list[int]] | None = None) -> TopicMetadata:
        """Grow ``name`` to ``total`` partitions; ``assignments``: the replicas of each new
        partition, in order (else placed by the store). Checked as Kafka's ZkAdminManager
        and AdminZkClient.createNewPartitionsAssignment do, with their messages."""
        topic = self.store.topic(name)
        if topic is None:
            raise MetadataError("unknown_topic_or_partition", f"The topic '{name}' does not exist.")
        if any(t == name for t, _ in await self.store.ongoing_reassignments()):
            raise MetadataError("reassignment_in_progress",
                                f"A partition reassignment is in progress for the topic '{name}'.")
        current = len(topic.partitions)
        if total < current:
            raise MetadataError(
                "invalid_partitions",
                f"Topic currently has {current} partitions, which is higher than the requested {total}.",
            )
        if total == current:
            raise MetadataError("invalid_partitions", f"Topic already has {current} partitions.")
        assignment = None
        if assignments is not None:
            assignment = {current + i: list(replicas) for i, replicas in enumerate(assignments)}
            self._check_new_partitions(topic, total - current, assignment)
        if validate_only:
            return topic
        topic = await self.store.create_partitions(name, total, assignment)
        await self.on_topic_change(topic)
        return topic

    def _check_new_partitions(self, topic: TopicMetadata, increase: int, assignment: dict[int, list[int]]) -> None:
        live = {b.broker_id for b in self.store.brokers()}
        unknown = sorted({b for replicas in assignment.values() for b in replicas} - live)
        if unknown:
            raise MetadataError("invalid_replica_assignment",
                                f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
        if len(assignment) != increase:
            raise MetadataError("invalid_replica_assignment",
                                f"Increasing the number of partitions by {increase} but {len(assignment)} "
                                f"assignments provided.")
        for p, replicas in assignment.items():
            if not replicas:
                raise MetadataError("invalid_replica_assignment",
                                    f"Cannot have replication factor of 0 for partition id {p}.")
            if len(set(replicas)) != len(replicas):
                raise MetadataError("invalid_replica_assignment",
                                    f"Duplicate brokers not allowed in replica assignment: "
                                    f"{', '.join(map(str, replicas))} for partition id {p}.")
        rf = len(topic.partitions[0].replicas) if 0 in topic.partitions else \
            len(next(iter(topic.partitions.values())).replicas)
        bad = sorted((p, len(r)) for p, r in assignment.items() if len(r) != rf)
        if bad:
            raise MetadataError(
                "invalid_replica_assignment",
                f"Inconsistent replication factor between partitions, partition 0 has {rf} while partitions "
                f"[{', '.join(str(p) for p, _ in bad)}] have replication factors "
                f"[{', '.join(str(n) for _, n in bad)}], respectively.")

    async def reassign_partitions(self, targets: dict[tuple[str, int], list[int] | None]
                            ) -> dict[tuple[str, int], tuple[str, str | None]]:
        """Validate and submit reassignments; (error name, message) per partition."""
        results: dict[tuple[str, int], tuple[str, str | None]] = {}
        valid: dict[tuple[str, int], list[int]] = {}
        cancelled: set[tuple[str, int]] = set()
        live = {b.broker_id for b in self.store.brokers()}
        ongoing = await self.store.ongoing_reassignments()
        for (topic, p), replicas in targets.items():
            meta = self.store.topic(topic)
            if meta is None or p not in meta.partitions:
                results[(topic, p)] = ("unknown_topic_or_partition", f"{topic}-{p} does not exist")
            elif replicas is None:  # KIP-455 cancellation: back to the replicas before the move
                if (topic, p) in ongoing:
                    cancelled.add((topic, p))
                else:
                    results[(topic, p)] = ("no_reassignment_in_progress",
                                           f"no reassignment of {topic}-{p} is in progress")
            elif replicas == meta.partitions[p].replicas and (topic, p) not in ongoing:
                results[(topic, p)] = ("none", None)  # already there
            elif not replicas or len(set(replicas)) != len(replicas) or set(replicas) - live:
                results[(topic, p)] = ("invalid_replica_assignment",
                                       f"replicas {replicas} must be distinct live brokers of {sorted(live)}")
            else:
                valid[(topic, p)] = list(replicas)
        if valid or cancelled:
            try:
                await self.store.request_reassignments(valid, frozenset(cancelled))
                results.update({tp: ("none", None) for tp in [*valid, *cancelled]})
            except MetadataError as e:
                results.update({tp: (e.error, str(e)) for tp in [*valid, *cancelled]})
        return results

    async def elect_preferred_leaders(self, partitions: list[tuple[str, int]]
                                ) -> dict[tuple[str, int], tuple[str, str | None]]:
        """Validate preferred leader elections and hand the eligible ones to the controller."""
        results: dict[tuple[str, int], tuple[str, str | None]] = {}
        live = {b.broker_id for b in self.store.brokers()}
        wanted: list[tuple[str, int]] = []
        for topic, p in partitions:
            meta = self.store.topic(topic)
            state = meta.partitions.get(p) if meta else None
            if state is None:
                results[(topic, p)] = ("unknown_topic_or_partition", f"{topic}-{p} does not exist")
            elif state.replicas[0] == state.leader:
                results[(topic, p)] = ("election_not_needed", "the preferred replica already leads")
            elif state.replicas[0] not in live or state.replicas[0] not in state.isr:
                results[(topic, p)] = ("preferred_leader_not_available",
                                       f"preferred replica {state.replicas[0]} is not live and in the ISR")
            else:
                wanted.append((topic, p))
                results[(topic, p)] = ("none", None)
        if wanted:
            try:
                await self.store.request_preferred_elections(wanted)
            except MetadataError as e:
                results.update({tp: (e.error, str(e)) for tp in wanted})
        return results

    @staticmethod
    def broker_config_entity(resource_name: str) -> str:
        """The store's entity for a BROKER config resource: a broker id, or the default for ``""``."""
        if resource_name in ("", DEFAULT_BROKER_ENTITY):
            return DEFAULT_BROKER_ENTITY
        if not (resource_name.isascii() and resource_name.isdigit()):  # isdigit alone takes "²", "١"
            raise MetadataError("invalid_request", f"Invalid broker id {resource_name!r}: give a broker "
                                                   f"id, or an empty name for the cluster-wide default")
        return resource_name

    async def alter_broker_configs(self, resource_name: str, configs: dict[str, str],
                             validate_only: bool = False) -> None:
        """Replace the dynamic overrides of one broker (its id) or of all (``""``)."""
        await self.update_broker_configs(resource_name, lambda _current: dict(configs), validate_only)

    async def update_broker_configs(self, resource_name: str, change: ConfigChange,
                                    validate_only: bool = False) -> None:
        """Change the dynamic overrides of one broker (its id) or of all (``""``) by
        ``change(current)``, atomically (the store's ``update_broker_configs``)."""
        entity = self.broker_config_entity(resource_name)

        def checked(current: dict[str, str]) -> dict[str, str]:
            new = change(current)
            try:
                validate_dynamic_broker_configs(new)
            except ConfigError as e:  # INVALID_REQUEST, as Kafka (KAFKA-13609 keeps it so)
                raise MetadataError("invalid_request", str(e)) from None
            return new
        if validate_only:
            checked(self.store.broker_configs(entity))
            return
        await self.store.update_broker_configs(entity, checked)
        if self.on_broker_config_change is not None:
            self.on_broker_config_change()

    async def alter_topic_configs(self, name: str, configs: dict[str, str],
                            validate_only: bool = False) -> None:
        """Replace the topic's config overrides with ``configs``."""
        await self.update_topic_configs(name, lambda _current: dict(configs), validate_only)

    async def update_topic_configs(self, name: str, change: ConfigChange,
                                   validate_only: bool = False) -> None:
        """Change the topic's config overrides by ``change(current)``: read, changed and
        written as one step (the store's ``update_topic_configs``), so that two requests
        changing the same topic at once both take effect (Kafka's controller applies them
        in turn)."""
        topic = self.store.topic(name)
        if topic is None:
            raise MetadataError("unknown_topic_or_partition",
                                f"Topic {name} does not exist.")

        def checked(current: dict[str, str]) -> dict[str, str]:
            new = change(current)
            try:
                validate_topic_configs(new, self.config)
            except ConfigError as e:
                raise MetadataError("invalid_config", str(e)) from None
            return new
        if validate_only:
            checked(dict(topic.configs))
            return
        await self.store.update_topic_configs(name, checked)
        self.on_config_change(name)

    async def alter_group_configs(self, group_id: str, configs: dict[str, str],
                                  validate_only: bool = False) -> None:
        """Replace a group's config overrides (Kafka's GROUP resource; the group need not
        exist)."""
        await self.update_group_configs(group_id, lambda _current: dict(configs), validate_only)

    async def update_group_configs(self, group_id: str, change: ConfigChange,
                                   validate_only: bool = False) -> None:
        """Change a group's config overrides by ``change(current)``, atomically. Validated as
        Kafka's GroupConfig does (``validate_group_configs``)."""
        if not group_id:
            raise MetadataError("invalid_request", "Group name must not be empty")

        def checked(current: dict[str, str]) -> dict[str, str]:
            new = change(current)
            try:
                validate_group_configs(new, self.config)
            except ConfigError as e:
                raise MetadataError("invalid_config", str(e)) from None
            return new
        if validate_only:
            checked(self.store.group_configs(group_id))
            return
        await self.store.update_group_configs(group_id, checked)
