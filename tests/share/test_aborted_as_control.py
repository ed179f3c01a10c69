"""read_committed share groups: ``aborted_as_control`` makes exactly the batches of aborted
transactions control batches (archived, never delivered), whatever the interleaving of
producers and wherever a read starts. Checked against a model that knows every batch's
transaction (a Hypothesis property), with the aborted-transaction list a read_committed
fetch of the log would return."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.share.partition import LogBatch, aborted_as_control


@dataclass(frozen=True)
class Written:
    batch: LogBatch
    producer_id: int
    transactional: bool
    aborted: bool  # the model's truth: a data batch of an aborted transaction


# A log: steps of (producer, action); action: "data" (a batch of n records in the producer's
# open transaction, opening one), "commit"/"abort" (its marker, if a transaction is open),
# or "plain" (a non-transactional batch).
steps = st.lists(st.tuples(st.integers(1, 3), st.sampled_from(["data", "data", "commit", "abort", "plain"]),
                           st.integers(1, 4)), max_size=40)


def build(log_steps: list[tuple[int, str, int]]) -> tuple[list[Written], list[tuple[int, int, int]]]:
    """The log's batches, and every aborted transaction as (producer, first offset, marker offset)."""
    offset = 0
    out: list[Written] = []
    open_txn: dict[int, tuple[int, list[int]]] = {}  # producer -> (first offset, indexes of its batches)
    aborted: list[tuple[int, int, int]] = []
    for producer, action, n in log_steps:
        if action == "plain":
            out.append(Written(LogBatch(offset, offset + n - 1), -1, False, False))
            offset += n
        elif action == "data":
            first, members = open_txn.setdefault(producer, (offset, []))
            members.append(len(out))
            out.append(Written(LogBatch(offset, offset + n - 1), producer, True, False))
            offset += n
        elif producer in open_txn:
            first, members = open_txn.pop(producer)
            if action == "abort":
                aborted.append((producer, first, offset))
                for i in members:
                    w = out[i]
                    out[i] = Written(w.batch, w.producer_id, True, True)
            out.append(Written(LogBatch(offset, offset, True), producer, True, False))
            offset += 1
    return out, aborted


@settings(max_examples=300, deadline=None)
@given(steps, st.integers(0, 200))
def test_exactly_the_batches_of_aborted_transactions_become_control(
        log_steps: list[tuple[int, str, int]], start: int) -> None:
    written, aborted = build(log_steps)
    read = [w for w in written if w.batch.last_offset >= start]  # a read from `start` returns whole batches
    if not read:
        return
    first_read = read[0].batch.base_offset
    # What the fetch returns: aborted transactions overlapping the read (Kafka's
    # collectAbortedTransactions: ending at or after the read's start).
    returned = [(p, first) for p, first, marker in aborted if marker >= first_read]
    result = aborted_as_control([(w.batch, w.producer_id, w.transactional) for w in read], returned)
    assert [b.base_offset for b in result] == [w.batch.base_offset for w in read]
    for w, b in zip(read, result, strict=True):
        assert b.is_control == (w.batch.is_control or w.aborted), (w, b)


def test_a_commit_between_aborted_transactions_of_another_producer_stays() -> None:
    # offsets: 0-1 p1 data (aborted), 2-3 p2 data (committed), 4 p1 ABORT, 5 p2 COMMIT, 6 plain
    batches = [(LogBatch(0, 1), 1, True), (LogBatch(2, 3), 2, True), (LogBatch(4, 4, True), 1, True),
               (LogBatch(5, 5, True), 2, True), (LogBatch(6, 6), -1, False)]
    got = aborted_as_control(batches, [(1, 0)])
    assert [b.is_control for b in got] == [True, False, True, True, False]
