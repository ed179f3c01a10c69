"""Fetch sessions (KIP-227): the leader's FetchSessionCache and a fetcher's
FetchSessionHandler, alone and talking to each other."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from dmq.replication.fetch_session import (
    EVICTION_MS,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INT32_MAX,
    FetchContext,
    FetchSessionCache,
    FetchSessionHandler,
    PartitionRequest,
    next_epoch,
)
from dmq.replication.partition import ReadResult
from dmq.replication.replica_manager import FetchRequestPartition, TopicPartition


class Data:
    """Stands for a FileSlice: only its length is looked at."""

    def __init__(self, length: int) -> None:
        self.length = length


def req(topic: str, index: int, offset: int = 0, max_bytes: int = 1000, epoch: int = 0) -> FetchRequestPartition:
    return FetchRequestPartition(topic, index, offset, max_bytes, epoch)


def result(hw: int = 10, log_start: int = 0, data: int = 0,
           error: ErrorCode = ErrorCode.none) -> ReadResult:
    return ReadResult(error, hw, log_start, hw, Data(data) if data else None)  # type: ignore[arg-type]


def answer_keys(cache: FetchSessionCache, context: FetchContext, results: list[ReadResult]) -> tuple[Any, ...]:
    a = cache.respond(context, results, 0)
    return a.error, [(r.topic, r.partition) for r, _ in a.partitions]


def open_session(cache: FetchSessionCache, parts: list[FetchRequestPartition], now: int = 0,
                 privileged: bool = True) -> int:
    context = cache.new_context(0, INITIAL_EPOCH, parts, [], privileged, now)
    answer = cache.respond(context, [result() for _ in parts], now)
    assert answer.error == ErrorCode.none and len(answer.partitions) == len(parts)
    return answer.session_id


def test_next_epoch_wraps_to_one_and_the_final_epoch_stays_final() -> None:
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(41) == 42
    assert next_epoch(INT32_MAX) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_a_full_request_opens_a_session_and_the_next_lists_only_what_changed() -> None:
    cache = FetchSessionCache()
    a0, a1, b0 = req("a", 0), req("a", 1), req("b", 0)
    session_id = open_session(cache, [a0, a1, b0])
    assert session_id > 0 and cache.partitions_cached == 3
    # Epoch 1, nothing listed: all three are read, none changed, none answered.
    context = cache.new_context(session_id, 1, [], [], True, 1)
    assert [(p.topic, p.partition) for p in context.partitions] == [("a", 0), ("a", 1), ("b", 0)]
    assert answer_keys(cache, context, [result(), result(), result()]) == (ErrorCode.none, [])
    # Epoch 2: a-1 moved its fetch offset; b-0 got records, a-0 a new high watermark.
    context = cache.new_context(session_id, 2, [req("a", 1, offset=5)], [], True, 2)
    assert [p.fetch_offset for p in context.partitions] == [0, 5, 0]
    got = answer_keys(cache, context, [result(hw=11), result(), result(data=100)])
    assert got == (ErrorCode.none, [("a", 0), ("b", 0)])
    # Answered partitions went to the end of the order.
    context = cache.new_context(session_id, 3, [], [], True, 3)
    assert [(p.topic, p.partition) for p in context.partitions] == [("a", 1), ("a", 0), ("b", 0)]


def test_errors_and_log_start_changes_are_answered_and_an_error_is_answered_again_once_gone() -> None:
    cache = FetchSessionCache()
    session_id = open_session(cache, [req("a", 0), req("a", 1)])
    context = cache.new_context(session_id, 1, [], [], True, 0)
    got = answer_keys(cache, context, [result(error=ErrorCode.not_leader_or_follower), result(log_start=3)])
    assert got == (ErrorCode.none, [("a", 0), ("a", 1)])
    context = cache.new_context(session_id, 2, [], [], True, 0)
    # The same high watermark as before the error: still answered, the error is gone.
    assert answer_keys(cache, context, [result(), result(log_start=3)]) == (ErrorCode.none, [("a", 0)])


def test_forgotten_partitions_leave_and_an_emptied_session_closes() -> None:
    cache = FetchSessionCache()
    session_id = open_session(cache, [req("a", 0), req("a", 1)])
    context = cache.new_context(session_id, 1, [req("c", 0)], [("a", 0)], True, 0)
    assert [(p.topic, p.partition) for p in context.partitions] == [("a", 1), ("c", 0)]
    # c-0 is new to the session: answered whatever it holds.
    assert answer_keys(cache, context, [result(), result()]) == (ErrorCode.none, [("c", 0)])
    context = cache.new_context(session_id, 2, [], [("a", 1), ("c", 0)], True, 0)
    assert context.partitions == [] and context.session is None
    assert session_id not in cache.sessions
    assert cache.respond(context, [], 0).session_id == 0


def test_session_errors_and_closing() -> None:
    cache = FetchSessionCache()
    session_id = open_session(cache, [req("a", 0)])
    missing = cache.new_context(session_id + 1, 1, [], [], True, 0)
    assert missing.error == ErrorCode.fetch_session_id_not_found and missing.partitions == []
    assert cache.respond(missing, [], 0).error == ErrorCode.fetch_session_id_not_found
    wrong = cache.new_context(session_id, 7, [], [], True, 0)
    assert wrong.error == ErrorCode.invalid_fetch_session_epoch
    # A request retried with an epoch already used is refused too.
    cache.respond(cache.new_context(session_id, 1, [], [], True, 0), [result()], 0)
    assert cache.new_context(session_id, 1, [], [], True, 0).error == ErrorCode.invalid_fetch_session_epoch
    # Epoch -1 closes it and is answered sessionless.
    final = cache.new_context(session_id, FINAL_EPOCH, [req("a", 0)], [], True, 0)
    assert session_id not in cache.sessions
    answer = cache.respond(final, [result()], 0)
    assert answer.session_id == 0 and len(answer.partitions) == 1
    # Epoch 0 with an id closes that one and opens another.
    first = open_session(cache, [req("a", 0)])
    context = cache.new_context(first, INITIAL_EPOCH, [req("b", 0)], [], True, 0)
    assert first not in cache.sessions
    second = cache.respond(context, [result()], 0).session_id
    assert second not in (0, first) and list(cache.sessions) == [second]


def test_a_request_overtaken_by_another_of_its_session_is_refused() -> None:
    cache = FetchSessionCache()
    session_id = open_session(cache, [req("a", 0)])
    waiting = cache.new_context(session_id, 1, [], [], True, 0)   # long-polls...
    later = cache.new_context(session_id, 2, [], [], True, 0)     # ...while the next comes in
    assert cache.respond(waiting, [result(data=5)], 0).error == ErrorCode.invalid_fetch_session_epoch
    assert cache.respond(later, [result(data=5)], 0).error == ErrorCode.none


def test_a_new_leader_epoch_is_answered_in_full() -> None:
    cache = FetchSessionCache()
    session_id = open_session(cache, [req("a", 0, epoch=3)])
    context = cache.new_context(session_id, 1, [req("a", 0, epoch=4)], [], True, 0)
    assert answer_keys(cache, context, [result()]) == (ErrorCode.none, [("a", 0)])


def test_the_fetcher_starts_over_when_the_leader_closed_its_emptied_session() -> None:
    h = FetchSessionHandler()
    a = ("t", 0)
    h.build({a: (0, 1, 0, 100)})
    assert h.handle_response(ErrorCode.none, 5)
    h.build({a: (0, 2, 0, 100)})
    assert h.handle_response(ErrorCode.none, 0)  # answered sessionless
    assert h.build({a: (0, 2, 0, 100)}) == (0, INITIAL_EPOCH, {a: (0, 2, 0, 100)}, [])


def test_no_session_without_slots_or_partitions() -> None:
    assert open_session(FetchSessionCache(max_sessions=0), [req("a", 0)]) == 0
    cache = FetchSessionCache()
    context = cache.new_context(0, INITIAL_EPOCH, [], [], True, 0)
    assert cache.respond(context, [], 0).session_id == 0 and not cache.sessions


def test_eviction_follows_kafkas_rules() -> None:
    cache = FetchSessionCache(max_sessions=2)
    consumer = open_session(cache, [req("a", 0)], now=0, privileged=False)
    follower = open_session(cache, [req("a", 0)], now=0, privileged=True)
    # Full, both young: a consumer cannot evict; a follower evicts the consumer's.
    assert open_session(cache, [req("b", 0)], now=10, privileged=False) == 0
    newcomer = open_session(cache, [req("b", 0)], now=10, privileged=True)
    assert newcomer and consumer not in cache.sessions and cache.evictions == 1
    # Followers' sessions are safe from everyone while young...
    assert open_session(cache, [req("c", 0)], now=20, privileged=True) == 0
    # ...and the one unused for longer than the eviction time goes first.
    cache.new_context(newcomer, 1, [], [], True, EVICTION_MS // 2)
    late = EVICTION_MS + 10
    third = open_session(cache, [req("c", 0)], now=late, privileged=False)
    assert third and follower not in cache.sessions and newcomer in cache.sessions
    # Old (not stale) sessions may be evicted by a bigger one, not by a smaller one.
    cache2 = FetchSessionCache(max_sessions=1)
    small = open_session(cache2, [req("a", 0), req("a", 1)], now=0, privileged=False)
    cache2.new_context(small, 1, [], [], False, EVICTION_MS)  # used: not stale
    assert open_session(cache2, [req("b", 0)], now=EVICTION_MS + 1, privileged=False) == 0
    assert open_session(cache2, [req("b", i) for i in range(3)], now=EVICTION_MS + 1,
                        privileged=False) != 0


def test_the_fetcher_side_lists_changes_and_forgets_and_starts_over_after_an_error() -> None:
    h = FetchSessionHandler()
    a, b = ("t", 0), ("t", 1)
    assert h.build({a: (0, 5, 0, 100), b: (0, 7, 0, 100)}) == (0, INITIAL_EPOCH, {a: (0, 5, 0, 100), b: (0, 7, 0, 100)}, [])
    assert h.handle_response(ErrorCode.none, 99)
    assert h.build({a: (0, 6, 0, 100), b: (0, 7, 0, 100)}) == (99, 1, {a: (0, 6, 0, 100)}, [])
    assert h.handle_response(ErrorCode.none, 99)
    assert h.build({a: (0, 6, 0, 100)}) == (99, 2, {}, [b])
    assert not h.handle_response(ErrorCode.invalid_fetch_session_epoch, 0)
    # Full again, naming the old session so that the leader closes it.
    assert h.build({a: (0, 6, 0, 100)}) == (99, INITIAL_EPOCH, {a: (0, 6, 0, 100)}, [])
    # A leader that keeps no sessions: every request stays a full one.
    assert h.handle_response(ErrorCode.none, 0)
    assert h.build({a: (0, 6, 0, 100)})[:2] == (0, INITIAL_EPOCH)
    assert h.handle_response(ErrorCode.none, 0)
    assert h.build({a: (0, 6, 0, 100)})[:2] == (0, INITIAL_EPOCH)
    # A lost answer: reset, and the next full request closes the session it had.
    assert h.handle_response(ErrorCode.none, 7)
    h.build({a: (0, 7, 0, 100)})
    h.reset()
    assert h.build({a: (0, 7, 0, 100)}) == (7, INITIAL_EPOCH, {a: (0, 7, 0, 100)}, [])


# ------------------------------------------------------------ the two together

TOPICS = [("t", i) for i in range(4)]


class Leader:
    """A leader's partitions: a log end offset and a high watermark each."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd
        self.leo = {tp: 0 for tp in TOPICS}
        self.hw = {tp: 0 for tp in TOPICS}

    def step(self) -> None:
        for tp in TOPICS:
            if self.rnd.random() < 0.3:
                self.leo[tp] += self.rnd.randint(1, 3)
            if self.rnd.random() < 0.3:
                self.hw[tp] = self.rnd.randint(self.hw[tp], self.leo[tp])

    def read(self, r: FetchRequestPartition) -> ReadResult:
        tp = (r.topic, r.partition)
        return result(hw=self.hw[tp], data=self.leo[tp] - r.fetch_offset)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), steps=st.integers(1, 40))
def test_a_fetcher_and_a_leader_agree_on_what_is_fetched_and_the_high_watermarks(
        seed: int, steps: int) -> None:
    """Over random partition sets, appends, lost answers and restarted leaders: every
    request the leader reads covers exactly the partitions the fetcher wants, at its
    offsets, and the fetcher ends up knowing each partition's high watermark and data."""
    rnd = random.Random(seed)
    cache, handler, leader = FetchSessionCache(), FetchSessionHandler(), Leader(rnd)
    offset = {tp: 0 for tp in TOPICS}
    known_hw = {tp: -1 for tp in TOPICS}
    orphans = 0
    for _ in range(steps):
        leader.step()
        wanted_set = [tp for tp in TOPICS if rnd.random() < 0.8] or TOPICS[:1]
        wanted: dict[TopicPartition, PartitionRequest] = {tp: (0, offset[tp], 0, 100) for tp in wanted_set}
        session_id, epoch, listed, forgotten = handler.build(wanted)
        context = cache.new_context(session_id, epoch,
                                    [req(t, i, offset=o[1]) for (t, i), o in listed.items()],
                                    forgotten, True, 0)
        if context.error == ErrorCode.none:
            assert {(p.topic, p.partition): p.fetch_offset for p in context.partitions} == \
                {tp: offset[tp] for tp in wanted_set}
        answer = cache.respond(context, [leader.read(p) for p in context.partitions], 0)
        fate = rnd.random()
        if fate < 0.05:
            handler.reset()  # the answer was lost on the way
            orphans += answer.session_id != 0 and context.create  # a new id it never learnt
            continue
        if fate < 0.1:
            cache = FetchSessionCache()  # the leader restarted after answering
        if handler.handle_response(answer.error, answer.session_id):
            if fate < 0.15 and answer.partitions:
                # One answered partition changed while the fetch was out: the fetcher drops
                # its answer and starts over with a full fetch (ReplicaFetcherManager._fetch).
                for r, res in answer.partitions[1:]:
                    tp = (r.topic, r.partition)
                    offset[tp] = leader.leo[tp]
                    known_hw[tp] = res.high_watermark
                handler.reset()
                continue
            for r, res in answer.partitions:
                tp = (r.topic, r.partition)
                offset[tp] = leader.leo[tp]  # takes all it was sent
                known_hw[tp] = res.high_watermark
            # What an incremental answer leaves out, the fetcher knows already.
            assert {tp: (offset[tp], known_hw[tp]) for tp in wanted_set} == \
                {tp: (leader.leo[tp], leader.hw[tp]) for tp in wanted_set}
    # One last exchange with everything wanted settles what the fetcher knows.
    for _ in range(3):  # at most: a session error, then a full request
        wanted = {tp: (0, offset[tp], 0, 100) for tp in TOPICS}
        session_id, epoch, listed, forgotten = handler.build(wanted)
        context = cache.new_context(session_id, epoch,
                                    [req(t, i, offset=o[1]) for (t, i), o in listed.items()],
                                    forgotten, True, 0)
        answer = cache.respond(context, [leader.read(p) for p in context.partitions], 0)
        if handler.handle_response(answer.error, answer.session_id):
            for r, res in answer.partitions:
                tp = (r.topic, r.partition)
                offset[tp] = leader.leo[tp]
                known_hw[tp] = res.high_watermark
            break
    assert offset == leader.leo
    assert known_hw == leader.hw
    # Errors and lost answers leave no session behind (the next full request closes it)
    # but those opened by a full request whose answer was lost (left to eviction).
    assert len(cache.sessions) <= 1 + orphans
