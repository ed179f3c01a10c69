"""Readers for responses kio refuses to decode.

DescribeTransactions v0: a transactional id with no transaction in progress
(Empty, CompleteCommit, ...) has ``transaction_start_time_ms`` -1, as Kafka
sends it, and kio's datetime reader raises "Cannot parse negative timestamp".
``read_describe_transactions_v0`` reads the same bytes into kio's own entities,
with -1 as the instant one millisecond before the epoch (what dmq's handler
encodes; ``epoch_ms`` turns it back into -1).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kio.serial import entity_reader
from kio.serial.readers import (
    compact_array_reader,
    read_compact_string,
    read_error_code,
    read_int16,
    read_int64,
    read_timedelta_i32,
    read_unsigned_varint,
)

from dmq.protocol.codec import response_module


def epoch_ms(instant: datetime) -> int:
    """Milliseconds since the epoch of a kio datetime (-1 for "none", as on the wire)."""
    return round(instant.timestamp() * 1000)


def _skip_tagged_fields(data: bytes, offset: int) -> int:
    start = offset
    count, n = read_unsigned_varint(data, offset)
    offset += n
    for _ in range(count):
        _, n = read_unsigned_varint(data, offset)  # tag
        offset += n
        size, n = read_unsigned_varint(data, offset)
        offset += n + size
    return offset - start


def read_describe_transactions_v0(data: bytes, offset: int) -> tuple[Any, int]:
    """(DescribeTransactionsResponse, bytes read) from a v0 response body at ``offset``."""
    mod = response_module(65, 0)
    read_topics = compact_array_reader(entity_reader(mod.TopicData))
    start = offset
    throttle, n = read_timedelta_i32(data, offset)
    offset += n
    count, n = read_unsigned_varint(data, offset)  # compact array: length + 1
    offset += n
    states = []
    for _ in range(max(count - 1, 0)):
        values: dict[str, Any] = {}
        fields: tuple[tuple[str, Callable[[bytes, int], tuple[Any, int]]], ...] = (
            ("error_code", read_error_code), ("transactional_id", read_compact_string),
            ("transaction_state", read_compact_string), ("transaction_timeout", read_timedelta_i32),
            ("transaction_start_time", read_int64), ("producer_id", read_int64),
            ("producer_epoch", read_int16), ("topics", read_topics))
        for name, read in fields:
            values[name], n = read(data, offset)
            offset += n
        offset += _skip_tagged_fields(data, offset)
        values["transaction_start_time"] = datetime.fromtimestamp(values["transaction_start_time"] / 1000, UTC)
        states.append(mod.TransactionState(**values))
    offset += _skip_tagged_fields(data, offset)
    return mod.DescribeTransactionsResponse(throttle_time=throttle, transaction_states=tuple(states)), offset - start


# (api key, version) -> reader used instead of kio's
READERS: dict[tuple[int, int], Callable[[bytes, int], tuple[Any, int]]] = {
    (65, 0): read_describe_transactions_v0,
}
