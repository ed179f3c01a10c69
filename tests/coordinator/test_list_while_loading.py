"""ListGroups (16) and ListTransactions (66) while a coordinator partition led here is
still loading: Kafka answers COORDINATOR_LOAD_IN_PROGRESS (clients ask again) rather than
a list that silently leaves that partition's groups or transactions out; once the
coordinator is closed (the broker shutting down) they answer COORDINATOR_NOT_AVAILABLE,
as Kafka's inactive coordinators do.

The handlers run over real coordinators on the in-memory writer; requests and answers
go through the wire codec both ways, as a client sends and reads them."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode
from support.coordinator import MemoryWriter

from dmq.client.wire import decode_response, encode_request
from dmq.group.coordinator import GroupConfig, GroupCoordinator
from dmq.handlers import HANDLERS
from dmq.handlers.context import RequestContext
from dmq.protocol.codec import decode_request, encode_response, make, request_class, response_module
from dmq.transaction.coordinator import TransactionCoordinator
from dmq.transaction.shard import TransactionConfig


async def call(svc: Any, request: Any, version: int) -> Any:
    api_key = type(request).__api_key__
    frame = encode_request(request, 7, "test")[4:]
    _, decoded = decode_request(frame, api_key, version)
    ctx = RequestContext(api_key, version, 7, "test", "127.0.0.1", response_module(api_key, version))
    response = await HANDLERS[api_key].handle(svc, ctx, decoded)
    encoded = encode_response(7, api_key, response)
    assert isinstance(encoded, bytes)
    return decode_response(type(request), 7, encoded[4:])


def group_in(coordinator: GroupCoordinator, partition: int) -> str:
    return next(f"g{i}" for i in itertools.count() if coordinator.partition_for(f"g{i}") == partition)


def txn_id_in(coordinator: TransactionCoordinator, partition: int) -> str:
    return next(f"tx{i}" for i in itertools.count() if coordinator.partition_for(f"tx{i}") == partition)


def test_list_groups_answers_load_in_progress_while_a_led_partition_is_not_loaded() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        groups = GroupCoordinator(GroupConfig(num_partitions=2), w, lambda topic, partition: True)
        w.leading.add(0)
        groups.set_led({0: 1})
        g0, g1 = group_in(groups, 0), group_in(groups, 1)
        assert await groups.commit_offsets(g0, -1, "", None, [("t", 0, 5, -1, None)]) == [ErrorCode.none]
        svc = SimpleNamespace(coordinators=SimpleNamespace(group=groups), authorizer=None)
        request = make(request_class(16, 5), states_filter=(), types_filter=())

        listed = await call(svc, request, 5)
        assert listed.error_code == ErrorCode.none and [g.group_id for g in listed.groups] == [g0]

        # Metadata now says this broker leads partition 1 too; its shard is not loaded yet.
        w.leading.add(1)
        loading = await call(svc, request, 5)
        assert loading.error_code == ErrorCode.coordinator_load_in_progress and loading.groups == ()

        groups.set_led({0: 1, 1: 1})
        assert await groups.commit_offsets(g1, -1, "", None, [("t", 0, 7, -1, None)]) == [ErrorCode.none]
        listed = await call(svc, request, 5)
        assert listed.error_code == ErrorCode.none
        assert sorted(g.group_id for g in listed.groups) == sorted([g0, g1])
        await groups.close()  # the broker shutting down: nothing is loading, nothing listed
        closed = await call(svc, request, 5)
        assert closed.error_code == ErrorCode.coordinator_not_available and closed.groups == ()

    asyncio.run(scenario())


def test_list_transactions_answers_load_in_progress_while_a_led_partition_is_not_loaded() -> None:
    async def scenario() -> None:
        w = MemoryWriter()
        ids = itertools.count(1000)

        async def new_id() -> int:
            return next(ids)

        txns = TransactionCoordinator(TransactionConfig(num_partitions=2), w, new_id)
        w.leading.add(0)
        txns.set_led({0: 1})
        t0 = txn_id_in(txns, 0)
        assert (await txns.init_producer_id(t0, 60_000)).error == ErrorCode.none
        svc = SimpleNamespace(transactions=txns, authorizer=None)
        request = make(request_class(66, 0), state_filters=(), producer_id_filters=())

        listed = await call(svc, request, 0)
        assert listed.error_code == ErrorCode.none
        assert [t.transactional_id for t in listed.transaction_states] == [t0]

        w.leading.add(1)  # led here by metadata, not loaded yet
        loading = await call(svc, request, 0)
        assert loading.error_code == ErrorCode.coordinator_load_in_progress
        assert loading.transaction_states == ()

        txns.set_led({0: 1, 1: 1})
        listed = await call(svc, request, 0)
        assert listed.error_code == ErrorCode.none
        assert [t.transactional_id for t in listed.transaction_states] == [t0]
        await txns.close()
        closed = await call(svc, request, 0)
        assert closed.error_code == ErrorCode.coordinator_not_available and closed.transaction_states == ()

    asyncio.run(scenario())
