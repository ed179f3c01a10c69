"""Classic Kafka's znode paths (relative to the chroot of ``zookeeper.connect``). Pure."""

from __future__ import annotations

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
# Group configs (Kafka keeps them in KRaft's metadata only; dmq's ZooKeeper clusters here,
# in the shape of the topic and broker configs).
CONFIG_GROUPS = "/config/groups"
# User configs: SCRAM credentials in Kafka's form ({"version":1,"config":{"SCRAM-SHA-256":"salt=..."}}).
CONFIG_USERS = "/config/users"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
DELETE_TOPICS = "/admin/delete_topics"
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
# dmq's own: leaders that lost their followers ask the controller to elect another ISR member.
LEADER_RESIGNATIONS = "/admin/leader_resignations"
# dmq's own: the highest leader epoch each deleted topic reached; a topic created again under
# the name starts above it (the two incarnations' epochs never meet: see ZooKeeperMetadataStore).
TOPIC_EPOCH_FLOORS = "/admin/topic_epoch_floors"

# Created at startup by every broker.
PERSISTENT_PARENTS = (BROKER_IDS, BROKER_TOPICS, CONFIG_TOPICS, CONFIG_BROKERS, CONFIG_GROUPS,
                      DELETE_TOPICS, CONTROLLED_SHUTDOWN, CONFIG_USERS, TOPIC_EPOCH_FLOORS)


def broker(broker_id: int | str) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic(name: str) -> str:
    return f"{BROKER_TOPICS}/{name}"


def partitions(name: str) -> str:
    return f"{BROKER_TOPICS}/{name}/partitions"


def partition(name: str, index: int) -> str:
    return f"{BROKER_TOPICS}/{name}/partitions/{index}"


def topic_epoch_floor(name: str) -> str:
    return f"{TOPIC_EPOCH_FLOORS}/{name}"


def partition_state(name: str, index: int) -> str:
    return f"{BROKER_TOPICS}/{name}/partitions/{index}/state"


def topic_config(name: str) -> str:
    return f"{CONFIG_TOPICS}/{name}"


def broker_config(entity: str) -> str:
    return f"{CONFIG_BROKERS}/{entity}"


def group_config(group_id: str) -> str:
    return f"{CONFIG_GROUPS}/{group_id}"


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: an entity name as a znode name (URL-encoded, UTF-8)."""
    from urllib.parse import quote

    return quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    from urllib.parse import unquote

    return unquote(name)


def user_config(user: str) -> str:
    return f"{CONFIG_USERS}/{sanitize(user)}"


def controlled_shutdown(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def parse_partition_state(path: str) -> tuple[str, int] | None:
    """(topic, partition) of a partition state path; None for any other path."""
    parts = path.split("/")
    if len(parts) != 7 or parts[:3] != ["", "brokers", "topics"] or parts[4] != "partitions" \
            or parts[6] != "state" or not parts[5].isdigit():
        return None
    return parts[3], int(parts[5])
