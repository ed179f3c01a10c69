"""A transactional id's state and the transaction state machine (Kafka's TransactionState).

Legal moves, as Kafka's ``validPreviousStates`` read forwards::

    Empty              -> Empty (epoch bump), Ongoing, Dead
    Ongoing            -> Ongoing (more partitions), PrepareCommit, PrepareAbort, PrepareEpochFence
    PrepareCommit      -> CompleteCommit
    PrepareAbort       -> CompleteAbort
    CompleteCommit     -> Empty, Ongoing, Dead
    CompleteAbort      -> Empty, Ongoing, Dead
    PrepareEpochFence  -> PrepareAbort
    Dead               -> (none)

``transition_to()`` is the only way to change the state. PrepareEpochFence
is never written: a producer fenced while its transaction is open (a new
InitProducerId, or its transaction timed out) has its epoch bumped and the
transaction aborted under the new epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767


class TransactionState(Enum):
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def display(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state {state_id}")


S = TransactionState
TRANSITIONS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    S.ONGOING: frozenset({S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE}),
    S.PREPARE_COMMIT: frozenset({S.COMPLETE_COMMIT}),
    S.PREPARE_ABORT: frozenset({S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    S.COMPLETE_ABORT: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset(),
}


class IllegalStateTransition(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    """What ``__transaction_state`` holds for one transactional id (immutable: a
    transition makes a new one, written as a record, applied when replayed)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    last_update_ms: int = -1
    start_ms: int = -1
    # Not in Kafka's v0 record; kept in memory for KIP-360 retries of a bump.
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    def transition_to(self, target: TransactionState, **changes: object) -> TransactionMetadata:
        if target not in TRANSITIONS[self.state]:
            raise IllegalStateTransition(
                f"transaction {self.transactional_id}: illegal transition {self.state.display} -> "
                f"{target.display}")
        return replace(self, state=target, **changes)  # type: ignore[arg-type]

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_PRODUCER_EPOCH - 1
