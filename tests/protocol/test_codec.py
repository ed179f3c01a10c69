from __future__ import annotations

import struct
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.response import MetadataResponse

from dmq.protocol.codec import (
    FrameError,
    constructor,
    decode_request,
    encode_response,
    make,
    peek_header,
    response_module,
)


def test_api_versions_response_has_no_tagged_header() -> None:
    resp = ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(ApiVersion(api_key=18, min_version=0, max_version=3),),  # type: ignore[arg-type]
                               throttle_time=timedelta(0))  # type: ignore[arg-type]
    frame = encode_response(42, 18, resp)
    size, corr = struct.unpack_from(">ii", frame)
    assert size == len(frame) - 4 and corr == 42
    # header v0: the error code follows the correlation id directly
    assert struct.unpack_from(">h", frame, 8)[0] == 0
    # optional tagged fields holding defaults are left out: body ends with one 0 (no tags)
    assert frame.endswith(b"\x00\x00\x00\x00\x00")


def test_flexible_response_has_tagged_header() -> None:
    resp = MetadataResponse(throttle_time=timedelta(0), brokers=(), cluster_id="c", controller_id=0, topics=())  # type: ignore[arg-type]
    frame = encode_response(7, 3, resp)
    assert frame[8] == 0  # empty tagged fields of response header v1


def test_make_drops_fields_a_version_lacks() -> None:
    from kio.schema.metadata.v1.response import MetadataResponseTopic

    t = make(MetadataResponseTopic, error_code=ErrorCode.none, name="x", topic_id=None,
             is_internal=False, partitions=())
    assert t.name == "x"


def test_decode_request_round_trip() -> None:
    from kio.schema.metadata.v12.request import MetadataRequest

    from dmq.client.wire import WireClient

    w = WireClient.__new__(WireClient)
    w.correlation_id = 0
    w.client_id = "c"
    _, frame = w.encode(MetadataRequest(topics=None, allow_auto_topic_creation=True,  # type: ignore[arg-type]
                                        include_topic_authorized_operations=False))
    body = frame[4:]
    assert peek_header(body) == (3, 12, 1)
    header, req = decode_request(body, 3, 12)
    assert header.client_id == "c" and req.topics is None


@settings(max_examples=200, deadline=None)
@given(version=st.integers(4, 12), index=st.integers(-(2**31), 2**31 - 1),
       hw=st.integers(-1, 2**62), start=st.integers(-1, 2**62), records=st.binary(max_size=8),
       extra=st.booleans())
def test_constructor_builds_what_make_builds(version: int, index: int, hw: int, start: int,
                                             records: bytes, extra: bool) -> None:
    """``constructor`` (the hot handlers' builder) drops the fields a version lacks, as make."""
    cls = response_module(1, version).PartitionData
    names = ("partition_index", "error_code", "high_watermark", "last_stable_offset",
             "log_start_offset", "aborted_transactions", "preferred_read_replica", "records")
    values = (index, ErrorCode.none, hw, hw, start, None, -1, records)
    if extra:  # a name no version has is dropped too
        names, values = (*names, "no_such_field"), (*values, 1)
    built = constructor(cls, *names)(*values)
    assert built == make(cls, **dict(zip(names, values, strict=True)))
    assert constructor(cls, *names) is constructor(cls, *names)  # generated once


def test_a_request_header_with_unknown_tagged_fields_is_read_with_them_skipped() -> None:
    """Kafka's RequestHeaderData keeps tagged fields it does not know aside; kio refused
    them, so such a request (a newer client's header) closed the connection."""
    head = struct.pack(">hhih", 18, 3, 7, 3) + b"cli"
    body = b"\x02a\x02b\x00"  # ApiVersions v3: "a", "b", no tagged fields
    for tags in (b"\x01\x05\x03abc", b"\x02\x06\x00\x05\x01z", b"\x01\x00\x00"):
        header, request = decode_request(head + tags + body, 18, 3)
        assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (18, 3, 7, "cli")
        assert (request.client_software_name, request.client_software_version) == ("a", "b")
    for broken in (b"\x01\x05\x09abc", b"\x02\x05\x00", b"\x01\x85\x85\x85\x85\x85\x85"):
        with pytest.raises(FrameError):
            decode_request(head + broken, 18, 3)


def test_a_client_id_length_below_minus_one_is_read_as_null() -> None:
    """Kafka's RequestHeaderData reads any negative client_id length as null; kio refused
    it ('Found negative byte length') and the connection was closed."""
    for n in (-2, -5, -32768):
        header, _ = decode_request(struct.pack(">hhih", 3, 1, 1, n) + struct.pack(">i", -1), 3, 1)
        assert header.client_id is None and header.correlation_id == 1
