"""dmq's own wire APIs, in the shape of kio's generated entities so one codec serves both.

Kafka's API keys are small numbers; dmq's extensions take keys from 10000 up,
far from any Kafka API. They are not listed in ApiVersions (Kafka clients
never send them); only ``dmq.client`` and the CLI do. docs/half-messages.md,
docs/message-query.md and docs/delayed-delivery.md are their specifications.

CheckTransactions (key 10000), versions 0-1, flexible (request header v2,
response header v1)::

    CheckTransactionsRequest
      producer_group   string   the producer group of the half messages
      describe_only    bool     true: list the group's transactions and their checks,
                                hand out nothing and do not count as a live checker
      answers          [CheckAnswer]
        transactional_id string
        producer_id      int64
        producer_epoch   int16
        start_time_ms    int64  v1+: the start_time_ms of the transaction handed out,
                                which names it among the producer's transactions
        resolution       int8   0 COMMIT, 1 ROLLBACK, 2 UNKNOWN

    (The response is the same in both versions.)

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

QueryRecords (key 10001), version 0, flexible: message query (docs/message-query.md),
answered by each partition's leader::

    QueryRecordsRequest
      isolation_level  int8     0 read_uncommitted (aborted records returned, marked),
                                1 read_committed (below the last stable offset, no aborted records)
      key              bytes    nullable; null: every record of the window, oldest first;
                                else the records with this key, newest first
      start_timestamp  int64    records with timestamp >= this (-1: no bound)
      end_timestamp    int64    records with timestamp < this (-1: no bound)
      max_records      int32    per partition (the broker takes at most 10000)
      max_bytes        int32    per partition, about (at least one record is returned)
      topics           [QueryTopic]
        name           string
        partitions     [QueryPartition]
          partition_index int32
          start_offset    int64   window start (-1: the log start offset)
          end_offset      int64   window end, exclusive (-1: the high watermark,
                                  or the last stable offset for read_committed)

    QueryRecordsResponse
      throttle_time_ms int32
      error_code       int16    INVALID_REQUEST for a malformed query (then no topics)
      error_message    string   nullable
      topics           [QueryTopicResult]
        name           string
        partitions     [QueryPartitionResult]
          partition_index  int32
          error_code       int16   UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
                                   OFFSET_OUT_OF_RANGE (a scan's start_offset outside the log)
          error_message    string  nullable
          log_start_offset int64
          high_watermark   int64
          resume_offset    int64   -1: the window was searched whole; else ask again with
                                   end_offset (key) or start_offset (scan) set to it
          unindexed_bytes  int64   log bytes a key query scanned for want of a key index
          records          [QueriedRecord]
            offset         int64
            timestamp      int64
            key            bytes   nullable
            value          bytes   nullable
            headers        [QueriedHeader]
              key          string
              value        bytes   nullable
            aborted        bool    in a transaction that was aborted

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

DescribeSharePartitions (key 10003), version 0, flexible: a share group's share-partitions
as their leader holds them in memory (what ``dmq groups describe`` shows beside the
start offsets and lag of DescribeShareGroupOffsets; Kafka has no API for it)::

    DescribeSharePartitionsRequest
      group_id         string
      topics           [SharePartitionsTopic]
        topic_id       uuid
        partitions     [int32]

    DescribeSharePartitionsResponse
      throttle_time_ms int32
      error_code       int16
      topics           [DescribedShareTopic]
        topic_id       uuid
        partitions     [DescribedSharePartition]
          partition_index   int32
          error_code        int16   NOT_LEADER_OR_FOLLOWER where this broker does not lead it
          loaded            bool    false: nobody fetched it since this broker took it over
          start_offset      int64   the share-partition start offset (-1 when not loaded)
          end_offset        int64   the last offset in flight (SPEO; -1 when not loaded)
          in_flight         int32   records from the start offset to the end offset
          acquired          int32   records acquired by members now
          archiving         int32   records waiting for their dead letters
          delivery_complete int32   records done at or past the start offset

DescribeBrokerRuntime (key 10004), version 0, flexible: what a broker knows of itself that
Kafka's APIs do not carry (the web console's cluster page, docs/console.md)::

    DescribeBrokerRuntimeRequest          (no fields)

    DescribeBrokerRuntimeResponse
      throttle_time_ms  int32
      error_code        int16
      broker_id         int32
      start_time_ms     int64    epoch ms the broker started
      metadata_mode     string   "embedded" (one broker) or "zookeeper" (a cluster)
      zookeeper_connect string   nullable: zookeeper.connect in a cluster
      zookeeper_state   string   nullable: "CONNECTED", "SUSPENDED" (no server reachable,
                                 the session may still be alive) or "LOST"
      zookeeper_session int64    the session id (0: none)
      version           string   dmq's version
"""


# No ``from __future__ import annotations`` here: kio's codec reads the field types at runtime.
import uuid
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
QUERY_RECORDS_KEY = 10001
DESCRIBE_DELAYED_KEY = 10002
DESCRIBE_SHARE_PARTITIONS_KEY = 10003
DESCRIBE_BROKER_RUNTIME_KEY = 10004


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
class CheckAnswerV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(CHECK_TRANSACTIONS_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    transactional_id: str = field(metadata={"kafka_type": "string"})
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    start_time_ms: i64 = field(metadata={"kafka_type": "int64"})
    resolution: i8 = field(metadata={"kafka_type": "int8"})


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckTransactionsRequestV1:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(CHECK_TRANSACTIONS_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    producer_group: str = field(metadata={"kafka_type": "string"})
    describe_only: bool = field(metadata={"kafka_type": "bool"})
    answers: tuple[CheckAnswerV1, ...]


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


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryPartition:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUERY_RECORDS_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    start_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    end_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUERY_RECORDS_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[QueryPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryRecordsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUERY_RECORDS_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    isolation_level: i8 = field(metadata={"kafka_type": "int8"}, default=i8(1))
    key: bytes | None = field(metadata={"kafka_type": "bytes"}, default=None)
    start_timestamp: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    end_timestamp: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    max_records: i32 = field(metadata={"kafka_type": "int32"})
    max_bytes: i32 = field(metadata={"kafka_type": "int32"})
    topics: tuple[QueryTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueriedHeader:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUERY_RECORDS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    key: str = field(metadata={"kafka_type": "string"})
    value: bytes | None = field(metadata={"kafka_type": "bytes"})


@dataclass(frozen=True, slots=True, kw_only=True)
class QueriedRecord:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUERY_RECORDS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    offset: i64 = field(metadata={"kafka_type": "int64"})
    timestamp: i64 = field(metadata={"kafka_type": "int64"})
    key: bytes | None = field(metadata={"kafka_type": "bytes"})
    value: bytes | None = field(metadata={"kafka_type": "bytes"})
    headers: tuple[QueriedHeader, ...]
    aborted: bool = field(metadata={"kafka_type": "bool"})


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryPartitionResult:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUERY_RECORDS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    log_start_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    high_watermark: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    resume_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    unindexed_bytes: i64 = field(metadata={"kafka_type": "int64"}, default=i64(0))
    records: tuple[QueriedRecord, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryTopicResult:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUERY_RECORDS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[QueryPartitionResult, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryRecordsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUERY_RECORDS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    topics: tuple[QueryTopicResult, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SharePartitionsTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_SHARE_PARTITIONS_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_id: uuid.UUID = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeSharePartitionsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_SHARE_PARTITIONS_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_id: str = field(metadata={"kafka_type": "string"})
    topics: tuple[SharePartitionsTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedSharePartition:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_SHARE_PARTITIONS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    loaded: bool = field(metadata={"kafka_type": "bool"})
    start_offset: i64 = field(metadata={"kafka_type": "int64"})
    end_offset: i64 = field(metadata={"kafka_type": "int64"})
    in_flight: i32 = field(metadata={"kafka_type": "int32"})
    acquired: i32 = field(metadata={"kafka_type": "int32"})
    archiving: i32 = field(metadata={"kafka_type": "int32"})
    delivery_complete: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedShareTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_SHARE_PARTITIONS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_id: uuid.UUID = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[DescribedSharePartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeSharePartitionsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_SHARE_PARTITIONS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    topics: tuple[DescribedShareTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeBrokerRuntimeRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_BROKER_RUNTIME_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeBrokerRuntimeResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_BROKER_RUNTIME_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    broker_id: i32 = field(metadata={"kafka_type": "int32"})
    start_time_ms: i64 = field(metadata={"kafka_type": "int64"})
    metadata_mode: str = field(metadata={"kafka_type": "string"})
    zookeeper_connect: str | None = field(metadata={"kafka_type": "string"}, default=None)
    zookeeper_state: str | None = field(metadata={"kafka_type": "string"}, default=None)
    zookeeper_session: i64 = field(metadata={"kafka_type": "int64"}, default=i64(0))
    version: str = field(metadata={"kafka_type": "string"})


def _module(name: str, *entities: type) -> ModuleType:
    module = ModuleType(name)
    for entity in entities:
        setattr(module, entity.__name__, entity)
    return module


# api key -> version -> (request module, response module), as kio's load_entity_module gives.
EXTENSIONS: dict[int, dict[int, tuple[ModuleType, ModuleType]]] = {
    CHECK_TRANSACTIONS_KEY: {
        0: (
            _module("check_transactions_v0_request", CheckTransactionsRequest, CheckAnswer),
            _module("check_transactions_v0_response", CheckTransactionsResponse, CheckedTransaction,
                    CheckedTopic),
        ),
        # v1: each answer names the transaction's start time; the response is unchanged.
        1: (
            _module("check_transactions_v1_request", CheckTransactionsRequestV1, CheckAnswerV1),
            _module("check_transactions_v1_response", CheckTransactionsResponse, CheckedTransaction,
                    CheckedTopic),
        ),
    },
    DESCRIBE_DELAYED_KEY: {0: (
        _module("describe_delayed_records_v0_request", DescribeDelayedRecordsRequest,
                DelayedTopicRequest),
        _module("describe_delayed_records_v0_response", DescribeDelayedRecordsResponse,
                DelayedTopic, DelayedPartition),
    )},
    QUERY_RECORDS_KEY: {0: (
        _module("query_records_v0_request", QueryRecordsRequest, QueryTopic, QueryPartition),
        _module("query_records_v0_response", QueryRecordsResponse, QueryTopicResult,
                QueryPartitionResult, QueriedRecord, QueriedHeader),
    )},
    DESCRIBE_SHARE_PARTITIONS_KEY: {0: (
        _module("describe_share_partitions_v0_request", DescribeSharePartitionsRequest, SharePartitionsTopic),
        _module("describe_share_partitions_v0_response", DescribeSharePartitionsResponse, DescribedShareTopic,
                DescribedSharePartition),
    )},
    DESCRIBE_BROKER_RUNTIME_KEY: {0: (
        _module("describe_broker_runtime_v0_request", DescribeBrokerRuntimeRequest),
        _module("describe_broker_runtime_v0_response", DescribeBrokerRuntimeResponse),
    )},
}
