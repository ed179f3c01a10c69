"""AdminManager's checks against an embedded store (no broker process)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dmq.cluster.admin_manager import AdminManager, manual_assignment
from dmq.cluster.metadata import (
    DEFAULT_BROKER_ENTITY,
    BrokerInfo,
    EmbeddedMetadataStore,
    MetadataError,
    TopicMetadata,
)
from dmq.config import BrokerConfig


@pytest.mark.parametrize("name", ["\u0661", "\u00b2", "1\n", "-1", "one"])
def test_a_broker_config_resource_is_named_by_ascii_digits(name: str) -> None:
    """"١" (an Arabic-Indic one) and "²" passed ``str.isdigit``: their configs were stored
    under a znode no broker reads, and the change reported success."""
    with pytest.raises(MetadataError) as refused:
        AdminManager.broker_config_entity(name)
    assert refused.value.error == "invalid_request"


def test_broker_config_entities() -> None:
    assert AdminManager.broker_config_entity("3") == "3"
    assert AdminManager.broker_config_entity("") == DEFAULT_BROKER_ENTITY


def two_broker_manager(tmp_path: Path) -> AdminManager:
    """An AdminManager over an embedded store with brokers 0 and 1 registered."""
    store = EmbeddedMetadataStore(str(tmp_path), 0)
    for broker in (0, 1):
        asyncio.run(store.register_broker(BrokerInfo(broker, "127.0.0.1", 9092 + broker)))

    async def nothing(_topic: TopicMetadata) -> None:
        return None
    return AdminManager(store, BrokerConfig(), nothing, nothing, lambda _name: None)


@pytest.mark.parametrize(("assignment", "message"), [
    ({0: [0], 1: [0, 1]}, "All partitions should have the same number of replicas"),
    ({0: [0, 1], 1: [1]}, "All partitions should have the same number of replicas"),
    ({0: [0, 0]}, "The manual partition assignment includes the broker 0 more than once."),
    ({0: [0], 1: []}, "The manual partition assignment includes an empty replica list."),
    ({0: [0, 5]}, "The manual partition assignment includes broker 5, but no such broker is registered."),
    ({0: [0], 2: [1]}, "partitions should be a consecutive 0-based integer sequence"),
])
def test_a_manual_assignment_is_checked_as_kafka_does(tmp_path: Path, assignment: dict[int, list[int]],
                                                      message: str) -> None:
    """{0: [0], 1: [0, 1]} was created with replication factor 1 taken from partition 0, and
    partition 1 on two brokers."""
    manager = two_broker_manager(tmp_path)
    with pytest.raises(MetadataError) as refused:
        asyncio.run(manager.create_topic("manual", -1, -1, {}, assignment))
    assert (refused.value.error, str(refused.value)) == ("invalid_replica_assignment", message)
    assert manager.store.topic("manual") is None


def test_a_partition_assigned_twice_is_refused() -> None:
    """CreateTopics naming one partition twice: the last assignment silently won."""
    with pytest.raises(MetadataError) as refused:
        manual_assignment([(0, [0]), (1, [1]), (0, [1])])
    assert (refused.value.error, str(refused.value)) == (
        "invalid_replica_assignment", "Found multiple manual partition assignments for partition 0")
    assert manual_assignment([]) is None
    assert manual_assignment([(1, [1]), (0, [0])]) == {1: [1], 0: [0]}


def test_names_that_differ_only_in_dot_and_underscore_collide(tmp_path: Path) -> None:
    """Kafka refuses "a_b" beside "a.b" (their metric names are the same): both existed."""
    manager = two_broker_manager(tmp_path)
    asyncio.run(manager.create_topic("metrics.a_b", 1, 1, {}))
    for name in ("metrics_a_b", "metrics.a.b", "metrics_a.b"):
        with pytest.raises(MetadataError) as refused:
            asyncio.run(manager.create_topic(name, 1, 1, {}))
        assert (refused.value.error, str(refused.value)) == (
            "invalid_topic_exception", f"Topic '{name}' collides with existing topics: metrics.a_b")
    with pytest.raises(MetadataError) as refused:
        asyncio.run(manager.auto_create_topic("metrics_a_b"))
    assert refused.value.error == "invalid_topic_exception"
    asyncio.run(manager.create_topic("metrics-a-b", 1, 1, {}))  # '-' does not collide


def test_cluster_metadata_cannot_be_created(tmp_path: Path) -> None:
    manager = two_broker_manager(tmp_path)
    with pytest.raises(MetadataError) as refused:
        asyncio.run(manager.create_topic("__cluster_metadata", 1, 1, {}))
    assert (refused.value.error, str(refused.value)) == (
        "invalid_request", "Creation of internal topic __cluster_metadata is prohibited.")
    with pytest.raises(MetadataError) as refused:
        asyncio.run(manager.auto_create_topic("__cluster_metadata"))
    assert refused.value.error == "invalid_topic_exception"
    assert manager.store.topic("__cluster_metadata") is None
