"""CreateTopics (and Metadata's auto-creation) against a real broker."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from support.admin import create_topic, create_topics
from support.broker import BrokerProcess

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module


def test_a_name_ending_in_a_newline_is_an_invalid_topic(broker: BrokerProcess) -> None:
    """"foo\\n" was created; the partition checkpoints (a line per partition) then lost its
    lines, and records deleted by DeleteRecords came back after a restart."""
    with WireClient("127.0.0.1", broker.port) as c:
        error, message, _ = create_topic(c, "nl-topic\n", 1, 1)
        assert error == ErrorCode.invalid_topic_exception, message
        assert message is not None and "contains one or more characters other than" in message
        mod = request_module(3, 9)
        answer = c.request(make(request_class(3, 9), allow_auto_topic_creation=True,
                                include_topic_authorized_operations=False, include_cluster_authorized_operations=False,
                                topics=(make(mod.MetadataRequestTopic, name="auto-nl\n"),)))
        assert [ErrorCode(t.error_code) for t in answer.topics] == [ErrorCode.invalid_topic_exception]
        names = c.request(make(request_class(3, 9), allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False, include_cluster_authorized_operations=False, topics=None)).topics
        assert not [t.name for t in names if "\n" in t.name]


def test_a_partition_assigned_twice_is_invalid_replica_assignment(broker: BrokerProcess) -> None:
    with WireClient("127.0.0.1", broker.port) as c:
        error, message, _ = create_topic(c, "twice-assigned", assignment=[(0, [0]), (0, [0])])
        assert (error, message) == (ErrorCode.invalid_replica_assignment,
                                    "Found multiple manual partition assignments for partition 0")
        assert create_topic(c, "twice-assigned", assignment=[(0, [0]), (1, [0])])[0] == ErrorCode.none


def test_cluster_metadata_and_colliding_names(broker: BrokerProcess) -> None:
    """__cluster_metadata could be created (Kafka: INVALID_REQUEST, whatever else the request
    says); "coll_x" beside "coll.x" too (Kafka: INVALID_TOPIC_EXCEPTION)."""
    with WireClient("127.0.0.1", broker.port) as c:
        results = create_topics(c, [{"name": "__cluster_metadata"}, {"name": "__cluster_metadata"}])
        assert [(ErrorCode(r.error_code), r.error_message) for r in results] == [
            (ErrorCode.invalid_request, "Creation of internal topic __cluster_metadata is prohibited.")] * 2
        assert create_topic(c, "coll.x", 1, 1)[0] == ErrorCode.none
        assert create_topic(c, "coll_x", 1, 1)[:2] == (
            ErrorCode.invalid_topic_exception, "Topic 'coll_x' collides with existing topics: coll.x")


def test_validate_only_reports_what_the_assignment_would_create(broker: BrokerProcess) -> None:
    """CreateTopics v5+ with validate_only answers the partitions and replication factor the
    topic would get: from a manual assignment, not the broker's defaults."""
    with WireClient("127.0.0.1", broker.port) as c:
        error, _, result = create_topic(c, "validated", assignment={0: [0], 1: [0], 2: [0]}, validate_only=True)
        assert error == ErrorCode.none
        assert (result.num_partitions, result.replication_factor) == (3, 1)
        assert create_topic(c, "validated", 1, 1)[0] == ErrorCode.none  # nothing was created
