"""ShareSessionCache: Kafka's share-session epoch table, entry merging, capacity, connections."""

from __future__ import annotations

import uuid

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode

from dmq.share.partition import AckBatch
from dmq.share.session import (
    INT32_MAX,
    PartitionEntry,
    ShareSessionCache,
    merge_entries,
    next_epoch,
)

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
ACK = (AckBatch(0, 4, (1,)),)


def add(topic: uuid.UUID, partition: int, acks: tuple[AckBatch, ...] = ()) -> PartitionEntry:
    return PartitionEntry(topic, partition, acks)


def test_next_epoch_wraps_to_one_and_final_stays_final() -> None:
    assert next_epoch(1) == 2
    assert next_epoch(INT32_MAX) == 1
    assert next_epoch(-1) == -1


def test_duplicate_entries_are_merged_with_their_acks_in_offset_order() -> None:
    merged = merge_entries([add(T1, 0), add(T2, 1), add(T1, 0, (AckBatch(5, 6, (1,)),)),
                            add(T1, 0, (AckBatch(0, 1, (2,)),))])
    assert list(merged) == [(T1, 0), (T2, 1)]
    assert merged[(T1, 0)] == (AckBatch(0, 1, (2,)), AckBatch(5, 6, (1,)))
    assert merged[(T2, 1)] == ()


def test_full_fetch_creates_a_session_with_epoch_one() -> None:
    cache = ShareSessionCache()
    r = cache.share_fetch("g", "m", 0, [add(T1, 0), add(T1, 1), add(T1, 0)], [], "c1")
    assert r.error == ErrorCode.none and r.full and not r.final
    assert r.fetch == ((T1, 0), (T1, 1))
    assert r.session is not None and r.session.epoch == 1
    assert cache.get("g", "m") is r.session


def test_full_fetch_with_acks_is_invalid_and_keeps_the_old_session() -> None:
    cache = ShareSessionCache()
    old = cache.share_fetch("g", "m", 0, [add(T1, 0)], [], "c").session
    r = cache.share_fetch("g", "m", 0, [add(T1, 0, ACK)], [], "c")
    assert r.error == ErrorCode.invalid_request
    assert cache.get("g", "m") is old


def test_full_fetch_replaces_an_existing_session_and_returns_it() -> None:
    cache = ShareSessionCache()
    old = cache.share_fetch("g", "m", 0, [add(T1, 0)], [], "c").session
    r = cache.share_fetch("g", "m", 0, [add(T2, 0)], [], "c2")
    assert r.replaced is old
    assert cache.get("g", "m") is r.session and r.fetch == ((T2, 0),)
    assert cache.connection_closed("c") == []
    assert cache.connection_closed("c2") == [r.session]


def test_incremental_fetch_adds_forgets_and_bumps_the_epoch() -> None:
    cache = ShareSessionCache()
    cache.share_fetch("g", "m", 0, [add(T1, 0), add(T1, 1)], [], "c")
    r = cache.share_fetch("g", "m", 1, [add(T2, 0), add(T1, 0, ACK)], [(T1, 1)], "c")
    assert r.error == ErrorCode.none and not r.full
    assert r.fetch == ((T1, 0), (T2, 0))
    assert r.acks == {(T1, 0): ACK}
    assert r.session is not None and r.session.epoch == 2


def test_epoch_errors() -> None:
    cache = ShareSessionCache()
    assert cache.share_fetch("g", "m", 1, [], [], "c").error == ErrorCode.share_session_not_found
    assert cache.share_fetch("g", "m", -1, [], [], "c").error == ErrorCode.share_session_not_found
    assert cache.share_acknowledge("g", "m", 3, [], "c").error == ErrorCode.share_session_not_found
    assert cache.share_acknowledge("g", "m", -1, [], "c").error == ErrorCode.share_session_not_found
    assert cache.share_acknowledge("g", "m", 0, [], "c").error == ErrorCode.invalid_share_session_epoch
    cache.share_fetch("g", "m", 0, [add(T1, 0)], [], "c")
    assert cache.share_fetch("g", "m", 2, [], [], "c").error == ErrorCode.invalid_share_session_epoch
    assert cache.share_acknowledge("g", "m", 2, [], "c").error == ErrorCode.invalid_share_session_epoch
    assert cache.share_acknowledge("g", "m", 0, [], "c").error == ErrorCode.invalid_share_session_epoch
    session = cache.get("g", "m")
    assert session is not None and session.epoch == 1  # the errors changed nothing


def test_acknowledge_bumps_the_epoch_and_wraps() -> None:
    cache = ShareSessionCache()
    session = cache.share_fetch("g", "m", 0, [add(T1, 0)], [], "c").session
    assert session is not None
    session.epoch = INT32_MAX
    r = cache.share_acknowledge("g", "m", INT32_MAX, [add(T1, 0, ACK)], "c")
    assert r.error == ErrorCode.none and r.acks == {(T1, 0): ACK} and r.fetch == ()
    assert session.epoch == 1


def test_final_fetch_and_acknowledge() -> None:
    cache = ShareSessionCache()
    cache.share_fetch("g", "m", 0, [add(T1, 0)], [], "c")
    assert cache.share_fetch("g", "m", -1, [add(T2, 0)], [], "c").error == ErrorCode.invalid_request
    assert cache.share_fetch("g", "m", -1, [], [(T1, 0)], "c").error == ErrorCode.invalid_request
    r = cache.share_fetch("g", "m", -1, [add(T1, 0, ACK)], [], "c")
    assert r.error == ErrorCode.none and r.final and r.fetch == () and r.acks == {(T1, 0): ACK}
    assert r.session is not None and cache.close(r.session)
    assert cache.get("g", "m") is None and not cache.close(r.session)
    cache.share_fetch("g", "m", 0, [add(T1, 0)], [], "c")
    r = cache.share_acknowledge("g", "m", -1, [add(T1, 0, ACK)], "c")  # any epoch-less final
    assert r.final and r.error == ErrorCode.none


def test_capacity() -> None:
    cache = ShareSessionCache(max_sessions=2)
    cache.share_fetch("g", "a", 0, [], [], "c")
    cache.share_fetch("g", "b", 0, [], [], "c")
    assert cache.share_fetch("g", "x", 0, [], [], "c").error == ErrorCode.share_session_limit_reached
    assert cache.share_fetch("g", "a", 0, [], [], "c").error == ErrorCode.none  # a replacement fits
    assert len(cache) == 2


def test_connection_closed_returns_the_sessions_last_used_on_it() -> None:
    cache = ShareSessionCache()
    cache.share_fetch("g", "a", 0, [], [], "c1")
    cache.share_fetch("g", "b", 0, [], [], "c1")
    cache.share_acknowledge("g", "b", 1, [], "c2")  # b moved to c2
    closed = cache.connection_closed("c1")
    assert [s.member_id for s in closed] == ["a"]
    assert cache.get("g", "a") is None and cache.get("g", "b") is not None
    assert cache.connection_closed("c1") == []


MEMBERS = st.sampled_from(["a", "b", "c"])
CONNS = st.sampled_from(["c1", "c2"])
ENTRIES = st.lists(st.builds(PartitionEntry, st.sampled_from([T1, T2]), st.integers(0, 2),
                             st.sampled_from([(), ACK])), max_size=4)


class EpochMachine(RuleBasedStateMachine):
    """A model of the table: expected epoch per member (None: no session)."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = ShareSessionCache(max_sessions=2)
        self.model: dict[str, int] = {}
        self.conn: dict[str, str] = {}

    def _epoch(self, member: str, choice: int) -> int:
        current = self.model.get(member, 1)
        return [0, -1, current, current + 1, INT32_MAX][choice]

    @rule(member=MEMBERS, choice=st.integers(0, 4), entries=ENTRIES, conn=CONNS)
    def fetch(self, member: str, choice: int, entries: list[PartitionEntry], conn: str) -> None:
        epoch = self._epoch(member, choice)
        has_acks = any(e.acks for e in entries)
        r = self.cache.share_fetch("g", member, epoch, entries, [], conn)
        if epoch == 0:
            if has_acks:
                assert r.error == ErrorCode.invalid_request
            elif member not in self.model and len(self.model) >= 2:
                assert r.error == ErrorCode.share_session_limit_reached
            else:
                assert r.error == ErrorCode.none and r.full
                self.model[member] = 1
                self.conn[member] = conn
        elif member not in self.model:
            assert r.error == ErrorCode.share_session_not_found
        elif epoch == -1:
            session = self.cache.get("g", member)
            assert session is not None
            if any((e.topic_id, e.partition) not in session.partitions for e in entries):
                assert r.error == ErrorCode.invalid_request
            else:
                assert r.error == ErrorCode.none and r.final
                assert r.session is not None and self.cache.close(r.session)
                del self.model[member]
                del self.conn[member]
        elif epoch != self.model[member]:
            assert r.error == ErrorCode.invalid_share_session_epoch
        else:
            assert r.error == ErrorCode.none
            self.model[member] = next_epoch(epoch)
            self.conn[member] = conn

    @rule(member=MEMBERS, choice=st.integers(0, 4), entries=ENTRIES, conn=CONNS)
    def acknowledge(self, member: str, choice: int, entries: list[PartitionEntry], conn: str) -> None:
        epoch = self._epoch(member, choice)
        r = self.cache.share_acknowledge("g", member, epoch, entries, conn)
        if epoch == 0:
            assert r.error == ErrorCode.invalid_share_session_epoch
        elif member not in self.model:
            assert r.error == ErrorCode.share_session_not_found
        elif epoch == -1:
            assert r.error == ErrorCode.none and r.final
            assert r.session is not None and self.cache.close(r.session)
            del self.model[member]
            del self.conn[member]
        elif epoch != self.model[member]:
            assert r.error == ErrorCode.invalid_share_session_epoch
        else:
            assert r.error == ErrorCode.none and r.fetch == ()
            self.model[member] = next_epoch(epoch)
            self.conn[member] = conn

    @rule(member=MEMBERS)
    def near_wrap(self, member: str) -> None:
        session = self.cache.get("g", member)
        if session is not None:
            session.epoch = self.model[member] = INT32_MAX

    @rule(conn=CONNS)
    def disconnect(self, conn: str) -> None:
        closed = {s.member_id for s in self.cache.connection_closed(conn)}
        assert closed == {m for m, c in self.conn.items() if c == conn}
        for m in closed:
            del self.model[m]
            del self.conn[m]

    @invariant()
    def matches_model(self) -> None:
        assert {s.member_id: s.epoch for s in self.cache.sessions()} == self.model
        assert all(1 <= e <= INT32_MAX for e in self.model.values())


TestEpochMachine = EpochMachine.TestCase
TestEpochMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
