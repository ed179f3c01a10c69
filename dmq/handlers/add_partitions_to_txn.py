"""AddPartitionsToTxn (24): add partitions to a producer's open transaction.

v0-3 is the client form (one transaction). v4-5 is the batched form brokers send
(KIP-890): several transactions, each either added or, with ``verify_only``, only
checked (a partition not in the transaction is TRANSACTION_ABORTABLE, as Kafka's
handleVerifyPartitionsInTransaction answers).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.cluster.metadata import INTERNAL_TOPICS
from dmq.handlers.authorize import AclOperation, ResourceType, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5

Partitions = list[tuple[str, int]]


def _unknown(services: BrokerServices, wanted: Partitions) -> set[tuple[str, int]]:
    out = set()
    for topic, index in wanted:
        meta = services.metadata.topic(topic)
        if meta is None or index not in meta.partitions:
            out.add((topic, index))
    return out


def _client_refusals(services: BrokerServices, ctx: RequestContext, txn_id: str,
                     wanted: Partitions) -> dict[tuple[str, int], ErrorCode] | None:
    """Kafka's rules for a client's request (v0-3): WRITE on the transactional id (else
    every partition is refused), WRITE on each topic (a refused topic's partitions say
    so, a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION, the others were
    not tried). An internal topic is never authorized for a client,
    whatever the ACLs say: its markers would be appended beside the coordinator's own
    records (Kafka filters ``Topic.isInternal`` out before authorizing)."""
    if not authorize(services, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
    refused = {topic for topic, _ in wanted
               if topic in INTERNAL_TOPICS
               or not authorize(services, ctx, AclOperation.WRITE, ResourceType.TOPIC, topic)}
    if not refused:
        return None
    unknown = _unknown(services, [tp for tp in wanted if tp[0] not in refused])
    return {tp: ErrorCode.topic_authorization_failed if tp[0] in refused
            else ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
            for tp in wanted}


async def _one(services: BrokerServices, version: int, txn_id: str, producer_id: int, epoch: int,
               wanted: Partitions, verify_only: bool) -> dict[tuple[str, int], ErrorCode]:
    if not txn_id:
        return dict.fromkeys(wanted, ErrorCode.invalid_request)
    unknown = _unknown(services, wanted)
    if unknown:
        # As Kafka: nothing is added; the unknown partitions say why, the others were not tried.
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                for tp in wanted}
    if verify_only:
        return services.transactions.verify_partitions(txn_id, producer_id, epoch, wanted)
    error = await services.transactions.add_partitions(txn_id, producer_id, epoch, wanted)
    if error == ErrorCode.producer_fenced and version < 2:
        error = ErrorCode.invalid_producer_epoch  # KIP-588
    return dict.fromkeys(wanted, error)


def _topic_results(schema: Any, topics: Any, errors: dict[tuple[str, int], ErrorCode]) -> tuple[Any, ...]:
    return tuple(
        make(schema.AddPartitionsToTxnTopicResult, name=t.name, results_by_partition=tuple(
            make(schema.AddPartitionsToTxnPartitionResult, partition_index=p,
                 partition_error_code=errors[(t.name, int(p))])
            for p in t.partitions))
        for t in topics)


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    if ctx.api_version < 4:
        wanted = [(t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions]
        refused = _client_refusals(services, ctx, request.v3_and_below_transactional_id, wanted)
        errors = refused if refused is not None else await _one(services, ctx.api_version, request.v3_and_below_transactional_id,
                            request.v3_and_below_producer_id, request.v3_and_below_producer_epoch, wanted, False)
        return make(schema.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE,
                    results_by_topic_v3_and_below=_topic_results(schema, request.v3_and_below_topics, errors))
    results = []
    if not authorize(services, ctx, AclOperation.CLUSTER_ACTION):  # v4+: brokers' requests
        for txn in request.transactions:
            wanted = [(t.name, int(p)) for t in txn.topics for p in t.partitions]
            results.append(make(schema.AddPartitionsToTxnResult, transactional_id=txn.transactional_id,
                                topic_results=_topic_results(schema, txn.topics, dict.fromkeys(
                                    wanted, ErrorCode.cluster_authorization_failed))))
        return make(schema.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=tuple(results))
    for txn in request.transactions:
        wanted = [(t.name, int(p)) for t in txn.topics for p in t.partitions]
        errors = await _one(services, ctx.api_version, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                            wanted, txn.verify_only)
        results.append(make(schema.AddPartitionsToTxnResult, transactional_id=txn.transactional_id,
                            topic_results=_topic_results(schema, txn.topics, errors)))
    return make(schema.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                results_by_transaction=tuple(results))
