"""Bad input gets Kafka's error codes or a closed connection, and the broker keeps serving."""

from __future__ import annotations

import random
import socket
import struct
from datetime import timedelta

import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from support.batches import with_records
from support.broker import BrokerProcess
from support.huge_counts import HUGE
from test_durability import consume_values

from dmq.client.wire import WireClient
from dmq.handlers import supported_apis
from dmq.record.records import encode_batch


@pytest.fixture(scope="module")
def small_broker(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    base = tmp_path_factory.mktemp("bad")
    proc = BrokerProcess(base / "data", overrides={
        "socket.request.max.bytes": "200000", "message.max.bytes": "5000",
        "auto.create.topics.enable": "true"}).start()
    yield proc
    proc.close()


def client(b: BrokerProcess) -> WireClient:
    return WireClient("127.0.0.1", b.port)


def produce_req(topic: str, records: bytes | None, acks: int = -1) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=acks, timeout=timedelta(seconds=5),  # type: ignore[arg-type]
                          topic_data=(TopicProduceData(name=topic, partition_data=(  # type: ignore[arg-type]
                              PartitionProduceData(index=0, records=records),),),))  # type: ignore[arg-type]


def ensure_topic(c: WireClient, name: str) -> None:
    c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=name),),  # type: ignore[arg-type]
                              allow_auto_topic_creation=True, include_topic_authorized_operations=False))


def assert_closed(c: WireClient) -> None:
    c.sock.settimeout(5)
    with pytest.raises((ConnectionError, OSError)):
        c.recv_frame()


def test_api_versions_lists_exactly_the_registry(small_broker: BrokerProcess) -> None:
    with client(small_broker) as c:
        resp = c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert resp.error_code == ErrorCode.none
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got == supported_apis()


def test_unsupported_api_versions_version_gets_v0_answer(small_broker: BrokerProcess) -> None:
    with client(small_broker) as c:
        body = struct.pack(">hhih", 18, 99, 7, -1)
        c.send_raw(struct.pack(">i", len(body)) + body)
        frame = c.recv_frame()
    corr, error = struct.unpack_from(">ih", frame, 0)
    assert (corr, error) == (7, ErrorCode.unsupported_version)


@pytest.mark.parametrize("frame", [
    struct.pack(">hhih", 9999, 0, 1, -1),                # unknown API key
    struct.pack(">hhih", 3, 99, 1, -1),                  # unsupported Metadata version
    struct.pack(">hhih", 3, 1, 1, -1) + b"\xff\xff",     # truncated Metadata body
    b"\x00",                                             # shorter than a header
], ids=["unknown-api", "bad-version", "truncated-body", "tiny"])
def test_malformed_frames_close_the_connection(small_broker: BrokerProcess, frame: bytes) -> None:
    with client(small_broker) as c:
        c.send_raw(struct.pack(">i", len(frame)) + frame)
        assert_closed(c)


def test_a_request_counting_billions_of_items_closes_the_connection_only(small_broker: BrokerProcess) -> None:
    """A 27-byte Produce v9 whose topic count is 2^32-2 (and the like for Fetch, Metadata and
    the legacy versions): kio's native reader reserved room for them all, the allocation
    failed and Rust aborted the broker, before any authentication."""
    for name, (_api_key, _version, frame) in sorted(HUGE.items()):
        with client(small_broker) as c:
            c.send_raw(struct.pack(">i", len(frame)) + frame)
            assert_closed(c)
        assert small_broker.alive(), f"the broker died of {name}"
    with client(small_broker) as c:
        assert c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1")).error_code == 0


def test_oversize_and_negative_request_sizes_close(small_broker: BrokerProcess) -> None:
    for size in (200_001, 2**31 - 1, -5):
        with client(small_broker) as c:
            c.send_raw(struct.pack(">i", size) + b"\x00" * 64)
            assert_closed(c)
    assert "socket.request.max.bytes" in small_broker.log_text()


def test_record_errors(small_broker: BrokerProcess) -> None:
    with client(small_broker) as c:
        ensure_topic(c, "bad-records")
        big = encode_batch([(None, b"x" * 6000, [])])
        resp = c.request(produce_req("bad-records", big))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.message_too_large
        corrupt = bytearray(encode_batch([(None, b"hello", [])]))
        corrupt[-1] ^= 0xFF
        resp = c.request(produce_req("bad-records", bytes(corrupt)))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message
        truncated = encode_batch([(None, b"hello", [])])[:-3]
        resp = c.request(produce_req("bad-records", truncated))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message
        old_magic = bytearray(encode_batch([(None, b"hello", [])]))
        old_magic[16] = 1
        resp = c.request(produce_req("bad-records", bytes(old_magic)))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.invalid_record
        resp = c.request(produce_req("no-such-topic", encode_batch([(None, b"x", [])])))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
        resp = c.request(produce_req("bad-records", encode_batch([(None, b"x", [])]), acks=5))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.invalid_required_acks
        # Nothing was appended by any of the above.
        ok = c.request(produce_req("bad-records", encode_batch([(None, b"fine", [])])))
        assert ok.responses[0].partition_responses[0].base_offset == 0


@pytest.mark.parametrize("body", [b"\xff" * 30, b"\x02\x00", b"\x80" * 12, b"", b"\x0c\x00\x00\x00\x01\x10ab"],
                         ids=["long-varint", "short", "unterminated", "empty", "value-past-record"])
def test_records_that_do_not_parse_are_refused_and_consumers_read_on(small_broker: BrokerProcess,
                                                                     body: bytes) -> None:
    """A batch with a right CRC whose records do not parse is INVALID_RECORD, as Kafka
    answers, and is not appended: accepted, it stopped every consumer of the partition
    at it (librdkafka cannot read it, nor anything after it)."""
    topic = "unparsable-" + body.hex()[:8]
    with client(small_broker) as c:
        ensure_topic(c, topic)
        resp = c.request(produce_req(topic, with_records(body)))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.invalid_record
        ok = c.request(produce_req(topic, encode_batch([(None, b"fine", [])])))
        assert ok.responses[0].partition_responses[0].base_offset == 0
    assert consume_values(f"127.0.0.1:{small_broker.port}", topic, 1, timeout=20) == {0: [b"fine"]}


@pytest.mark.parametrize(("codec", "error"), [(1, ErrorCode.invalid_record), (2, ErrorCode.invalid_record),
                                           (3, ErrorCode.invalid_record), (4, ErrorCode.invalid_record),
                                           (5, ErrorCode.unsupported_compression_type)],
                         ids=["gzip", "snappy", "lz4", "zstd", "codec-5"])
def test_compressed_data_that_does_not_decompress_is_refused(small_broker: BrokerProcess, codec: int,
                                                             error: ErrorCode) -> None:
    """A compressed batch whose data does not decompress gets a Kafka error and the
    connection serves on (it used to close it, with a traceback in the broker's log)."""
    topic = f"undecompressable-{codec}"
    with client(small_broker) as c:
        ensure_topic(c, topic)
        resp = c.request(produce_req(topic, with_records(b"not compressed at all", codec)))
        assert resp.responses[0].partition_responses[0].error_code == error
        ok = c.request(produce_req(topic, encode_batch([(None, b"fine", [])], codec=codec % 5)))
        assert ok.responses[0].partition_responses[0].base_offset == 0


def test_metadata_and_fetch_errors(small_broker: BrokerProcess) -> None:
    with client(small_broker) as c:
        resp = c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="bad/name"),),  # type: ignore[arg-type]
                                         allow_auto_topic_creation=True,
                                         include_topic_authorized_operations=False))
        assert resp.topics[0].error_code == ErrorCode.invalid_topic_exception
        resp = c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="absent"),),  # type: ignore[arg-type]
                                         allow_auto_topic_creation=False,
                                         include_topic_authorized_operations=False))
        assert resp.topics[0].error_code == ErrorCode.unknown_topic_or_partition
        fetch = FetchRequest(max_wait=timedelta(milliseconds=10), min_bytes=1, topics=(  # type: ignore[arg-type]
            FetchTopic(topic="absent", partitions=(FetchPartition(partition=0, fetch_offset=0,  # type: ignore[arg-type]
                                                                  partition_max_bytes=1000),)),),
            forgotten_topics_data=())
        resp = c.request(fetch)
        assert resp.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def _mutations(seed_frames: list[bytes]) -> st.SearchStrategy[bytes]:
    def mutate(data: tuple[int, int, list[tuple[int, int]]]) -> bytes:
        idx, cut, flips = data
        frame = bytearray(seed_frames[idx % len(seed_frames)])
        for pos, val in flips:
            if frame:
                frame[pos % len(frame)] = val
        return bytes(frame[: max(4, len(frame) - cut % 16)])

    return st.tuples(st.integers(0, 100), st.integers(0, 40),
                     st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6)).map(mutate)


def test_fuzz_listener_then_clients_still_work(small_broker: BrokerProcess) -> None:
    """Garbage and mutated requests on many connections; then a real client works and data is intact."""
    p = Producer({"bootstrap.servers": small_broker.bootstrap, "acks": "all"})
    for i in range(200):
        p.produce("fuzz-precious", b"keep-%d" % i)
    assert p.flush(20) == 0

    seeds = []
    w = WireClient("127.0.0.1", small_broker.port)
    for req in (
        ApiVersionsRequest(client_software_name="f", client_software_version="1"),
        MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False),  # type: ignore[arg-type]
        produce_req("fuzz-target", encode_batch([(b"k", b"v", [("h", b"1")])])),
    ):
        seeds.append(w.encode(req)[1][4:])
    w.close()

    frames = st.one_of(st.binary(min_size=0, max_size=300), _mutations(seeds))

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(frames, st.booleans())
    def send(frame: bytes, raw_size: bool) -> None:
        s = socket.create_connection(("127.0.0.1", small_broker.port), timeout=2)
        try:
            prefix = struct.pack(">i", random.choice([len(frame), len(frame) + 7, 2**31 - 1])
                                 if raw_size else len(frame))
            s.sendall(prefix + frame)
            s.settimeout(0.05)
            try:
                s.recv(65536)
            except (TimeoutError, OSError):
                pass
        finally:
            s.close()

    send()
    assert small_broker.alive(), "the broker died under fuzzing"
    p = Producer({"bootstrap.servers": small_broker.bootstrap, "acks": "all"})
    p.produce("fuzz-precious", b"after-fuzz")
    assert p.flush(20) == 0
    values = consume_values(small_broker.bootstrap, "fuzz-precious", 1)[0]
    assert values == [b"keep-%d" % i for i in range(200)] + [b"after-fuzz"]
    # Every bad frame got an error code or a one-line close, never a handler crash.
    assert "Traceback" not in small_broker.log_text()


def test_failed_acks_zero_produce_closes_the_connection(small_broker: BrokerProcess) -> None:
    with client(small_broker) as c:
        ensure_topic(c, "acks0")
        c.request(produce_req("acks0", encode_batch([(None, b"ok", [])]), acks=0), expect_response=False)
        # A successful acks=0 produce gets no response and keeps the connection open.
        resp = c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert resp.error_code == ErrorCode.none
        c.request(produce_req("acks0", encode_batch([(None, b"x" * 6000, [])]), acks=0), expect_response=False)
        assert_closed(c)
    assert "acks=0 produce failed with message_too_large" in small_broker.log_text()


@pytest.mark.parametrize(("name", "version"), [
    ("", "1"), ("t", ""), ("-t", "1"), ("t-", "1"), ("my_client", "1"), ("t", "1 0"), ("t", "1.0+x"),
])
def test_api_versions_v3_with_an_invalid_client_software_name_or_version_is_invalid_request(
        small_broker: BrokerProcess, name: str, version: str) -> None:
    """Kafka's ApiVersionsRequest.isValid: both match [a-zA-Z0-9](?:[a-zA-Z0-9-.]*[a-zA-Z0-9])?;
    otherwise INVALID_REQUEST and no API keys. Any name was taken."""
    with client(small_broker) as c:
        resp = c.request(ApiVersionsRequest(client_software_name=name, client_software_version=version))
        assert resp.error_code == ErrorCode.invalid_request and not resp.api_keys
        ok = c.request(ApiVersionsRequest(client_software_name="confluent-kafka-python",
                                          client_software_version="2.3.0-rdkafka-2.3.0"))
    assert ok.error_code == ErrorCode.none and ok.api_keys
