"""CreatePartitions against a real (single, embedded-store) broker: the checks of an
explicit assignment, with Kafka's errors and messages (ZkAdminManager.createPartitions,
AdminZkClient.createNewPartitionsAssignment, KafkaApis.handleCreatePartitionsRequest)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from support.admin import create_partitions, create_partitions_answers, create_topic
from support.broker import BrokerProcess

from dmq.client.wire import WireClient


@pytest.mark.parametrize(("assignments", "message"), [
    ([[0]], "Increasing the number of partitions by 2 but 1 assignments provided."),
    ([[0], [0], [0]], "Increasing the number of partitions by 2 but 3 assignments provided."),
    ([[0], [7, 0]], "Unknown broker(s) in replica assignment: 7."),
    ([[0], []], "Cannot have replication factor of 0 for partition id 2."),
    ([[0], [0, 0]], "Duplicate brokers not allowed in replica assignment: 0, 0 for partition id 2."),
])
def test_an_assignment_that_does_not_fit_is_refused(broker: BrokerProcess, topic_name: str,
                                                    assignments: list[list[int]], message: str) -> None:
    """The assignments were only checked for live brokers, then dropped: the partitions were
    added wherever the store put them, whatever was asked."""
    name = topic_name
    with WireClient("127.0.0.1", broker.port) as c:
        assert create_topic(c, name, 1, 1)[0] == ErrorCode.none
        assert create_partitions(c, name, 3, assignments, validate_only=True) == (
            ErrorCode.invalid_replica_assignment, message)
        assert create_partitions(c, name, 3, assignments) == (ErrorCode.invalid_replica_assignment, message)
        assert create_partitions(c, name, 3, [[0], [0]]) == (ErrorCode.none, None)


def test_duplicate_and_unknown_topics(broker: BrokerProcess) -> None:
    with WireClient("127.0.0.1", broker.port) as c:
        assert create_topic(c, "twice", 1, 1)[0] == ErrorCode.none
        assert create_topic(c, "once", 1, 1)[0] == ErrorCode.none
        # one answer for the duplicated topic, as Kafka's (a map); the other topic proceeds
        assert create_partitions_answers(c, [("twice", 2, None), ("once", 2, None), ("twice", 3, None)]) == [
            ("twice", ErrorCode.invalid_request, "Duplicate topic in request."), ("once", ErrorCode.none, None)]
        assert create_partitions(c, "nowhere", 2) == (ErrorCode.unknown_topic_or_partition,
                                                      "The topic 'nowhere' does not exist.")
