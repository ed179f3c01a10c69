"""Admin requests over ``WireClient``, with exactly the fields a test wants (assignments,
duplicate entries, operations AdminClient will not send): each returns the broker's
per-resource answer as (ErrorCode, message[, more])."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.client.wire import WireClient, decode_response
from dmq.protocol.codec import make, request_class, request_module

__all__ = ["TOPIC", "BROKER", "GROUP", "SET", "DELETE", "APPEND", "SUBTRACT", "create_topics", "create_topic",
           "create_partitions", "create_partitions_answers", "incremental_alter", "incremental_alter_request", "at_once", "alter_configs", "describe_configs"]

TOPIC, BROKER, GROUP = 2, 4, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_TIMEOUT = timedelta(seconds=10)


def create_topics(c: WireClient, topics: list[dict[str, Any]], validate_only: bool = False,
                  version: int = 7) -> list[Any]:
    """CreateTopics of several topics (each: name, partitions=-1, rf=-1, assignment
    {partition: brokers} or a list of (partition, brokers), configs {name: value}): the results."""
    mod = request_module(19, version)
    entries = []
    for t in topics:
        assignment = t.get("assignment") or ()
        pairs = assignment.items() if isinstance(assignment, dict) else assignment
        entries.append(make(
            mod.CreatableTopic, name=t["name"], num_partitions=t.get("partitions", -1),
            replication_factor=t.get("rf", -1),
            assignments=tuple(make(mod.CreatableReplicaAssignment, partition_index=p, broker_ids=tuple(b))
                              for p, b in pairs),
            configs=tuple(make(mod.CreatableTopicConfig, name=k, value=v)
                          for k, v in (t.get("configs") or {}).items())))
    answer = c.request(make(request_class(19, version), topics=tuple(entries), timeout=_TIMEOUT,
                            validate_only=validate_only))
    return list(answer.topics)


def create_topic(c: WireClient, name: str, partitions: int = -1, rf: int = -1,
                 assignment: dict[int, list[int]] | list[tuple[int, list[int]]] | None = None,
                 configs: dict[str, str | None] | None = None,
                 validate_only: bool = False) -> tuple[ErrorCode, str | None, Any]:
    result = create_topics(c, [{"name": name, "partitions": partitions, "rf": rf, "assignment": assignment,
                                "configs": configs}], validate_only)[0]
    return ErrorCode(result.error_code), result.error_message, result


def create_partitions_answers(c: WireClient, topics: Sequence[tuple[str, int, list[list[int]] | None]],
                              validate_only: bool = False) -> list[tuple[str, ErrorCode, str | None]]:
    """CreatePartitions v3 of (topic, new count, assignments or None) each: every result."""
    mod = request_module(37, 3)
    answer = c.request(make(request_class(37, 3), timeout=_TIMEOUT, validate_only=validate_only, topics=tuple(
        make(mod.CreatePartitionsTopic, name=name, count=count,
             assignments=None if assignments is None else tuple(
                 make(mod.CreatePartitionsAssignment, broker_ids=tuple(a)) for a in assignments))
        for name, count, assignments in topics)))
    return [(r.name, ErrorCode(r.error_code), r.error_message) for r in answer.results]


def create_partitions(c: WireClient, name: str, count: int, assignments: list[list[int]] | None = None,
                      validate_only: bool = False) -> tuple[ErrorCode, str | None]:
    """CreatePartitions v3 growing ``name`` to ``count``: its (error, message)."""
    _, error, message = create_partitions_answers(c, [(name, count, assignments)], validate_only)[0]
    return error, message


def incremental_alter_request(resource_type: int, name: str, ops: list[tuple[str, int, str | None]],
                              validate_only: bool = False,
                              more: Sequence[tuple[int, str, list[tuple[str, int, str | None]]]] = ()) -> Any:
    """An IncrementalAlterConfigs v1 request of one resource (and each of ``more``)."""
    mod = request_module(44, 1)
    resources = [(resource_type, name, ops), *more]
    return make(request_class(44, 1), validate_only=validate_only, resources=tuple(
        make(mod.AlterConfigsResource, resource_type=rt, resource_name=n, configs=tuple(
            make(mod.AlterableConfig, name=k, config_operation=op, value=v) for k, op, v in o))
        for rt, n, o in resources))


def incremental_alter(c: WireClient, resource_type: int, name: str,
                      ops: list[tuple[str, int, str | None]], validate_only: bool = False,
                      more: Sequence[tuple[int, str, list[tuple[str, int, str | None]]]] = ()
                      ) -> list[tuple[ErrorCode, str | None]]:
    """IncrementalAlterConfigs v1 of one resource (and each of ``more``): (error, message) each."""
    answer = c.request(incremental_alter_request(resource_type, name, ops, validate_only, more))
    return [(ErrorCode(r.error_code), r.error_message) for r in answer.responses]


def at_once(requests: Sequence[tuple[WireClient, Any]]) -> list[Any]:
    """Send every request (each on its client's connection) before reading any answer, so
    that the broker handles them at the same time: their answers, in order."""
    sent = [(c, type(r), *c.encode(r)) for c, r in requests]
    for c, _cls, _corr, frame in sent:
        c.send_raw(frame)
    return [decode_response(cls, corr, c.recv_frame()) for c, cls, corr, _frame in sent]


def alter_configs(c: WireClient, resource_type: int, name: str, configs: list[tuple[str, str | None]],
                  validate_only: bool = False,
                  more: Sequence[tuple[int, str, list[tuple[str, str | None]]]] = ()
                  ) -> list[tuple[ErrorCode, str | None]]:
    """AlterConfigs v2 of one resource (and each of ``more``): (error, message) each."""
    mod = request_module(33, 2)
    resources = [(resource_type, name, configs), *more]
    answer = c.request(make(request_class(33, 2), validate_only=validate_only, resources=tuple(
        make(mod.AlterConfigsResource, resource_type=rt, resource_name=n, configs=tuple(
            make(mod.AlterableConfig, name=k, value=v) for k, v in cs))
        for rt, n, cs in resources)))
    return [(ErrorCode(r.error_code), r.error_message) for r in answer.responses]


def describe_configs(c: WireClient, resource_type: int, name: str,
                     keys: list[str] | None = None) -> tuple[ErrorCode, str | None, dict[str, Any]]:
    """DescribeConfigs v4 of one resource: (error, message, {config name: entry})."""
    mod = request_module(32, 4)
    answer = c.request(make(request_class(32, 4), include_synonyms=False, include_documentation=False,
                            resources=(make(mod.DescribeConfigsResource, resource_type=resource_type,
                                            resource_name=name,
                                            configuration_keys=None if keys is None else tuple(keys)),)))
    result = answer.results[0]
    return ErrorCode(result.error_code), result.error_message, {e.name: e for e in result.configs}
