"""AddPartitionsToTxn (24): add partitions to a producer's open transaction (client form, v0-3)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    txn_id = request.v3_and_below_transactional_id
    wanted = [(t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions]
    unknown = {tp for tp in wanted if services.metadata.topic(tp[0]) is None
               or tp[1] not in services.metadata.topic(tp[0]).partitions}  # type: ignore[union-attr]
    if unknown:
        # As Kafka: nothing is added; the unknown partitions say why, the others were not tried.
        errors = {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                  for tp in wanted}
    else:
        error = await services.transactions.add_partitions(
            txn_id, request.v3_and_below_producer_id, request.v3_and_below_producer_epoch, wanted)
        if error == ErrorCode.producer_fenced and ctx.api_version < 2:
            error = ErrorCode.invalid_producer_epoch  # KIP-588
        errors = {tp: error for tp in wanted}
    results = tuple(
        make(schema.AddPartitionsToTxnTopicResult, name=t.name, results_by_partition=tuple(
            make(schema.AddPartitionsToTxnPartitionResult, partition_index=p,
                 partition_error_code=errors[(t.name, int(p))])
            for p in t.partitions))
        for t in request.v3_and_below_topics)
    return make(schema.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE,
                results_by_topic_v3_and_below=results)
