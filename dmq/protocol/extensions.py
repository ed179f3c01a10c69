"""dmq's own wire APIs, in the shape of kio's generated entities so one codec serves both.

Kafka's API keys are small numbers; dmq's extensions take keys from 10000 up,
far from any Kafka API. They are not listed in ApiVersions (Kafka clients
never send them); only ``dmq.client`` does. docs/half-messages.md is the
specification.

CheckTransactions (key 10000), version 0, flexible (request header v2,
response header v1)::

    CheckTransactionsRequest
      producer_group   string   the producer group of the half messages
      describe_only    bool     true: list the group's transactions and their checks,
                                hand out nothing and do not count as a live checker
      answers          [CheckAnswer]
        transactional_id string
        producer_id      int64
        producer_epoch   int16
        resolution       int8   0 COMMIT, 1 ROLLBACK, 2 UNKNOWN

    CheckTransactionsResponse
      throttle_time_ms int32
      error_code       int16    NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...
      transactions     [CheckedTransaction]   due a check (or, describe_only, all)
        transactional_id string
        producer_id      int64
        producer_epoch   int16
        state            string  Kafka's transaction state name
        start_time_ms    int64
        checks           int32   checks made, this one included
        last_answer      int8    -1 none, else a resolution
        last_check_ms    int64
        topics           [CheckedTopic]
          name           string
          partitions     [int32]

DescribeDelayedRecords (key 10002), version 0, flexible: the delayed records
(docs/delayed-delivery.md) of partitions, answered by their leader::

    DescribeDelayedRecordsRequest
      topics           [DelayedTopicRequest]
        name           string
        partitions     [int32]

    DescribeDelayedRecordsResponse
      throttle_time_ms int32
      topics           [DelayedTopic]
        name           string
        partitions     [DelayedPartition]
          partition_index  int32
          error_code       int16   NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION
          pending          int64   records waiting for their time
          awaiting_commit  int64   records of open transactions, pending once committed
          next_deliver_ms  int64   epoch ms of the earliest pending one, -1: none
"""


# No ``from __future__ import annotations`` here: kio's codec reads the field types at runtime.
from dataclasses import dataclass, field
from enum import IntEnum
from types import ModuleType
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

CHECK_TRANSACTIONS_KEY = 10000
DESCRIBE_DELAYED_KEY = 10002


class Resolution(IntEnum):
    """A checker's answer about a half-message transaction (RocketMQ's LocalTransactionState)."""
    COMMIT = 0
    ROLLBACK = 1
    UNKNOWN = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckAnswer:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(CHECK_TRANSACTIONS_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    transactional_id: str = field(metadata={"kafka_type": "string"})
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    resolution: i8 = field(metadata={"kafka_type": "int8"})


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckTransactionsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(CHECK_TRANSACTIONS_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    producer_group: str = field(metadata={"kafka_type": "string"})
    describe_only: bool = field(metadata={"kafka_type": "bool"})
    answers: tuple[CheckAnswer, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckedTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(CHECK_TRANSACTIONS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckedTransaction:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(CHECK_TRANSACTIONS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    transactional_id: str = field(metadata={"kafka_type": "string"})
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    state: str = field(metadata={"kafka_type": "string"})
    start_time_ms: i64 = field(metadata={"kafka_type": "int64"})
    checks: i32 = field(metadata={"kafka_type": "int32"})
    last_answer: i8 = field(metadata={"kafka_type": "int8"})
    last_check_ms: i64 = field(metadata={"kafka_type": "int64"})
    topics: tuple[CheckedTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckTransactionsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(CHECK_TRANSACTIONS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    transactions: tuple[CheckedTransaction, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DelayedTopicRequest:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_DELAYED_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeDelayedRecordsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_DELAYED_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topics: tuple[DelayedTopicRequest, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DelayedPartition:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_DELAYED_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    pending: i64 = field(metadata={"kafka_type": "int64"})
    awaiting_commit: i64 = field(metadata={"kafka_type": "int64"})
    next_deliver_ms: i64 = field(metadata={"kafka_type": "int64"})


@dataclass(frozen=True, slots=True, kw_only=True)
class DelayedTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_DELAYED_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[DelayedPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeDelayedRecordsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_DELAYED_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    topics: tuple[DelayedTopic, ...]


def _module(name: str, *entities: type) -> ModuleType:
    module = ModuleType(name)
    for entity in entities:
        setattr(module, entity.__name__, entity)
    return module


# api key -> version -> (request module, response module), as kio's load_entity_module gives.
EXTENSIONS: dict[int, dict[int, tuple[ModuleType, ModuleType]]] = {
    CHECK_TRANSACTIONS_KEY: {0: (
        _module("check_transactions_v0_request", CheckTransactionsRequest, CheckAnswer),
        _module("check_transactions_v0_response", CheckTransactionsResponse, CheckedTransaction,
                CheckedTopic),
    )},
    DESCRIBE_DELAYED_KEY: {0: (
        _module("describe_delayed_records_v0_request", DescribeDelayedRecordsRequest,
                DelayedTopicRequest),
        _module("describe_delayed_records_v0_response", DescribeDelayedRecordsResponse,
                DelayedTopic, DelayedPartition),
    )},
}
