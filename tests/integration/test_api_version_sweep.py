"""Every advertised API at every advertised version, against a real broker.

ApiVersions must list only what works: each (API, version) pair the broker
advertises is sent here with kio's schema of that version and must get a
decodable answer without error.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from kio.index import load_entity_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from support.broker import BrokerProcess

from dmq.client.wire import WireClient
from dmq.handlers import HANDLERS
from dmq.protocol.codec import make, request_class
from dmq.record.records import encode_batch

T5 = timedelta(seconds=5)


def build(api_key: int, version: int, topic: str) -> Any:
    mod = load_entity_module(request_class(api_key, version).__module__.split(".")[2], version,
                             EntityType.request)
    R = request_class(api_key, version)

    def m(cls_name: str, /, **kw: Any) -> Any:
        return make(getattr(mod, cls_name), **kw)

    if api_key == 18:
        return make(R, client_software_name="sweep", client_software_version="1")
    if api_key == 3:
        return make(R, topics=(m("MetadataRequestTopic", name=topic, topic_id=None),),
                    allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False)
    if api_key == 0:
        batch = encode_batch([(b"k", b"v", [])])
        return make(R, transactional_id=None, acks=-1, timeout=T5, topic_data=(
            m("TopicProduceData", name=topic, partition_data=(m("PartitionProduceData", index=0, records=batch),)),))
    if api_key == 1:
        return make(R, replica_id=-1, max_wait=timedelta(milliseconds=10), min_bytes=1, max_bytes=10**6,
                    isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
                    topics=(m("FetchTopic", topic=topic, partitions=(
                        m("FetchPartition", partition=0, fetch_offset=0, partition_max_bytes=10**6,
                          current_leader_epoch=-1, log_start_offset=-1, last_fetched_epoch=-1),)),))
    if api_key == 2:
        return make(R, replica_id=-1, isolation_level=0, topics=(m("ListOffsetsTopic", name=topic, partitions=(
            m("ListOffsetsPartition", partition_index=0, timestamp=-2, current_leader_epoch=-1, max_num_offsets=1),)),))
    if api_key == 19:
        return make(R, timeout=T5, validate_only=False, topics=(m("CreatableTopic", name=topic + "-new",
                    num_partitions=1, replication_factor=1, assignments=(), configs=()),))
    if api_key == 20:
        if version >= 6:
            return make(R, timeout=T5, topics=(m("DeleteTopicState", name=topic, topic_id=None),))
        return make(R, timeout=T5, topic_names=(topic,))
    if api_key == 37:
        return make(R, timeout=T5, validate_only=False,
                    topics=(m("CreatePartitionsTopic", name=topic, count=2, assignments=None),))
    if api_key == 32:
        return make(R, include_synonyms=True, include_documentation=True, resources=(
            m("DescribeConfigsResource", resource_type=2, resource_name=topic, configuration_keys=None),))
    if api_key == 33:
        return make(R, validate_only=False, resources=(m("AlterConfigsResource", resource_type=2, resource_name=topic,
                    configs=(m("AlterableConfig", name="retention.ms", value="1000000"),)),))
    if api_key == 44:
        return make(R, validate_only=False, resources=(m("AlterConfigsResource", resource_type=2, resource_name=topic,
                    configs=(m("AlterableConfig", name="retention.ms", config_operation=0, value="2000000"),)),))
    if api_key == 60:
        return make(R, include_cluster_authorized_operations=False, endpoint_type=1)
    if api_key == 21:
        return make(R, timeout=T5, topics=(m("DeleteRecordsTopic", name=topic, partitions=(
            m("DeleteRecordsPartition", partition_index=0, offset=1),)),))
    if api_key == 22:
        return make(R, transactional_id=None, transaction_timeout=timedelta(seconds=60), producer_id=-1,
                    producer_epoch=-1)
    raise AssertionError(f"no builder for API {api_key}")


def errors_of(api_key: int, resp: Any) -> list[ErrorCode]:
    if api_key in (18, 60, 22):
        return [resp.error_code]
    if api_key == 3:
        return [t.error_code for t in resp.topics] + [p.error_code for t in resp.topics for p in t.partitions]
    if api_key == 0:
        return [p.error_code for t in resp.responses for p in t.partition_responses]
    if api_key == 1:
        top = [resp.error_code] if hasattr(resp, "error_code") else []  # v7+
        return top + [p.error_code for t in resp.responses for p in t.partitions]
    if api_key in (2, 21):
        return [p.error_code for t in resp.topics for p in t.partitions]
    if api_key == 19:
        return [t.error_code for t in resp.topics]
    if api_key == 20:
        return [t.error_code for t in resp.responses]
    if api_key == 37:
        return [t.error_code for t in resp.results]
    if api_key == 32:
        return [r.error_code for r in resp.results]
    if api_key in (33, 44):
        return [r.error_code for r in resp.responses]
    raise AssertionError(api_key)


PAIRS = [(key, v) for key, h in sorted(HANDLERS.items()) for v in range(h.MIN_VERSION, h.MAX_VERSION + 1)]


@pytest.mark.parametrize("api_key,version", PAIRS, ids=[f"{HANDLERS[k].__name__.rsplit('.', 1)[1]}-v{v}" for k, v in PAIRS])
def test_every_advertised_version(broker: BrokerProcess, api_key: int, version: int) -> None:
    topic = f"sweep-{api_key}-{version}"
    with WireClient("127.0.0.1", broker.port) as c:
        c.request(build(3, 12, topic))  # the topic exists (auto-created)
        c.request(build(0, 9, topic))   # and holds a record
        resp = c.request(build(api_key, version, topic))
        assert errors_of(api_key, resp) and all(e == ErrorCode.none for e in errors_of(api_key, resp)), resp
        if api_key == 1:
            records = resp.responses[0].partitions[0].records
            assert records and len(records) > 61
        if api_key == 2:
            assert resp.topics[0].partitions[0].offset == 0
        # The connection still works after the answer (framing was right).
        again = c.request(build(18, 3, topic))
        assert again.error_code == ErrorCode.none
