"""AddPartitionsToTxnManager: verifications batched per coordinator broker, and the
coordinator's answers translated as Kafka's manager does.
The remote coordinator is a stand-in at the channel (real brokers:
tests/cluster/test_transactions_cluster.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.client.channels import BrokerUnreachable
from dmq.handlers.context import NO_THROTTLE
from dmq.protocol.codec import make, response_module
from dmq.server.add_partitions_to_txn_manager import AddPartitionsToTxnManager

R = response_module(24, 4)


class _Coordinators:
    """Answers AddPartitionsToTxn verify_only as a coordinator broker would; each request
    waits for ``release`` so that tests can queue more meanwhile."""

    def __init__(self) -> None:
        self.in_txn: dict[str, set[tuple[str, int]]] = {}
        self.requests: list[list[str]] = []
        self.gate = asyncio.Event()
        self.top_error = ErrorCode.none
        self.unreachable = False

    async def request(self, broker_id: int, request: Any, timeout_s: float) -> Any:
        self.requests.append([t.transactional_id for t in request.transactions])
        await self.gate.wait()
        if self.unreachable:
            raise BrokerUnreachable("closed")
        assert all(t.verify_only for t in request.transactions)
        return make(R.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE, error_code=self.top_error, results_by_transaction=tuple(
            make(R.AddPartitionsToTxnResult, transactional_id=t.transactional_id, topic_results=tuple(
                make(R.AddPartitionsToTxnTopicResult, name=topic.name, results_by_partition=tuple(
                    make(R.AddPartitionsToTxnPartitionResult, partition_index=p,
                         partition_error_code=ErrorCode.none if (topic.name, p) in self.in_txn.get(
                             t.transactional_id, set()) else ErrorCode.transaction_abortable)
                    for p in topic.partitions))
                for topic in t.topics))
            for t in request.transactions))

    def close(self) -> None:
        pass


def _manager(remote: _Coordinators, local_answer: ErrorCode = ErrorCode.none) -> AddPartitionsToTxnManager:
    return AddPartitionsToTxnManager(
        1, lambda txn_id: {"local": 1, "nowhere": -1}.get(txn_id, 2),
        lambda txn_id, pid, epoch, tps: dict.fromkeys(tps, local_answer), remote)  # type: ignore[arg-type]


def test_verifications_that_wait_go_together_in_the_next_request() -> None:
    async def main() -> None:
        remote = _Coordinators()
        remote.in_txn = {"a": {("t", 0)}, "b": {("t", 1)}}
        m = _manager(remote)
        first = asyncio.create_task(m.verify("a", 1, 0, [("t", 0)]))
        await asyncio.sleep(0)
        b, c = (asyncio.create_task(m.verify(t, 1, 0, [("t", 1)])) for t in ("b", "c"))
        await asyncio.sleep(0)
        assert remote.requests == [["a"]]
        remote.gate.set()
        assert await first == {} and await b == {}
        assert await c == {("t", 1): ErrorCode.invalid_txn_state}
        assert remote.requests == [["a"], ["b", "c"]]

    asyncio.run(main())


def test_a_newer_verification_of_the_same_transactional_id_answers_the_waiting_one() -> None:
    """Kafka's addTxnData: one entry per transactional id waits; the request a client gave
    up on and retried is answered (the producer retries NETWORK_EXCEPTION's translation),
    not sent; an older epoch than what waits is fenced at once."""
    async def main() -> None:
        remote = _Coordinators()
        remote.in_txn = {"a": {("t", 0)}}
        m = _manager(remote)
        in_flight = asyncio.create_task(m.verify("x", 1, 0, [("t", 0)]))
        await asyncio.sleep(0)
        given_up, retried = (asyncio.create_task(m.verify("a", 1, 3, [("t", 0)])) for _ in range(2))
        await asyncio.sleep(0)
        assert await given_up == {("t", 0): ErrorCode.network_exception}
        zombie = await m.verify("a", 1, 2, [("t", 0)])
        assert zombie == {("t", 0): ErrorCode.invalid_producer_epoch}
        bumped = asyncio.create_task(m.verify("a", 1, 4, [("t", 0)]))
        await asyncio.sleep(0)
        assert await retried == {("t", 0): ErrorCode.invalid_producer_epoch}
        remote.gate.set()
        await in_flight
        assert await bumped == {}
        assert remote.requests == [["x"], ["a"]]

    asyncio.run(main())


def test_the_coordinators_answers_are_translated_as_kafkas_manager_does() -> None:
    async def main() -> None:
        remote = _Coordinators()
        remote.gate.set()
        m = _manager(remote)
        assert await m.verify("local", 1, 0, [("t", 0)]) == {}
        fenced = _manager(remote, ErrorCode.producer_fenced)
        assert await fenced.verify("local", 1, 0, [("t", 0)]) == {("t", 0): ErrorCode.invalid_producer_epoch}
        loading = _manager(remote, ErrorCode.coordinator_load_in_progress)
        assert await loading.verify("local", 1, 0, [("t", 0)]) == {("t", 0): ErrorCode.coordinator_load_in_progress}
        assert await m.verify("nowhere", 1, 0, [("t", 0)]) == {("t", 0): ErrorCode.coordinator_not_available}
        remote.top_error = ErrorCode.cluster_authorization_failed
        assert await m.verify("x", 1, 0, [("t", 0)]) == {("t", 0): ErrorCode.invalid_txn_state}
        remote.top_error = ErrorCode.unsupported_version  # a coordinator that cannot verify
        assert await m.verify("x", 1, 0, [("t", 0)]) == {}
        remote.top_error, remote.unreachable = ErrorCode.none, True
        assert await m.verify("x", 1, 0, [("t", 0)]) == {("t", 0): ErrorCode.network_exception}

    asyncio.run(main())


def test_closing_answers_every_waiting_verification() -> None:
    async def main() -> None:
        remote = _Coordinators()
        m = _manager(remote)
        in_flight = [asyncio.create_task(m.verify(t, 1, 0, [("t", 0)])) for t in ("a", "b")]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert remote.requests == [["a", "b"]]
        queued = asyncio.create_task(m.verify("c", 1, 0, [("t", 0)]))
        await asyncio.sleep(0)
        m.close()
        for w in [*in_flight, queued]:
            assert await w == {("t", 0): ErrorCode.network_exception}
        # Closed before its sender ever ran: answered all the same.
        other = _manager(_Coordinators())
        never_sent = asyncio.create_task(other.verify("d", 1, 0, [("t", 0)]))
        await asyncio.sleep(0)
        other.close()
        assert await never_sent == {("t", 0): ErrorCode.network_exception}

    asyncio.run(main())
