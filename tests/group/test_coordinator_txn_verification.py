"""GroupCoordinator.txn_offset_commit with transaction verification (KIP-890), over a real
ReplicaManager and Log of ``__consumer_offsets``; the transaction coordinator's answer is a
stand-in that can be held back, as a remote coordinator's round trip (real brokers:
tests/integration/test_transaction_errors.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

from kio.schema.errors import ErrorCode

from dmq.config import BrokerConfig, LogConfig
from dmq.coordinator.runtime import EndMarker, LogEntry, Record
from dmq.group.coordinator import GroupConfig, GroupCoordinator
from dmq.record.batch import TRANSACTIONAL_MASK
from dmq.record.records import encode_batch
from dmq.replication.replica_manager import ReplicaManager
from dmq.storage.log_manager import LogManager
from dmq.storage.producer_state import SKIP_VERIFICATION, AppendOrigin, VerificationGuard

OFFSETS = "__consumer_offsets"


class _OffsetsTopic:
    """The runtime's writer over the ReplicaManager, as the broker's InternalTopic appends."""

    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm

    def append(self, partition: int, records: list[Record], producer: tuple[int, int] | None = None,
               verification: VerificationGuard | None = SKIP_VERIFICATION) -> tuple[ErrorCode, int]:
        batch = encode_batch([(k, v, []) for k, v in records], timestamp=1, **(
            {} if producer is None else {"producer_id": producer[0], "producer_epoch": producer[1],
                                         "attributes_extra": TRANSACTIONAL_MASK}))
        r = self.rm.append_to_local_log(OFFSETS, partition, batch, -1,
                                        AppendOrigin.CLIENT if producer is None else AppendOrigin.COORDINATOR,
                                        verification=verification)
        return r.error, r.last_offset

    def append_marker(self, partition: int, marker: EndMarker) -> tuple[ErrorCode, int]:
        r = self.rm.append_end_txn_marker(OFFSETS, partition, marker.producer_id, marker.producer_epoch,
                                          marker.coordinator_epoch, marker.commit)
        return r.error, r.last_offset

    async def wait_committed(self, partition: int, last_offset: int) -> ErrorCode:
        return ErrorCode.none

    def read(self, partition: int) -> Iterator[LogEntry]:
        return iter(())

    def leads(self, partition: int) -> bool:
        return True


class _TransactionCoordinator:
    def __init__(self) -> None:
        self.in_txn: set[tuple[str, int]] = {(OFFSETS, 0)}
        self.held: asyncio.Event | None = None
        self.calls = 0

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        self.calls += 1
        if self.held is not None:
            await self.held.wait()
        return {tp: ErrorCode.invalid_txn_state for tp in partitions if tp not in self.in_txn}


def _coordinator(tmp: Path) -> tuple[LogManager, ReplicaManager, _TransactionCoordinator, GroupCoordinator]:
    lm = LogManager(str(tmp), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, p: "id")
    rm = ReplicaManager(1, lm)
    rm.become_leader(OFFSETS, 0, "id", 0, replicas=[1], isr=[1])
    txn = _TransactionCoordinator()
    rm.txn_verifier = txn
    gc = GroupCoordinator(GroupConfig(num_partitions=1), _OffsetsTopic(rm), lambda t, p: True)
    gc.verify_transaction = lambda tid, pid, epoch, p: rm.verify_transaction(tid, pid, epoch, (OFFSETS, p))
    return lm, rm, txn, gc


async def _commit(gc: GroupCoordinator, group: str, offset: int) -> list[ErrorCode]:
    return await gc.txn_offset_commit("app", group, 7, 0, -1, "", None, [("in", 0, offset, -1, "")])


def test_commits_waiting_for_their_verification_are_written(tmp_path: Path) -> None:
    lm, _, txn, gc = _coordinator(tmp_path)

    async def main() -> None:
        gc.set_led({0: 0})
        txn.held = asyncio.Event()
        a, b = asyncio.create_task(_commit(gc, "g1", 1)), asyncio.create_task(_commit(gc, "g2", 2))
        while txn.calls < 2:
            await asyncio.sleep(0)
        txn.held.set()
        assert await a == await b == [ErrorCode.none]
        assert await _commit(gc, "g1", 3) == [ErrorCode.none] and txn.calls == 2  # open here: not asked
        assert await gc.complete_transaction(0, 7, 0, True, 0) == ErrorCode.none
        txn.in_txn.clear()  # the producer's next transaction does not have the group
        assert await _commit(gc, "g1", 4) == [ErrorCode.invalid_txn_state]
        await gc.close()

    asyncio.run(main())
    lm.shutdown()


def test_a_commit_whose_transaction_is_aborted_while_it_waits_is_refused(tmp_path: Path) -> None:
    """The ABA race: verified while open, the ABORT marker lands before the offsets; they
    must not open a transaction nobody ends (pending for ever: UNSTABLE_OFFSET_COMMIT)."""
    lm, _, txn, gc = _coordinator(tmp_path)

    async def main() -> None:
        gc.set_led({0: 0})
        txn.held = asyncio.Event()
        late = asyncio.create_task(_commit(gc, "g1", 1))
        while txn.calls < 1:
            await asyncio.sleep(0)
        assert await gc.complete_transaction(0, 7, 0, False, 0) == ErrorCode.none
        txn.held.set()
        assert await late == [ErrorCode.invalid_txn_state]
        assert (await gc.fetch_stable_offsets("g1", None))[2] == set()
        await gc.close()

    asyncio.run(main())
    lm.shutdown()


def test_a_stale_coordinators_marker_on_the_offsets_topic_is_fenced(tmp_path: Path) -> None:
    """The old transaction coordinator's retried marker is TRANSACTION_COORDINATOR_FENCED,
    as on a data partition, so its sender stops; it was COORDINATOR_NOT_AVAILABLE, which
    WriteTxnMarkers answers as NOT_LEADER_OR_FOLLOWER and the sender retried for ever."""
    lm, _, _, gc = _coordinator(tmp_path)

    async def main() -> None:
        gc.set_led({0: 0})
        assert await _commit(gc, "g1", 1) == [ErrorCode.none]
        assert await gc.complete_transaction(0, 7, 0, True, 5) == ErrorCode.none
        assert await gc.complete_transaction(0, 7, 0, True, 4) == ErrorCode.transaction_coordinator_fenced
        await gc.close()

    asyncio.run(main())
    lm.shutdown()
