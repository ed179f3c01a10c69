"""DescribeTransactions v0 responses kio cannot decode: a start time of -1 (no transaction)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.serial.errors import OutOfBoundValue

from dmq.client.wire import decode_response
from dmq.protocol.codec import encode_response, make, request_class, response_module
from dmq.protocol.lenient import epoch_ms, read_describe_transactions_v0

MOD = response_module(65, 0)


def _state(start_ms: int, txn_id: str = "t", partitions: tuple[int, ...] = ()) -> Any:
    topics = (make(MOD.TopicData, topic="orders", partitions=partitions),) if partitions else ()
    return make(MOD.TransactionState, error_code=ErrorCode.none, transactional_id=txn_id,
                transaction_state="Ongoing" if topics else "Empty", transaction_timeout=timedelta(seconds=60),
                transaction_start_time=datetime.fromtimestamp(start_ms / 1000, UTC), producer_id=1000,
                producer_epoch=3, topics=topics)


def _body(response: Any) -> bytes:
    """The response body, after correlation id and the flexible header's tagged fields."""
    frame = encode_response(1, 65, response)
    assert isinstance(frame, bytes)
    return frame[9:]


def test_kio_alone_refuses_a_start_time_of_minus_one() -> None:
    response = make(MOD.DescribeTransactionsResponse, throttle_time=timedelta(0), transaction_states=(_state(-1),))
    with pytest.raises(OutOfBoundValue):
        entity_reader(MOD.DescribeTransactionsResponse)(_body(response), 0)


def test_reads_what_kio_reads_and_minus_one() -> None:
    response = make(MOD.DescribeTransactionsResponse, throttle_time=timedelta(milliseconds=5), transaction_states=(
        _state(1_700_000_000_123, "a", (0, 2)), _state(-1, "b"), _state(0, "c")))
    body = _body(response)
    got, size = read_describe_transactions_v0(body, 0)
    assert got == response and size == len(body)
    assert [epoch_ms(s.transaction_start_time) for s in got.transaction_states] == [1_700_000_000_123, -1, 0]
    known = make(MOD.DescribeTransactionsResponse, throttle_time=timedelta(0),
                 transaction_states=(_state(1_700_000_000_123, "a", (1,)),))
    assert read_describe_transactions_v0(_body(known), 0)[0] == entity_reader(MOD.DescribeTransactionsResponse)(
        _body(known), 0)[0]


def test_skips_tagged_fields_and_is_what_the_wire_client_uses() -> None:
    response = make(MOD.DescribeTransactionsResponse, throttle_time=timedelta(0), transaction_states=(_state(-1),))
    body = _body(response)
    assert body.endswith(b"\x00\x00")  # the state's tagged fields, then the response's
    # One unknown tagged field (tag 7, 2 bytes) in each section.
    tagged = body[:-2] + b"\x01\x07\x02ab" + b"\x01\x07\x02cd"
    got, size = read_describe_transactions_v0(tagged, 0)
    assert got == response and size == len(tagged)
    frame = b"\x00\x00\x00\x09\x00" + tagged  # correlation id 9, empty header tags
    assert decode_response(request_class(65, 0), 9, frame) == response
