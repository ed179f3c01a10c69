"""Cluster metadata: topics, their partitions' replica assignment and state, brokers.

``MetadataStore`` is the interface the broker codes against. Its znode-shaped
model follows classic Kafka: a topic has an id, an assignment
(partition -> replicas), per-partition state (leader, leader epoch, ISR) and
config overrides; the store also keeps ACLs (``dmq.cluster.acls``) and group configs.
``EmbeddedMetadataStore`` keeps that model in one JSON file
(``<data-dir>/__cluster_metadata.json``, written atomically and fsynced) for a
single broker; a ZooKeeper-backed store implements the same interface for
clusters. Callers run on the event-loop thread; writes are ``async``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from dmq.cluster.acls import (
    AclChange,
    AclMap,
    AclResource,
    StoredAce,
    decode_embedded,
    encode_embedded,
)

# fullmatch only: "$" also matches before a final newline, and Python's \w and \d take
# non-ASCII letters and digits (Kafka's Topic.containsValidPattern checks every char).
LEGAL_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME_LENGTH = 249
OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state", "__share_group_state"})
# KRaft's metadata log: no topic of that name may be created (Kafka's KafkaApis).
CLUSTER_METADATA_TOPIC = "__cluster_metadata"


# A config read-modify-write: the new overrides from the current ones.
ConfigChange = Callable[[dict[str, str]], dict[str, str]]


class MetadataError(Exception):
    """A metadata change was refused; ``error`` names the Kafka error code."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


def validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``: INVALID_TOPIC_EXCEPTION with its wording."""
    reason = None
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        reason = f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
    elif not LEGAL_TOPIC_CHARS.fullmatch(name):
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    if reason is not None:
        raise MetadataError("invalid_topic_exception", f"Topic name is invalid: {reason}")


def colliding_topics(name: str, existing: Iterable[str]) -> list[str]:
    """The topics whose name differs from ``name`` only in '.' against '_' (Kafka's
    Topic.hasCollision: their metric names would be the same)."""
    if "." not in name and "_" not in name:
        return []
    unified = name.replace(".", "_")
    return sorted(t for t in existing if t != name and t.replace(".", "_") == unified)


@dataclass(slots=True)
class PartitionState:
    """A partition's leader, leader epoch and ISR as the metadata store holds them.

    ``version`` is the state's version in the store (the ZooKeeper znode version,
    KRaft's partition epoch): a leader's ISR change is a compare-and-set against it.
    -1 where the store has none (the embedded store). It is not part of equality.
    """

    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]
    version: int = field(default=-1, compare=False)


@dataclass(slots=True)
class TopicMetadata:
    name: str
    topic_id: str  # uuid hex form
    partitions: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


@dataclass(slots=True)
class BrokerInfo:
    """A registered broker. ``host``/``port`` are its inter-broker listener's address (what
    brokers connect to); ``endpoints`` every advertised listener as (name, host, port,
    security protocol), Kafka's registration ``endpoints``. Clients are given the endpoint
    of the listener they came in on (``endpoint``)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int, str], ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int]:
        """(host, port) of ``listener``; the inter-broker address if it has no such listener."""
        for name, host, port, _ in self.endpoints:
            if name == listener:
                return host, port
        return self.host, self.port


# The entity name Kafka uses for cluster-wide dynamic broker configs.
DEFAULT_BROKER_ENTITY = "<default>"


class MetadataStore(ABC):
    """What the broker codes against. Reads (topics, brokers, controller, configs) are
    synchronous and answer from memory; writes are ``async`` (they reach ZooKeeper or
    fsync a file) and raise MetadataError, whose ``error`` names the Kafka error code
    (REQUEST_TIMED_OUT when the store cannot be reached in time). Event-loop thread only.
    """

    cluster_id: str
    # This broker's registration as it made it (None before it registered). Kept while the
    # cache of registrations lacks it: after a lost session, until it is registered again.
    registration: BrokerInfo | None = None

    @abstractmethod
    def topics(self) -> dict[str, TopicMetadata]: ...

    @abstractmethod
    def brokers(self) -> list[BrokerInfo]: ...

    @abstractmethod
    def controller_id(self) -> int: ...

    @abstractmethod
    async def register_broker(self, info: BrokerInfo, wait_s: float | None = None) -> None: ...

    @abstractmethod
    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: dict[str, str], assignment: dict[int, list[int]] | None = None
                           ) -> TopicMetadata: ...

    @abstractmethod
    async def delete_topic(self, name: str) -> TopicMetadata: ...

    @abstractmethod
    async def create_partitions(self, name: str, total: int,
                                assignment: dict[int, list[int]] | None = None) -> TopicMetadata:
        """Grow the topic to ``total`` partitions; ``assignment``: the new partitions' replicas
        (validated by the AdminManager), else the store places them."""

    @abstractmethod
    async def update_topic_configs(self, name: str, change: ConfigChange) -> dict[str, str]:
        """Replace the topic's config overrides by ``change(current)`` atomically, and return
        them: a concurrent change of the same topic (through this broker or another) is
        neither lost nor overwritten. ``change`` may be called more than once (with what
        was current each time); if it raises, nothing is written."""

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        await self.update_topic_configs(name, lambda _current: dict(configs))

    @abstractmethod
    async def allocate_producer_ids(self, count: int) -> int:
        """Reserve ``count`` producer ids durably; return the first."""

    async def request_reassignments(self, targets: dict[tuple[str, int], list[int]],
                                    cancelled: frozenset[tuple[str, int]] = frozenset()) -> None:
        """Hand partition reassignments (and cancellations of ongoing ones) to the controller."""
        raise MetadataError("invalid_replica_assignment",
                            "a single broker cannot move partitions: there is nowhere to move them")

    async def ongoing_reassignments(self) -> dict[tuple[str, int], tuple[list[int], list[int]]]:
        """(adding, removing) replicas of every reassignment in progress."""
        return {}

    async def request_preferred_elections(self, partitions: list[tuple[str, int]]) -> None:
        """Ask the controller to move leadership back to the preferred replicas."""
        raise MetadataError("election_not_needed", "a single broker leads every partition it has")

    @abstractmethod
    def broker_configs(self, entity: str) -> dict[str, str]:
        """Dynamic config overrides of one broker (``"<id>"``) or of all (DEFAULT_BROKER_ENTITY)."""

    @abstractmethod
    async def update_broker_configs(self, entity: str, change: ConfigChange) -> dict[str, str]:
        """Replace the dynamic overrides of ``entity`` by ``change(current)`` atomically
        (``update_topic_configs``); every broker it concerns applies them."""

    async def set_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        await self.update_broker_configs(entity, lambda _current: dict(configs))

    @abstractmethod
    def group_configs(self, group_id: str) -> dict[str, str]:
        """A group's config overrides (IncrementalAlterConfigs of a GROUP resource), as
        every broker sees them (share-partition leaders read them too)."""

    @abstractmethod
    async def update_group_configs(self, group_id: str, change: ConfigChange) -> dict[str, str]:
        """Replace a group's config overrides by ``change(current)`` atomically
        (``update_topic_configs``; none: the group has no overrides)."""

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        await self.update_group_configs(group_id, lambda _current: dict(configs))

    # ACLs (dmq.security's authorizer decides with them): ``acl_version`` grows with every
    # change of ``acls()`` this store applies, whoever made it.
    acl_version: int = 0

    def acls(self) -> AclMap:
        """Every resource pattern with ACLs and its entries (none: no authorizer data)."""
        return {}

    async def update_acls(self, resource: AclResource, change: AclChange) -> frozenset[StoredAce]:
        """Replace one resource's entries by ``change(current)`` atomically; return them."""
        raise MetadataError("security_disabled", "this metadata store keeps no ACLs")
    # User configs (Kafka's USER entity: SCRAM credentials, under /config/users/<user> in
    # ZooKeeper, keyed by mechanism in Kafka's string form). Defaults: a store without users.
    def user_configs(self, user: str) -> dict[str, str]:
        """A user's configs, as every broker sees them (SCRAM credentials are read per login)."""
        return {}

    def users(self) -> list[str]:
        """Every user with configs."""
        return []

    async def set_user_configs(self, user: str, configs: dict[str, str]) -> None:
        """Replace a user's configs (none: the user's entry is removed)."""
        raise MetadataError("unsupported_version", "this metadata store keeps no users")

    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics().get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        for t in self.topics().values():
            if t.topic_id == topic_id.hex:
                return t
        return None


class EmbeddedMetadataStore(MetadataStore):
    """Single-broker metadata, persisted in one JSON file.

    Invariant: the file on disk always holds a complete, valid state: every
    change is written to a temporary file, fsynced (on a worker thread, off the
    event loop) and renamed over it before the change is visible to callers.
    Writers are serialized by one asyncio lock; each writes the state with its
    change, then applies the change in memory.
    """

    FILE = "__cluster_metadata.json"

    def __init__(self, data_dir: str, broker_id: int) -> None:
        self.path = os.path.join(data_dir, self.FILE)
        self.broker_id = broker_id
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, TopicMetadata] = {}
        self._next_producer_id = 0
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._group_configs: dict[str, dict[str, str]] = {}
        self._acls: dict[AclResource, frozenset[StoredAce]] = {}
        self._user_configs: dict[str, dict[str, str]] = {}
        self._write_lock = asyncio.Lock()
        os.makedirs(data_dir, exist_ok=True)
        if os.path.exists(self.path):
            with open(self.path) as f:
                raw = json.load(f)
            self.cluster_id = raw["cluster_id"]
            self._next_producer_id = int(raw.get("next_producer_id", 0))
            self._broker_configs = {str(k): dict(v) for k, v in raw.get("broker_configs", {}).items()}
            self._group_configs = {str(k): dict(v) for k, v in raw.get("group_configs", {}).items()}
            self._acls = decode_embedded(raw.get("acls"))
            self._user_configs = {str(k): dict(v) for k, v in raw.get("user_configs", {}).items()}
            for t in raw["topics"]:
                parts = {int(p): PartitionState(**s) for p, s in t["partitions"].items()}
                self._topics[t["name"]] = TopicMetadata(t["name"], t["topic_id"], parts, t["configs"])
        else:
            self.cluster_id = _new_cluster_id()
            self._write(self._snapshot())

    def _snapshot(self, topics: dict[str, TopicMetadata] | None = None,
                  broker_configs: dict[str, dict[str, str]] | None = None,
                  next_producer_id: int | None = None,
                  group_configs: dict[str, dict[str, str]] | None = None,
                  acls: AclMap | None = None,
                  user_configs: dict[str, dict[str, str]] | None = None) -> dict[str, object]:
        """The file's content: the current state with the given parts replaced."""
        return {
            "version": 1,
            "cluster_id": self.cluster_id,
            "next_producer_id": self._next_producer_id if next_producer_id is None else next_producer_id,
            "broker_configs": self._broker_configs if broker_configs is None else broker_configs,
            "group_configs": self._group_configs if group_configs is None else group_configs,
            "acls": encode_embedded(self._acls if acls is None else acls),
            "user_configs": self._user_configs if user_configs is None else user_configs,
            "topics": [
                {"name": t.name, "topic_id": t.topic_id, "configs": t.configs,
                 "partitions": {str(p): asdict(s) for p, s in t.partitions.items()}}
                for t in (self._topics if topics is None else topics).values()
            ],
        }

    def _write(self, raw: dict[str, object]) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(raw, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    async def _persist(self, raw: dict[str, object], apply: Callable[[], None]) -> None:
        """Write ``raw`` (in a thread), then ``apply`` the change in memory.

        A caller cancelled meanwhile (a client that disconnects) still waits for the
        write, which its thread cannot stop, and applies it before the cancellation goes
        on: releasing the write lock early let the next write race this one on the
        temporary file, and skipping ``apply`` lost a change that reached the disk.
        Uncancelled, it resumes in the same step as the write's completion, so whoever
        awaits a store write sees memory and file agree at once."""
        write = asyncio.ensure_future(asyncio.to_thread(self._write, raw))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            await write
            apply()
            raise
        apply()

    def topics(self) -> dict[str, TopicMetadata]:
        return self._topics

    def brokers(self) -> list[BrokerInfo]:
        return list(self._brokers.values())

    def controller_id(self) -> int:
        return self.broker_id

    async def register_broker(self, info: BrokerInfo, wait_s: float | None = None) -> None:
        self._brokers[info.broker_id] = info
        self.registration = info

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: dict[str, str], assignment: dict[int, list[int]] | None = None
                           ) -> TopicMetadata:
        # The AdminManager has validated the request; the store only records it.
        async with self._write_lock:
            if name in self._topics:
                raise MetadataError("topic_already_exists", f"Topic '{name}' already exists.")
            parts = {}
            for p in range(num_partitions):
                replicas = (assignment or {}).get(p) or [self.broker_id]
                parts[p] = PartitionState(replicas, self.broker_id, 0, [self.broker_id])
            topic = TopicMetadata(name, uuid.uuid4().hex, parts, dict(configs))
            await self._persist(self._snapshot(topics={**self._topics, name: topic}),
                                lambda: self._topics.__setitem__(name, topic))
            return topic

    def _existing(self, name: str) -> TopicMetadata:
        topic = self._topics.get(name)
        if topic is None:
            raise MetadataError("unknown_topic_or_partition",
                                "This server does not host this topic-partition.")
        return topic

    async def delete_topic(self, name: str) -> TopicMetadata:
        async with self._write_lock:
            topic = self._existing(name)
            await self._persist(self._snapshot(topics={k: v for k, v in self._topics.items() if k != name}),
                                lambda: self._topics.__delitem__(name))
            return topic

    async def create_partitions(self, name: str, total: int,
                                assignment: dict[int, list[int]] | None = None) -> TopicMetadata:
        async with self._write_lock:
            topic = self._existing(name)
            parts = dict(topic.partitions)
            for p in range(len(topic.partitions), total):
                replicas = (assignment or {}).get(p) or [self.broker_id]
                parts[p] = PartitionState(list(replicas), self.broker_id, 0, [self.broker_id])
            grown = TopicMetadata(topic.name, topic.topic_id, parts, topic.configs)
            await self._persist(self._snapshot(topics={**self._topics, name: grown}),
                                lambda: setattr(topic, "partitions", parts))
            return topic

    async def update_topic_configs(self, name: str, change: ConfigChange) -> dict[str, str]:
        async with self._write_lock:  # read, change and write under it: no change lost
            topic = self._existing(name)
            configs = dict(change(dict(topic.configs)))
            changed = TopicMetadata(topic.name, topic.topic_id, topic.partitions, configs)
            await self._persist(self._snapshot(topics={**self._topics, name: changed}),
                                lambda: setattr(topic, "configs", configs))
            return dict(configs)

    def broker_configs(self, entity: str) -> dict[str, str]:
        return dict(self._broker_configs.get(entity, {}))

    async def update_broker_configs(self, entity: str, change: ConfigChange) -> dict[str, str]:
        async with self._write_lock:
            configs = dict(change(self.broker_configs(entity)))
            new = dict(self._broker_configs)
            if configs:
                new[entity] = configs
            else:
                new.pop(entity, None)
            await self._persist(self._snapshot(broker_configs=new),
                                lambda: setattr(self, "_broker_configs", new))
            return dict(configs)

    def group_configs(self, group_id: str) -> dict[str, str]:
        return dict(self._group_configs.get(group_id, {}))

    async def update_group_configs(self, group_id: str, change: ConfigChange) -> dict[str, str]:
        async with self._write_lock:
            configs = dict(change(self.group_configs(group_id)))
            new = dict(self._group_configs)
            if configs:
                new[group_id] = configs
            else:
                new.pop(group_id, None)
            await self._persist(self._snapshot(group_configs=new),
                                lambda: setattr(self, "_group_configs", new))
            return dict(configs)

    def acls(self) -> AclMap:
        return self._acls

    async def update_acls(self, resource: AclResource, change: AclChange) -> frozenset[StoredAce]:
        async with self._write_lock:
            new_aces = change(self._acls.get(resource, frozenset()))
            new = dict(self._acls)
            if new_aces:
                new[resource] = new_aces
            else:
                new.pop(resource, None)

            def apply() -> None:
                self._acls = new
                self.acl_version += 1
            await self._persist(self._snapshot(acls=new), apply)
            return new_aces
    def user_configs(self, user: str) -> dict[str, str]:
        return dict(self._user_configs.get(user, {}))

    def users(self) -> list[str]:
        return sorted(self._user_configs)

    async def set_user_configs(self, user: str, configs: dict[str, str]) -> None:
        async with self._write_lock:
            new = dict(self._user_configs)
            if configs:
                new[user] = dict(configs)
            else:
                new.pop(user, None)
            await self._persist(self._snapshot(user_configs=new),
                                lambda: setattr(self, "_user_configs", new))

    async def allocate_producer_ids(self, count: int) -> int:
        async with self._write_lock:
            start = self._next_producer_id
            await self._persist(self._snapshot(next_producer_id=start + count),
                                lambda: setattr(self, "_next_producer_id", start + count))
            return start


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
