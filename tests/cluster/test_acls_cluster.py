"""ACLs in a ZooKeeper cluster: written through one broker, enforced by every broker, read
by a broker that was down when they changed (Kafka's /kafka-acl layout and notifications)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode
from support.cluster import Cluster

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module

DENY_READ = AclBinding(ResourceType.TOPIC, "secret", ResourcePatternType.LITERAL, "User:*", "*",
                       AclOperation.READ, AclPermissionType.DENY)
DENY_DESCRIBE = AclBinding(ResourceType.TOPIC, "aud", ResourcePatternType.PREFIXED, "User:*", "*",
                           AclOperation.DESCRIBE, AclPermissionType.DENY)
ANY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)


def fetch_error(port: int) -> ErrorCode:
    """A consumer's Fetch of secret-0 sent to one broker: the ACL check comes before the
    leadership check, so every broker answers for its own authorizer."""
    mod = request_module(1, 12)
    with WireClient("127.0.0.1", port) as c:
        answer = c.request(make(request_class(1, 12), replica_id=-1, max_wait=timedelta(milliseconds=10), min_bytes=1,
                                max_bytes=10**6, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                                forgotten_topics_data=(), topics=(make(mod.FetchTopic, topic="secret", partitions=(
                                    make(mod.FetchPartition, partition=0, fetch_offset=0, partition_max_bytes=10**6,
                                         current_leader_epoch=-1, log_start_offset=-1, last_fetched_epoch=-1),)),)))
    return answer.responses[0].partitions[0].error_code


# Inter-broker requests (followers' fetches) come as User:ANONYMOUS too until the brokers
# authenticate: the cluster resource has no ACL, so allow.everyone.if.no.acl.found lets them.
@pytest.mark.cluster_config(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                               "allow.everyone.if.no.acl.found": "true"})
def test_acls_reach_every_broker_and_survive_a_broker_restart(cluster: Cluster) -> None:
    cluster.create_topic("secret", partitions=1, rf=3)
    ports = {i: b.port for i, b in cluster.brokers.items()}
    assert {fetch_error(p) for p in ports.values()} <= {ErrorCode.none, ErrorCode.not_leader_or_follower}
    via1 = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    assert via1.create_acls([DENY_READ])[DENY_READ].result(10) is None
    cluster.wait_for(lambda: all(fetch_error(p) == ErrorCode.topic_authorization_failed for p in ports.values()),
                     "every broker refusing reads of secret")
    for i in ports:  # each broker describes the same ACLs
        via = AdminClient({"bootstrap.servers": cluster.brokers[i].bootstrap})
        assert [b.name for b in via.describe_acls(ANY_ACL).result(10)] == ["secret"]
    # Broker 3 is down while the ACLs change; it reads them from ZooKeeper when it starts.
    cluster.brokers[3].stop()
    via2 = AdminClient({"bootstrap.servers": cluster.brokers[2].bootstrap})
    assert len(via2.delete_acls([ANY_ACL])[ANY_ACL].result(10)) == 1
    assert via2.create_acls([DENY_DESCRIBE])[DENY_DESCRIBE].result(10) is None
    cluster.brokers[3].start(timeout=60)
    cluster.wait_for(lambda: {fetch_error(p) for p in ports.values()} <= {ErrorCode.none,
                                                                          ErrorCode.not_leader_or_follower},
                     "reads of secret allowed again everywhere")
    via3 = AdminClient({"bootstrap.servers": cluster.brokers[3].bootstrap})
    found = via3.describe_acls(ANY_ACL).result(10)
    assert [(b.name, b.resource_pattern_type, b.operation) for b in found] == [
        ("aud", ResourcePatternType.PREFIXED, AclOperation.DESCRIBE)]
    # Broker 3 enforces what it read: Metadata for audit-log is refused (Describe denied by
    # prefix), for secret not.
    meta = via3.list_topics("audit-log", timeout=10)
    assert meta.topics["audit-log"].error is not None
    assert meta.topics["audit-log"].error.code() == ErrorCode.topic_authorization_failed.value
    assert via3.list_topics("secret", timeout=10).topics["secret"].error is None
    # A group name with "/" cannot be a znode: that ACL alone is refused (INVALID_REQUEST),
    # the others of the request are created.
    slash = AclBinding(ResourceType.GROUP, "team/a", ResourcePatternType.LITERAL, "User:*", "*",
                       AclOperation.READ, AclPermissionType.ALLOW)
    plain = AclBinding(ResourceType.GROUP, "team-a", ResourcePatternType.LITERAL, "User:*", "*",
                       AclOperation.READ, AclPermissionType.ALLOW)
    futures = via3.create_acls([slash, plain])
    with pytest.raises(KafkaException, match="cannot be stored in ZooKeeper"):
        futures[slash].result(10)
    assert futures[plain].result(10) is None
    cluster.wait_for(lambda: sorted(b.name for b in via1.describe_acls(ANY_ACL).result(10)) == ["aud", "team-a"],
                     "broker 1 seeing broker 3's ACL")
