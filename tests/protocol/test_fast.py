"""dmq.protocol.fast against kio: the same bytes written, the same requests read, the same errors."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from dmq.client.wire import encode_request, encode_request_with_kio
from dmq.protocol import fast
from dmq.protocol.codec import (
    FrameError,
    SpliceRecords,
    _check_nulls,
    decode_request,
    decode_request_with_kio,
    encode_response,
    encode_response_with_kio,
    make,
    request_class,
    request_module,
    response_module,
)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

i8 = st.integers(-(2**7), 2**7 - 1)
i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
millis = i32.map(lambda ms: timedelta(milliseconds=ms))
names = st.text(max_size=12)
error_codes = st.sampled_from(list(ErrorCode))


class Source:
    """A ByteSource over bytes in memory."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.length = len(data)

    def read(self) -> bytes:
        return self.data


def tuples(elements: st.SearchStrategy[Any], nulls: bool = False) -> st.SearchStrategy[Any]:
    arrays = st.lists(elements, max_size=3).map(tuple)
    return st.none() | arrays if nulls else arrays


# ------------------------------------------------------------------ responses


@st.composite
def produce_responses(draw: st.DrawFn, version: int) -> Any:
    m = response_module(0, version)
    appended = st.none() | st.integers(0, 2**42).map(lambda ms: datetime.fromtimestamp(ms / 1000, UTC))
    errors = tuples(st.builds(m.BatchIndexAndErrorMessage, batch_index=i32,
                              batch_index_error_message=st.none() | names)) if version >= 8 else st.just(())
    partition = st.builds(
        lambda **kw: make(m.PartitionProduceResponse, **kw), index=i32, error_code=error_codes,
        base_offset=i64, log_append_time=appended, log_start_offset=i64, record_errors=errors,
        error_message=st.none() | names)
    topic = st.builds(m.TopicProduceResponse, name=names, partition_responses=tuples(partition))
    return m.ProduceResponse(responses=draw(tuples(topic)), throttle_time=draw(millis))


def records(splice: bool = True) -> st.SearchStrategy[Any]:
    data = st.binary(max_size=40)
    out = st.none() | data
    return out | data.map(lambda b: SpliceRecords.of(Source(b))) if splice else out


@st.composite
def fetch_responses(draw: st.DrawFn, version: int, tags: bool = False) -> Any:
    m = response_module(1, version)
    tagged: dict[str, Any] = {}
    if version >= 12 and tags:
        # kio writes these when they differ from their defaults; fast leaves them to kio
        tagged = {
            "diverging_epoch": st.builds(m.EpochEndOffset, epoch=i32, end_offset=i64),
            "current_leader": st.builds(m.LeaderIdAndEpoch, leader_id=i32, leader_epoch=i32),
            "snapshot_id": st.builds(m.SnapshotId, end_offset=i64, epoch=i32),
        }
    partition = st.builds(
        lambda **kw: make(m.PartitionData, **kw), partition_index=i32, error_code=error_codes,
        high_watermark=i64, last_stable_offset=i64, log_start_offset=i64,
        aborted_transactions=tuples(st.builds(m.AbortedTransaction, producer_id=i64,
                                              first_offset=i64), nulls=True),
        preferred_read_replica=i32, records=records(), **tagged)
    topic = st.builds(m.FetchableTopicResponse, topic=names, partitions=tuples(partition))
    return make(m.FetchResponse, throttle_time=draw(millis), error_code=draw(error_codes),
                session_id=draw(i32), responses=draw(tuples(topic)))


def assert_same_frame(fast_frame: Any, kio_frame: Any) -> None:
    """Identical bytes, or identical parts: the same bytes between the same sources."""
    assert type(fast_frame) is type(kio_frame)
    if isinstance(kio_frame, list):
        assert len(fast_frame) == len(kio_frame)
        for a, b in zip(fast_frame, kio_frame, strict=True):
            if isinstance(b, bytes):
                assert type(a) is bytes and a == b
            else:
                assert a is b  # the same ByteSource
        frame = b"".join(p if isinstance(p, bytes) else p.read() for p in fast_frame)
    else:
        frame = fast_frame
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4


@SETTINGS
@given(version=st.integers(3, 9), data=st.data(), correlation_id=i32)
def test_produce_response_bytes_are_kios(version: int, data: st.DataObject, correlation_id: int) -> None:
    response = data.draw(produce_responses(version))
    expected = encode_response_with_kio(correlation_id, 0, response)
    assert_same_frame(fast.encode_produce_response(correlation_id, response), expected)
    assert_same_frame(encode_response(correlation_id, 0, response), expected)


@SETTINGS
@given(version=st.integers(4, 12), data=st.data(), correlation_id=i32)
def test_fetch_response_bytes_are_kios(version: int, data: st.DataObject, correlation_id: int) -> None:
    response = data.draw(fetch_responses(version))
    expected = encode_response_with_kio(correlation_id, 1, response)
    assert_same_frame(fast.encode_fetch_response(correlation_id, response), expected)
    assert_same_frame(encode_response(correlation_id, 1, response), expected)


@SETTINGS
@given(data=st.data(), correlation_id=i32)
def test_fetch_response_with_tagged_fields_is_kios(data: st.DataObject, correlation_id: int) -> None:
    response = data.draw(fetch_responses(12, tags=True))
    assert_same_frame(encode_response(correlation_id, 1, response),
                      encode_response_with_kio(correlation_id, 1, response))


def test_fetch_response_parts_keep_their_shape() -> None:
    """Records from two file ranges: bytes, source, bytes, source, bytes (as kio's writer)."""
    m = response_module(1, 12)
    a, b = Source(b"first"), Source(b"second")
    partitions = tuple(
        make(m.PartitionData, partition_index=i, error_code=ErrorCode.none, high_watermark=9,
             last_stable_offset=9, log_start_offset=0, aborted_transactions=None,
             records=SpliceRecords.of(src))
        for i, src in enumerate((a, b)))
    response = make(m.FetchResponse, throttle_time=timedelta(0), error_code=ErrorCode.none,
                    session_id=0, responses=(m.FetchableTopicResponse(topic="t", partitions=partitions),))
    parts = fast.encode_fetch_response(3, response)
    assert isinstance(parts, list) and [type(p) for p in parts] == [bytes, Source, bytes, Source, bytes]
    assert parts[1] is a and parts[3] is b
    assert_same_frame(parts, encode_response_with_kio(3, 1, response))


@pytest.mark.parametrize("bad", [
    {"index": 2**31},  # out of range for int32
    {"error_code": 3},  # a plain int: kio wants an ErrorCode
    {"base_offset": "7"},
])
def test_invalid_response_raises_kios_error(bad: dict[str, Any]) -> None:
    m = response_module(0, 9)
    values = {"index": 0, "error_code": ErrorCode.none, "base_offset": 0, "record_errors": ()}
    response = m.ProduceResponse(responses=(m.TopicProduceResponse(
        name="t", partition_responses=(m.PartitionProduceResponse(**{**values, **bad}),)),))
    with pytest.raises(Exception) as kio_error:
        encode_response_with_kio(1, 0, response)
    with pytest.raises(type(kio_error.value)):
        encode_response(1, 0, response)


# ------------------------------------------------------------------ requests


@st.composite
def fetch_requests(draw: st.DrawFn, version: int, nulls: bool = False, tags: bool = False) -> Any:
    m = request_module(1, version)
    partition = st.builds(
        lambda **kw: make(m.FetchPartition, **kw), partition=i32, current_leader_epoch=i32,
        fetch_offset=i64, last_fetched_epoch=i32, log_start_offset=i64, partition_max_bytes=i32)
    topic = st.builds(m.FetchTopic, topic=names, partitions=tuples(partition, nulls))
    forgotten = tuples(st.builds(lambda **kw: make(m.ForgottenTopic, **kw), topic=names,
                                 partitions=tuples(i32, nulls)), nulls) if version >= 7 else st.just(())
    return make(m.FetchRequest, cluster_id=draw(st.none() | names) if tags else None,
                replica_id=draw(i32), max_wait=draw(millis), min_bytes=draw(i32),
                max_bytes=draw(i32), isolation_level=draw(i8), session_id=draw(i32),
                session_epoch=draw(i32), topics=draw(tuples(topic, nulls)),
                forgotten_topics_data=draw(forgotten), rack_id=draw(names))


@st.composite
def produce_requests(draw: st.DrawFn, version: int, nulls: bool = False) -> Any:
    m = request_module(0, version)
    partition = st.builds(m.PartitionProduceData, index=i32, records=records(splice=False))
    topic = st.builds(m.TopicProduceData, name=names, partition_data=tuples(partition, nulls))
    return m.ProduceRequest(transactional_id=draw(st.none() | names), acks=draw(i16),
                            timeout=draw(millis), topic_data=draw(tuples(topic, nulls)))


client_ids = st.text(max_size=10)


@SETTINGS
@given(version=st.integers(4, 12), data=st.data(), correlation_id=i32, client_id=client_ids)
def test_fetch_request_bytes_are_kios(version: int, data: st.DataObject, correlation_id: int,
                                      client_id: str) -> None:
    request = data.draw(fetch_requests(version))
    expected = encode_request_with_kio(request, correlation_id, client_id)
    assert fast.encode_fetch_request(request, correlation_id, client_id) == expected
    assert encode_request(request, correlation_id, client_id) == expected


@SETTINGS
@given(data=st.data(), correlation_id=i32)
def test_fetch_request_with_cluster_id_is_kios(data: st.DataObject, correlation_id: int) -> None:
    request = data.draw(fetch_requests(12, tags=True))
    assert encode_request(request, correlation_id, "c") == encode_request_with_kio(request, correlation_id, "c")


follower_partitions = st.lists(st.tuples(i32, i32, i64, i64, i32), max_size=3)


@SETTINGS
@given(topics=st.lists(st.tuples(names, follower_partitions), max_size=3), correlation_id=i32,
       client_id=client_ids, replica_id=i32, max_wait=i32, min_bytes=i32, max_bytes=i32,
       session_id=i32, session_epoch=i32,
       forgotten=st.lists(st.tuples(names, st.lists(i32, max_size=3)), max_size=3))
def test_follower_fetch_bytes_are_kios(topics: list[Any], correlation_id: int, client_id: str,
                                       replica_id: int, max_wait: int, min_bytes: int,
                                       max_bytes: int, session_id: int, session_epoch: int,
                                       forgotten: list[tuple[str, list[int]]]) -> None:
    m = request_module(1, 12)
    request = m.FetchRequest(
        cluster_id=None, replica_id=replica_id, max_wait=timedelta(milliseconds=max_wait),
        min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0, session_id=session_id,
        session_epoch=session_epoch,
        forgotten_topics_data=tuple(m.ForgottenTopic(topic=t, partitions=tuple(ps))
                                    for t, ps in forgotten),
        rack_id="", topics=tuple(
            m.FetchTopic(topic=t, partitions=tuple(
                m.FetchPartition(partition=p, current_leader_epoch=e, fetch_offset=o,
                                 last_fetched_epoch=-1, log_start_offset=ls, partition_max_bytes=mb)
                for p, e, o, ls, mb in ps))
            for t, ps in topics))
    got = fast.encode_follower_fetch(correlation_id, client_id, replica_id, max_wait, min_bytes,
                                     max_bytes, topics, session_id, session_epoch, forgotten)
    assert got == encode_request_with_kio(request, correlation_id, client_id)


def outcome(decode: Any, frame: bytes, api_key: int, version: int) -> Any:
    try:
        result = decode(frame, api_key, version)
    except FrameError as e:
        return "FrameError", str(e)
    header, body = result
    return (header.api_key, header.api_version, header.correlation_id, header.client_id), body


def assert_decodes_as_kio(frame: bytes, api_key: int, version: int) -> Any:
    got = outcome(decode_request, frame, api_key, version)
    assert got == outcome(decode_request_with_kio, frame, api_key, version)
    return got


def request_frame(request: Any, correlation_id: int = 7, client_id: str = "c") -> bytes:
    return encode_request_with_kio(request, correlation_id, client_id)[4:]


@SETTINGS
@given(version=st.integers(3, 9), data=st.data(), correlation_id=i32, client_id=client_ids)
def test_produce_request_reads_as_kio(version: int, data: st.DataObject, correlation_id: int,
                                      client_id: str) -> None:
    request = data.draw(produce_requests(version))
    got = assert_decodes_as_kio(request_frame(request, correlation_id, client_id), 0, version)
    assert got == ((0, version, correlation_id, client_id), request)


@SETTINGS
@given(version=st.integers(4, 12), data=st.data(), correlation_id=i32, client_id=client_ids)
def test_fetch_request_reads_as_kio(version: int, data: st.DataObject, correlation_id: int,
                                    client_id: str) -> None:
    request = data.draw(fetch_requests(version, tags=True))
    got = assert_decodes_as_kio(request_frame(request, correlation_id, client_id), 1, version)
    assert got == ((1, version, correlation_id, client_id), request)


@SETTINGS
@given(api_key=st.sampled_from([0, 1]), data=st.data())
def test_null_arrays_are_frame_errors_as_with_kio(api_key: int, data: st.DataObject) -> None:
    """kio reads a null array as None even where the schema allows none; both checks refuse it."""
    if api_key == 0:
        version = data.draw(st.integers(3, 9))
        request = data.draw(produce_requests(version, nulls=True))
    else:
        version = data.draw(st.integers(4, 12))
        request = data.draw(fetch_requests(version, nulls=True))
    frame = request_frame(request)
    got = assert_decodes_as_kio(frame, api_key, version)
    cls = request_class(api_key, version)
    body = entity_reader(cls)(frame, entity_reader(cls.__header_schema__)(frame, 0)[1])[0]
    try:
        _check_nulls(body)
        clean = True
    except ValueError:
        clean = False
    assert fast.NULL_CHECKS[cls](body) == clean
    assert (got[0] == "FrameError") == (not clean)


@SETTINGS
@given(api_key=st.sampled_from([0, 1]), data=st.data())
def test_truncated_or_garbled_requests_fail_as_with_kio(api_key: int, data: st.DataObject) -> None:
    if api_key == 0:
        version = data.draw(st.integers(3, 9))
        request = data.draw(produce_requests(version))
    else:
        version = data.draw(st.integers(4, 12))
        request = data.draw(fetch_requests(version))
    frame = bytearray(request_frame(request))
    cut = data.draw(st.integers(0, len(frame)))
    changes = data.draw(st.lists(st.tuples(st.integers(0, len(frame) - 1), st.integers(0, 255)),
                                 max_size=4))
    for at, value in changes:
        frame[at] = value
    garbled = bytes(frame[:cut]) + data.draw(st.binary(max_size=8))
    assume(garbled)
    assert_decodes_as_kio(garbled, api_key, version)


def test_a_truncated_produce_request_is_a_frame_error() -> None:
    m = request_module(0, 9)
    request = m.ProduceRequest(acks=-1, timeout=timedelta(seconds=30), topic_data=(
        m.TopicProduceData(name="t", partition_data=(m.PartitionProduceData(index=0, records=b"x" * 50),)),))
    frame = request_frame(request)
    with pytest.raises(FrameError, match="cannot decode ProduceRequest v9"):
        decode_request(frame[:-10], 0, 9)
