"""Markers of prepared transactions: every partition, retried, then the transaction completes."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode
from support.coordinator import MemoryWriter

from dmq.transaction.coordinator import TransactionCoordinator
from dmq.transaction.markers import TransactionMarkerSender
from dmq.transaction.metadata import TransactionState
from dmq.transaction.shard import SendMarkers, TransactionConfig


class Leaders:
    """Partition leaders and what each broker answers, scripted by the test."""

    def __init__(self) -> None:
        self.leaders: dict[tuple[str, int], int | None] = {}
        self.answers: list[ErrorCode] = []  # the next answers, then none
        self.written: list[tuple[int, tuple[str, int], bool]] = []

    def leader_of(self, topic: str, partition: int) -> int | None:
        return self.leaders.get((topic, partition))

    async def write(self, broker_id: int, markers: SendMarkers,
                    partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        out = {}
        for tp in partitions:
            error = self.answers.pop(0) if self.answers else ErrorCode.none
            out[tp] = error
            if error == ErrorCode.none:
                self.written.append((broker_id, tp, markers.commit))
        return out


def markers(*partitions: tuple[str, int], commit: bool = True) -> SendMarkers:
    return SendMarkers("tx", 7, 0, commit, 1, frozenset(partitions))


def test_markers_go_to_each_leader_retried_until_written_then_complete() -> None:
    async def scenario() -> None:
        leaders = Leaders()
        leaders.leaders = {("a", 0): 1, ("a", 1): 2, ("gone", 0): None, ("b", 0): -1}
        leaders.answers = [ErrorCode.not_leader_or_follower]
        completed: list[SendMarkers] = []

        async def complete(m: SendMarkers) -> ErrorCode:
            completed.append(m)
            return ErrorCode.none

        sender = TransactionMarkerSender(leaders, complete, retry_backoff_ms=10)
        m = markers(("a", 0), ("a", 1), ("gone", 0), ("b", 0))
        sender.send(m)
        sender.send(m)  # asked twice (the sweep): sent once
        await asyncio.sleep(0.05)
        assert completed == []  # b-0 has no leader yet
        leaders.leaders[("b", 0)] = 3
        for _ in range(100):
            if completed:
                break
            await asyncio.sleep(0.01)
        assert completed == [m]
        assert sorted(leaders.written) == [(1, ("a", 0), True), (2, ("a", 1), True), (3, ("b", 0), True)]
        await sender.close()

    asyncio.run(scenario())


def test_fenced_markers_stop_without_completing() -> None:
    async def scenario() -> None:
        leaders = Leaders()
        leaders.leaders = {("a", 0): 1}
        leaders.answers = [ErrorCode.transaction_coordinator_fenced]
        completed: list[SendMarkers] = []

        async def complete(m: SendMarkers) -> ErrorCode:
            completed.append(m)
            return ErrorCode.none

        sender = TransactionMarkerSender(leaders, complete, retry_backoff_ms=10)
        sender.send(markers(("a", 0)))
        await asyncio.sleep(0.1)
        assert completed == [] and leaders.written == [] and sender.in_flight() == 0
        await sender.close()

    asyncio.run(scenario())


def test_a_transaction_commits_through_the_coordinator_and_its_markers() -> None:
    async def scenario() -> None:
        ids = iter(range(100, 200))

        async def generate() -> int:
            return next(ids)

        coordinator = TransactionCoordinator(TransactionConfig(num_partitions=1), MemoryWriter(), generate)
        leaders = Leaders()
        leaders.leaders = {("t", 0): 1, ("t", 1): 1}
        sender = TransactionMarkerSender(leaders, coordinator.complete, retry_backoff_ms=10)
        coordinator.send_markers = sender.send
        coordinator.set_led({0: 4})
        init = await coordinator.init_producer_id("tx", 60_000)
        assert init.error == ErrorCode.none and (init.producer_id, init.producer_epoch) == (100, 0)
        assert await coordinator.add_partitions("tx", 100, 0, [("t", 0), ("t", 1)]) == ErrorCode.none
        assert await coordinator.end_txn("tx", 100, 0, commit=True) == ErrorCode.none
        for _ in range(100):
            error, meta = coordinator.describe("tx")
            if meta is not None and meta.state == TransactionState.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0.01)
        assert meta is not None and meta.state == TransactionState.COMPLETE_COMMIT
        assert sorted(leaders.written) == [(1, ("t", 0), True), (1, ("t", 1), True)]
        # A second init bumps the epoch and allocates no new producer id.
        again = await coordinator.init_producer_id("tx", 60_000)
        assert (again.producer_id, again.producer_epoch) == (100, 1)
        assert coordinator.describe("other") == (ErrorCode.transactional_id_not_found, None)
        await sender.close()
        await coordinator.close()

    asyncio.run(scenario())


def test_an_unexpected_error_is_retried_never_completed_without_the_marker() -> None:
    """A marker the partition refused for a reason not known as retriable (say an offsets
    partition's coordinator answer) is tried again: completing without it leaves the
    transaction's records or offsets undecided for good (Kafka stops there too)."""
    async def scenario() -> None:
        leaders = Leaders()
        leaders.leaders = {("a", 0): 1, ("__consumer_offsets", 3): 1}
        # Partitions go in sorted order: the offsets partition refuses twice, a-0 takes it.
        leaders.answers = [ErrorCode.unknown_server_error, ErrorCode.none, ErrorCode.unknown_server_error]
        completed: list[SendMarkers] = []

        async def complete(m: SendMarkers) -> ErrorCode:
            completed.append(m)
            return ErrorCode.none

        sender = TransactionMarkerSender(leaders, complete, retry_backoff_ms=5)
        sender.send(markers(("a", 0), ("__consumer_offsets", 3)))
        for _ in range(200):
            if completed:
                break
            await asyncio.sleep(0.01)
        await sender.close()
        assert completed
        assert (1, ("__consumer_offsets", 3), True) in leaders.written

    asyncio.run(scenario())


def test_a_later_transaction_of_the_same_producer_epoch_gets_its_own_markers() -> None:
    """T1's completion is being retried when T2 (same producer id, epoch and outcome, other
    partitions) asks for its markers: T2's are sent too, not dropped as already sending."""
    async def scenario() -> None:
        leaders = Leaders()
        leaders.leaders = {("x", 0): 1, ("z", 0): 1}
        leaders.answers = [ErrorCode.not_leader_or_follower] * 20
        sender = TransactionMarkerSender(leaders, lambda m: _done(), retry_backoff_ms=5)
        sender.send(SendMarkers("tx", 7, 0, True, 1, frozenset({("x", 0)}), 1000))
        await asyncio.sleep(0.01)
        sender.send(SendMarkers("tx", 7, 0, True, 1, frozenset({("z", 0)}), 2000))
        for _ in range(200):
            if (1, ("z", 0), True) in leaders.written and (1, ("x", 0), True) in leaders.written:
                break
            await asyncio.sleep(0.01)
        await sender.close()
        assert (1, ("z", 0), True) in leaders.written

    async def _done() -> ErrorCode:
        return ErrorCode.none

    asyncio.run(scenario())


def test_an_offsets_partition_whose_coordinator_moved_answers_a_retriable_error() -> None:
    """WriteTxnMarkers for __consumer_offsets: the group coordinator's NOT_COORDINATOR,
    COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS (the partition moved, a write
    timed out, it is loading) is answered NOT_LEADER_OR_FOLLOWER, as Kafka's KafkaApis does,
    so the coordinator's sender finds the leader again and retries."""
    from types import SimpleNamespace

    from dmq.handlers.write_txn_markers import write_markers

    for answer in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                   ErrorCode.coordinator_load_in_progress, ErrorCode.none):
        async def complete_transaction(*args: object, answer: ErrorCode = answer) -> ErrorCode:
            return answer
        services = SimpleNamespace(coordinators=SimpleNamespace(
            group=SimpleNamespace(complete_transaction=complete_transaction)))
        errors = asyncio.run(write_markers(services, 7, 0, True, 1, [("__consumer_offsets", 3)]))  # type: ignore[arg-type]
        expected = ErrorCode.none if answer == ErrorCode.none else ErrorCode.not_leader_or_follower
        assert errors == {("__consumer_offsets", 3): expected}
