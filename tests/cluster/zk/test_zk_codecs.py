"""Znode paths and payload codecs: round trips (Hypothesis) and Kafka's formats."""

from __future__ import annotations

import json
import uuid

from hypothesis import given
from hypothesis import strategies as st

from dmq.cluster.metadata import BrokerInfo
from dmq.cluster.zk import codecs, paths

topic_names = st.from_regex(r"[a-zA-Z0-9._-]{1,60}", fullmatch=True)
broker_ids = st.integers(0, 2**31 - 1)
replica_lists = st.lists(broker_ids, min_size=1, max_size=5)
partition_maps = st.dictionaries(st.integers(0, 10_000), replica_lists, max_size=20)
configs = st.dictionaries(st.text(min_size=1, max_size=30), st.text(max_size=50), max_size=10)


@given(st.uuids())
def test_topic_ids_round_trip_through_kafkas_base64(u: uuid.UUID) -> None:
    text = codecs.topic_id_to_kafka(u.hex)
    assert "=" not in text and len(text) == 22
    assert codecs.topic_id_from_kafka(text) == u.hex


@given(broker_ids, st.text(min_size=1, max_size=40), st.integers(0, 65535),
       st.none() | st.text(max_size=10), st.integers(1, 10**6))
def test_broker_registration_round_trips(broker_id: int, host: str, port: int, rack: str | None,
                                         session_ms: int) -> None:
    data = codecs.encode_broker(BrokerInfo(broker_id, host, port, rack), 123, session_ms)
    assert codecs.decode_broker(broker_id, data) == BrokerInfo(broker_id, host, port, rack)
    assert codecs.broker_session_timeout_ms(data) == session_ms
    raw = json.loads(data)
    assert raw["version"] == 5 and raw["endpoints"] == [f"PLAINTEXT://{host}:{port}"]


def test_a_registration_with_several_listeners_round_trips_in_kafkas_format() -> None:
    endpoints = (("CLIENTS", "10.0.0.1", 9092, "SASL_SSL"), ("INTERNAL", "127.0.0.1", 9093, "SSL"))
    info = BrokerInfo(2, "127.0.0.1", 9093, "r1", endpoints)
    raw = json.loads(codecs.encode_broker(info, 1, 6000))
    assert raw["endpoints"] == ["CLIENTS://10.0.0.1:9092", "INTERNAL://127.0.0.1:9093"]
    assert raw["listener_security_protocol_map"] == {"CLIENTS": "SASL_SSL", "INTERNAL": "SSL"}
    decoded = codecs.decode_broker(2, codecs.encode_broker(info, 1, 6000))
    assert decoded == info
    assert decoded.endpoint("CLIENTS") == ("10.0.0.1", 9092)
    assert decoded.endpoint("OTHER") == ("127.0.0.1", 9093)  # unknown listener: inter-broker address


def test_a_kafka_registration_without_dmqs_field_has_no_session_timeout() -> None:
    kafka = b'{"version":5,"host":"h","port":9092,"endpoints":["PLAINTEXT://h:9092"],"jmx_port":-1}'
    assert codecs.decode_broker(3, kafka) == BrokerInfo(3, "h", 9092, None)
    assert codecs.broker_session_timeout_ms(kafka) == 0


@given(st.uuids(), partition_maps, partition_maps, partition_maps)
def test_assignment_round_trips(u: uuid.UUID, parts: dict[int, list[int]],
                                adding: dict[int, list[int]], removing: dict[int, list[int]]) -> None:
    a = codecs.Assignment(u.hex, parts, adding, removing)
    assert codecs.decode_assignment(codecs.encode_assignment(a)) == a
    assert json.loads(codecs.encode_assignment(a))["version"] == 3


@given(st.integers(0, 2**31 - 1), st.integers(-1, 2**31 - 1), st.integers(-1, 2**31 - 1),
       st.lists(broker_ids, max_size=5))
def test_partition_state_round_trips(epoch: int, leader: int, leader_epoch: int, isr: list[int]) -> None:
    s = codecs.LeaderAndIsr(epoch, leader, leader_epoch, isr)
    assert codecs.decode_state(codecs.encode_state(s)) == s


@given(configs)
def test_configs_round_trip(c: dict[str, str]) -> None:
    assert codecs.decode_config(codecs.encode_config(c)) == c


def test_absent_or_empty_payloads() -> None:
    assert codecs.decode_config(None) == {} and codecs.decode_config(b"") == {}
    assert codecs.decode_controller(None) == -1
    assert codecs.decode_admin(None) == []


@given(broker_ids, st.integers(0, 2**62), st.integers(1, 10**6))
def test_controller_cluster_id_and_producer_blocks_round_trip(broker_id: int, start: int,
                                                              count: int) -> None:
    assert codecs.decode_controller(codecs.encode_controller(broker_id, 1)) == broker_id
    assert codecs.decode_producer_id_block_end(
        codecs.encode_producer_id_block(broker_id, start, count)) == start + count - 1
    cid = codecs.topic_id_to_kafka(uuid.uuid4().hex)
    assert codecs.decode_cluster_id(codecs.encode_cluster_id(cid)) == cid


@given(st.lists(st.fixed_dictionaries({"topic": topic_names, "partition": st.integers(0, 1000)}),
                max_size=10))
def test_admin_requests_round_trip(entries: list[dict[str, object]]) -> None:
    assert codecs.decode_admin(codecs.encode_admin(entries)) == entries


@given(topic_names, st.integers(0, 10**6))
def test_partition_state_paths_parse_back(name: str, index: int) -> None:
    assert paths.parse_partition_state(paths.partition_state(name, index)) == (name, index)
    assert paths.parse_partition_state(paths.topic(name)) is None
    assert paths.parse_partition_state(paths.topic_config(name)) is None


def test_paths_are_kafkas() -> None:
    assert paths.partition_state("t", 3) == "/brokers/topics/t/partitions/3/state"
    assert paths.broker(2) == "/brokers/ids/2"
    assert paths.broker_config("<default>") == "/config/brokers/<default>"
    assert paths.controlled_shutdown(1) == "/admin/controlled_shutdown/1"
