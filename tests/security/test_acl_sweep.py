"""The sweep: every API the broker advertises, sent by a principal the ACLs do not allow,
is refused with Kafka's error and changes nothing.

The broker runs the ACL authorizer with ``allow.everyone.if.no.acl.found=true``. The
admin sets the scene while no ACL exists (a topic with records, a group's offsets, a share
group, a transactional id), then gives itself ``All`` on every resource type through
CreateAcls: from then on every resource has an ACL, and the intruder none. The admin
takes a snapshot of the broker's state (topics, every partition's offsets, configs,
groups, committed offsets, ACLs, transactions), the intruder sends every probe of
``support.acl_sweep``, and the snapshot afterwards must be the same.

Both authenticate with SASL PLAIN on the broker's SASL_PLAINTEXT listener, as
``User:sweep-admin`` and ``User:mallory``: the intruder is a real, authenticated principal
the ACLs say nothing of.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from support.acl_sweep import UNCHECKED, Names, Probe, error_codes, extension_probes, probes
from support.broker import BrokerProcess
from support.ports import free_port

from dmq.client.security import ClientSecurity
from dmq.client.wire import WireClient
from dmq.handlers import HANDLERS
from dmq.protocol.codec import make, request_class, request_module
from dmq.record.records import encode_batch

ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"


@dataclass(frozen=True)
class Identity:
    """Who a connection is to the broker, as ACLs name it (principal and host)."""

    user: str
    password: str
    host: str = "*"

    @property
    def principal(self) -> str:
        return f"User:{self.user}"

    def connect(self, broker: BrokerProcess) -> WireClient:
        """Authenticated with SASL PLAIN on the broker's SASL_PLAINTEXT listener."""
        return WireClient(broker.host, SASL_PORTS[broker.port], client_id="acl-sweep",
                          security=ClientSecurity(mechanism="PLAIN", username=self.user, password=self.password))


ADMIN = Identity("sweep-admin", "sweep-admin-secret")
INTRUDER = Identity("mallory", "mallory-secret")
SASL_PORTS: dict[int, int] = {}  # the broker's PLAINTEXT port -> its SASL_PLAINTEXT port
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{i.user}="{i.password}"' for i in (ADMIN, INTRUDER)) + ";")
NAMES = dict(topic="sweep-orders", group="sweep-billing", share_group="sweep-workers",
             transactional_id="sweep-txn")


def acl_creation(principal: str, host: str, resource_type: int, name: str, pattern: int = 3,
                 operation: int = 2) -> Any:
    """An AclCreation (CreateAcls v3): ALLOW ``operation`` (2: All) on a resource."""
    return make(request_module(30, 3).AclCreation, resource_type=resource_type, resource_name=name,
                resource_pattern_type=pattern, principal=principal, host=host, operation=operation,
                permission_type=3)


def request(c: WireClient, key: int, version: int, **values: Any) -> Any:
    return c.request(make(request_class(key, version), **values))


def m(key: int, version: int, cls: str, **values: Any) -> Any:
    return make(getattr(request_module(key, version), cls), **values)


def set_scene(c: WireClient) -> uuid.UUID:
    """The resources the intruder will try, created by the admin while no ACL exists."""
    t, g, s, x = NAMES["topic"], NAMES["group"], NAMES["share_group"], NAMES["transactional_id"]
    created = request(c, 19, 7, timeout=timedelta(seconds=10), validate_only=False, topics=(
        m(19, 7, "CreatableTopic", name=t, num_partitions=2, replication_factor=1, assignments=(),
          configs=(m(19, 7, "CreatableTopicConfig", name="retention.ms", value="86400000"),)),))
    assert created.topics[0].error_code == ErrorCode.none, created
    for p in (0, 1):
        produced = request(c, 0, 9, transactional_id=None, acks=-1, timeout=timedelta(seconds=10), topic_data=(
            m(0, 9, "TopicProduceData", name=t, partition_data=(m(0, 9, "PartitionProduceData", index=p,
              records=encode_batch([(b"k", b"v%d" % i, []) for i in range(3)])),)),))
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none, produced
    for _ in range(100):  # the group coordinator is ready once __consumer_offsets is
        found = request(c, 10, 4, key_type=0, coordinator_keys=(g,))
        if found.coordinators[0].error_code == ErrorCode.none:
            break
        time.sleep(0.1)
    committed = request(c, 8, 9, group_id=g, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                        topics=(m(8, 9, "OffsetCommitRequestTopic", name=t, partitions=(m(
                            8, 9, "OffsetCommitRequestPartition", partition_index=0, committed_offset=2,
                            committed_leader_epoch=-1, committed_metadata="m"),)),))
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none, committed
    member = str(uuid.uuid4())
    joined = request(c, 76, 1, group_id=s, member_id=member, member_epoch=0, rack_id=None,
                     subscribed_topic_names=(t,))
    assert joined.error_code == ErrorCode.none, joined
    left = request(c, 76, 1, group_id=s, member_id=member, member_epoch=-1, rack_id=None,
                   subscribed_topic_names=None)
    assert left.error_code == ErrorCode.none, left
    for _ in range(100):
        found = request(c, 10, 4, key_type=1, coordinator_keys=(x,))
        if found.coordinators[0].error_code == ErrorCode.none:
            break
        time.sleep(0.1)
    init = request(c, 22, 4, transactional_id=x, transaction_timeout=timedelta(seconds=60), producer_id=-1,
                   producer_epoch=-1)
    assert init.error_code == ErrorCode.none, init
    topic_id = request(c, 3, 12, topics=(m(3, 12, "MetadataRequestTopic", name=t, topic_id=None),),
                       allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                       include_topic_authorized_operations=False).topics[0].topic_id
    assert isinstance(topic_id, uuid.UUID)
    return topic_id


def lock(c: WireClient) -> None:
    """ACLs on every resource type that allow the admin only: wildcards, and a prefixed one."""
    created = request(c, 30, 3, creations=(
        acl_creation(ADMIN.principal, ADMIN.host, 2, "*"),
        acl_creation(ADMIN.principal, ADMIN.host, 2, "sweep-", pattern=4, operation=3),
        acl_creation(ADMIN.principal, ADMIN.host, 3, "*"),
        acl_creation(ADMIN.principal, ADMIN.host, 4, "kafka-cluster"),
        acl_creation(ADMIN.principal, ADMIN.host, 5, "*")))
    assert [r.error_code for r in created.results] == [ErrorCode.none] * 5, created


def snapshot(c: WireClient) -> dict[str, Any]:
    """What the broker holds, as the admin sees it."""
    meta = request(c, 3, 12, topics=None, allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                   include_topic_authorized_operations=False)
    topics = sorted((t.name, str(t.topic_id), len(t.partitions)) for t in meta.topics)
    offsets = {}
    for timestamp in (-2, -1):
        answer = request(c, 2, 7, replica_id=-1, isolation_level=0, topics=tuple(
            m(2, 7, "ListOffsetsTopic", name=t.name, partitions=tuple(
                m(2, 7, "ListOffsetsPartition", partition_index=p.partition_index, timestamp=timestamp,
                  current_leader_epoch=-1) for p in t.partitions)) for t in meta.topics))
        offsets[timestamp] = sorted((t.name, p.partition_index, p.error_code, p.offset)
                                    for t in answer.topics for p in t.partitions)
    configs = request(c, 32, 4, include_synonyms=False, include_documentation=False, resources=tuple(
        m(32, 4, "DescribeConfigsResource", resource_type=rt, resource_name=name, configuration_keys=None)
        for rt, name in ((2, NAMES["topic"]), (4, "0"), (32, NAMES["share_group"]))))
    fetched = request(c, 9, 8, require_stable=False, groups=(
        m(9, 8, "OffsetFetchRequestGroup", group_id=NAMES["group"], topics=None),))
    groups = request(c, 16, 5, states_filter=(), types_filter=())
    acls = request(c, 29, 3, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                   principal_filter=None, host_filter=None, operation=1, permission_type=1)
    txns = request(c, 66, 0, state_filters=(), producer_id_filters=())
    share = request(c, 90, 1, groups=(m(90, 1, "DescribeShareGroupOffsetsRequestGroup",
                                        group_id=NAMES["share_group"], topics=None),))
    return {
        "topics": topics, "offsets": offsets,
        "configs": sorted((r.resource_name, e.name, e.value) for r in configs.results for e in r.configs),
        "committed": [(t.name, p.partition_index, p.committed_offset, p.metadata)
                      for g in fetched.groups for t in g.topics for p in t.partitions],
        "groups": sorted((g.group_id, g.group_state, g.group_type) for g in groups.groups),
        "acls": sorted((r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                        a.permission_type) for r in acls.resources for a in r.acls),
        "transactions": sorted((s.transactional_id, s.transaction_state) for s in txns.transaction_states),
        "share offsets": [(t.topic_name, p.partition_index, p.start_offset)
                          for g in share.groups for t in g.topics for p in t.partitions],
    }


def settled(c: WireClient, timeout: float = 20.0) -> dict[str, Any]:
    """A snapshot that stays the same for a second (background writes of the scene done)."""
    deadline = time.monotonic() + timeout
    last = snapshot(c)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = snapshot(c)
        if now == last:
            return now
        last = now
    raise AssertionError("the broker's state kept changing before the sweep")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, dict[str, Any], Names]]:
    base: Path = tmp_path_factory.mktemp("acl-sweep")
    port, sasl_port = free_port(), free_port()
    broker = BrokerProcess(base / "data", port=port, overrides={
        "authorizer.class.name": ACL_AUTHORIZER, "allow.everyone.if.no.acl.found": "true",
        "group.initial.rebalance.delay.ms": "0", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS},
        listeners=f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}").start()
    SASL_PORTS[port] = sasl_port
    try:
        with ADMIN.connect(broker) as admin:
            topic_id = set_scene(admin)
            lock(admin)
            before = settled(admin)
        assert before["acls"] and before["committed"] and before["transactions"], before
        yield broker, before, Names(topic_id=topic_id, **NAMES)
    finally:
        broker.close()


def advertised(broker: BrokerProcess) -> dict[int, tuple[int, int]]:
    with INTRUDER.connect(broker) as c:  # ApiVersions is answered to anyone
        answer = request(c, 18, 3, client_software_name="sweep", client_software_version="1")
    assert answer.error_code == ErrorCode.none
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


def all_probes(broker: BrokerProcess, names: Names) -> list[Probe]:
    versions = advertised(broker)
    # The share coordinator's inter-broker APIs (83-87) and dmq's own are not advertised
    # but answered.
    versions.update({k: (h.MIN_VERSION, h.MAX_VERSION) for k, h in HANDLERS.items() if k in range(83, 88)})
    return probes(versions, names) + extension_probes(names)


def test_every_advertised_api_has_a_probe(secured: tuple[BrokerProcess, dict[str, Any], Names]) -> None:
    broker, _, names = secured
    probed = {p.api_key for p in all_probes(broker, names)}
    assert set(advertised(broker)) - UNCHECKED - probed == set()


def test_every_api_refuses_the_intruder_and_changes_nothing(
        secured: tuple[BrokerProcess, dict[str, Any], Names]) -> None:
    broker, before, names = secured
    failures = []
    with INTRUDER.connect(broker) as c:
        for probe in all_probes(broker, names):
            answer = c.request(probe.request)
            codes = list(error_codes(answer))
            nested = {code for depth, code in codes if depth > 0}
            top = {code for depth, code in codes if depth == 0}
            if probe.listing is not None:
                if getattr(answer, probe.listing) or nested | top - {ErrorCode.none}:
                    failures.append(f"{probe.label}: listed {answer}")
                continue
            seen = (nested | top) - {ErrorCode.none}
            if not nested <= probe.refusals or not top <= probe.refusals | {ErrorCode.none} or not seen:
                failures.append(f"{probe.label} (v{probe.version}): {sorted(c.name for c in nested | top)}, "
                                f"expected {sorted(r.name for r in probe.refusals)}")
            elif not probe.refusals <= seen:
                failures.append(f"{probe.label}: missing {sorted(r.name for r in probe.refusals - seen)}")
        # The connection still answers (nothing closed it).
        assert request(c, 18, 3, client_software_name="sweep", client_software_version="1").error_code == 0
    assert not failures, "\n".join(failures)
    with ADMIN.connect(broker) as admin:
        after = snapshot(admin)
    assert after == before


def test_the_admin_still_may(secured: tuple[BrokerProcess, dict[str, Any], Names]) -> None:
    """The ACLs that refuse the intruder allow the admin (the sweep's refusals are ACLs'
    doing, not a broken request): the same request from the admin works."""
    broker, _, names = secured
    with ADMIN.connect(broker) as admin, INTRUDER.connect(broker) as intruder:
        for c, expected in ((admin, ErrorCode.none), (intruder, ErrorCode.topic_authorization_failed)):
            answer = request(c, 2, 7, replica_id=-1, isolation_level=0, topics=(
                m(2, 7, "ListOffsetsTopic", name=names.topic, partitions=(
                    m(2, 7, "ListOffsetsPartition", partition_index=0, timestamp=-1, current_leader_epoch=-1),)),))
            assert answer.topics[0].partitions[0].error_code == expected
