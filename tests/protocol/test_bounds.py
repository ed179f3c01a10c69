"""dmq.protocol.bounds: counts checked before kio's native reader sees them.

kio 0.6.5 reserves an array's items from the count the bytes give; a count near 2^32
made the allocation fail and Rust abort the process. These check that every request
dmq takes walks to its exact end (no valid request is refused), that the C and Python
walks agree on any bytes, and that the frames that aborted the broker now get FrameError.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records
from support.huge_counts import HUGE, header, uvarint

from dmq.client.wire import encode_request_with_kio
from dmq.handlers import supported_apis
from dmq.protocol import bounds
from dmq.protocol.codec import FrameError, decode_request, request_class, response_class

st.register_type_strategy(Records, st.binary(max_size=40).map(Records))  # type: ignore[arg-type]

REQUESTS = sorted((key, version) for key, (low, high) in supported_apis().items()
                  for version in range(low, high + 1))
WALKS = [pytest.param(bounds.walk_plan_py, id="python"),
         pytest.param(bounds.walk_plan, id="c" if bounds.walk_plan is not bounds.walk_plan_py else "python-again")]


def frame_of(request: Any) -> bytes:
    return encode_request_with_kio(request, 7, "client")[4:]


def walk(walker: Any, cls: type[Any], frame: bytes) -> int:
    return int(walker(bounds.plan_of(cls), frame, walker(bounds.plan_of(cls.__header_schema__), frame, 0)))


@pytest.mark.parametrize("walker", WALKS)
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data(), which=st.sampled_from(REQUESTS))
def test_every_request_dmq_takes_walks_to_its_end(walker: Any, data: st.DataObject,
                                                  which: tuple[int, int]) -> None:
    cls = request_class(*which)
    request = data.draw(st.from_type(cls))
    try:
        frame = frame_of(request)
    except Exception:  # noqa: BLE001 - a value kio cannot write (out of a field's range)
        return
    assert walk(walker, cls, frame) == len(frame)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data(), which=st.sampled_from(REQUESTS))
def test_the_c_and_python_walks_agree_on_any_bytes(data: st.DataObject, which: tuple[int, int]) -> None:
    if bounds.walk_plan is bounds.walk_plan_py:
        pytest.skip("the C extension is not built")
    cls = request_class(*which)
    try:
        frame = bytearray(frame_of(data.draw(st.from_type(cls))))
    except Exception:  # noqa: BLE001
        return
    for at, value in data.draw(st.lists(st.tuples(st.integers(0, max(len(frame) - 1, 0)),
                                                  st.integers(0, 255)), max_size=4)):
        if frame:
            frame[at] = value
    cut = bytes(frame[:data.draw(st.integers(0, len(frame)))]) + data.draw(st.binary(max_size=6))

    def outcome(walker: Any) -> Any:
        try:
            return walk(walker, cls, cut)
        except ValueError as e:
            return str(e)

    assert outcome(bounds.walk_plan) == outcome(bounds.walk_plan_py)


@pytest.mark.parametrize("name", sorted(HUGE))
def test_a_huge_count_is_a_frame_error_not_an_abort(name: str) -> None:
    """In a child process: before the check, kio's reader aborted it (exit -6)."""
    api_key, version, frame = HUGE[name]
    code = ("import sys; from dmq.protocol.codec import decode_request, FrameError\n"
            f"try:\n    decode_request({frame!r}, {api_key}, {version})\n"
            "except FrameError as e:\n    print('FrameError:', e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.startswith("FrameError:"), done.stdout


@pytest.mark.parametrize("walker", WALKS)
def test_the_walks_name_what_runs_past_the_end(walker: Any) -> None:
    cls = request_class(0, 9)
    with pytest.raises(ValueError, match="counts 4294967294 items in 0 bytes"):
        walk(walker, cls, HUGE["produce-v9-topics"][2])
    with pytest.raises(ValueError, match="runs past five bytes"):
        walk(walker, cls, header(0, 9, True) + b"\x00" + struct.pack(">hi", 1, 1000) + b"\xff" * 6)
    with pytest.raises(ValueError, match="ends before its fields do"):
        walk(walker, cls, header(0, 9, True) + b"\x00" + struct.pack(">h", 1))
    with pytest.raises(FrameError):
        decode_request(HUGE["produce-v9-tagged"][2], 0, 9)


@pytest.mark.parametrize("walker", WALKS)
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data(), which=st.sampled_from(REQUESTS))  # each request version has its answer
def test_every_response_dmq_reads_walks_to_its_end(walker: Any, data: st.DataObject,
                                                   which: tuple[int, int]) -> None:
    """dmq.client.wire walks answers too before kio reads them (a broker or tool pointed at
    a server that answers with such a count was aborted the same way)."""
    cls = response_class(*which)
    try:
        body = entity_writer_bytes(cls, data.draw(st.from_type(cls)))
    except Exception:  # noqa: BLE001 - a value kio cannot write
        return
    assert walker(bounds.plan_of(cls), body, 0) == len(body)


def entity_writer_bytes(cls: type[Any], value: Any) -> bytes:
    import io

    from kio.serial import entity_writer

    buffer = io.BytesIO()
    entity_writer(cls)(buffer, value)
    return buffer.getvalue()


def test_an_answer_counting_billions_of_items_is_a_value_error() -> None:
    from kio.schema.metadata.v12.request import MetadataRequest

    from dmq.client.wire import decode_response

    answer = struct.pack(">i", 5) + b"\x00" + struct.pack(">i", 0) + uvarint(2**32 - 1)  # brokers
    with pytest.raises(ValueError, match="counts 4294967294 items"):
        decode_response(MetadataRequest, 5, answer)
