from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from dmq.group import records as rec
from dmq.group.coordinator import GroupConfig, GroupCoordinator
from dmq.group.metadata import GroupMetadata, GroupState, IllegalStateTransition


class MemoryLog:
    """The coordinator's GroupLog kept in a list, per partition."""

    def __init__(self) -> None:
        self.records: dict[int, list[tuple[bytes, bytes | None]]] = {}

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        self.records.setdefault(partition, []).extend(records)
        return ErrorCode.none

    def read(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        yield from self.records.get(partition, [])


def coordinator(log: MemoryLog, **kw: int) -> GroupCoordinator:
    config = GroupConfig(num_partitions=5, initial_rebalance_delay_ms=0, **kw)
    return GroupCoordinator(config, log, lambda t, p: t == "t" and p < 4)


def test_partition_for_matches_kafka() -> None:
    # Values from Java's String.hashCode, as Kafka's GroupMetadataManager.partitionFor uses.
    assert rec.java_string_hash("zz") == 3904
    assert rec.partition_for("test-group", 50) == 12
    assert rec.partition_for("my-app", 50) == 48
    assert rec.partition_for("Ünïcode-grüppe", 50) == 33


def test_transition_table_rejects_illegal_moves() -> None:
    g = GroupMetadata("g")
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.STABLE)
    g.transition_to(GroupState.PREPARING_REBALANCE)
    g.transition_to(GroupState.COMPLETING_REBALANCE)
    g.transition_to(GroupState.STABLE)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.EMPTY)
    g.transition_to(GroupState.DEAD)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.PREPARING_REBALANCE)


def test_state_is_reloaded_by_replaying_records() -> None:
    async def scenario() -> None:
        log = MemoryLog()
        c = coordinator(log)
        joined = await c.join_group("g", "", "inst", "client", "host", 10000, 10000, "consumer",
                                    [("range", b"\x00\x01")], require_known_member=True)
        assert joined.error == ErrorCode.none and joined.generation == 1
        synced = await c.sync_group("g", 1, joined.member_id, "inst", "consumer", "range",
                                    {joined.member_id: b"assignment"})
        assert synced.error == ErrorCode.none and synced.assignment == b"assignment"
        assert c.commit_offsets("g", 1, joined.member_id, "inst", [("t", 0, 42, 3, "m")]) == [ErrorCode.none]
        assert c.commit_offsets("simple", -1, "", None, [("t", 1, 7, -1, None), ("x", 0, 1, -1, None)]) == \
            [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
        reloaded = coordinator(log)
        for p in range(5):
            reloaded.load_partition(p)
        g = reloaded.groups["g"]
        assert g.state == GroupState.STABLE and g.generation == 1 and g.protocol == "range"
        assert g.static_members == {"inst": joined.member_id}
        assert g.members[joined.member_id].assignment == b"assignment"
        assert reloaded.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 42  # type: ignore[union-attr]
        assert reloaded.fetch_offsets("simple", None)[1][("t", 1)].offset == 7  # type: ignore[union-attr]
        for group in (c, reloaded):
            for m in group.groups["g"].members.values():
                if m.heartbeat_timer is not None:
                    m.heartbeat_timer.cancel()

    asyncio.run(scenario())


def test_offsets_of_empty_groups_expire() -> None:
    async def scenario() -> None:
        log = MemoryLog()
        c = coordinator(log, offsets_retention_ms=60_000)
        assert c.commit_offsets("old", -1, "", None, [("t", 0, 5, -1, None)]) == [ErrorCode.none]
        group = c.groups["old"]
        commit_ts = group.offsets[("t", 0)].commit_timestamp
        assert c.expire_offsets(now=commit_ts + 30_000) == 0
        assert c.expire_offsets(now=commit_ts + 61_000) == 2  # the offset and then the group
        assert "old" not in c.groups
        assert c.fetch_offsets("old", [("t", 0)])[1][("t", 0)] is None
        reloaded = coordinator(log)
        reloaded.load_partition(rec.partition_for("old", 5))
        assert "old" not in reloaded.groups  # the tombstones replay too

    asyncio.run(scenario())


def test_delete_groups_and_offsets() -> None:
    async def scenario() -> None:
        log = MemoryLog()
        c = coordinator(log)
        c.commit_offsets("d", -1, "", None, [("t", 0, 1, -1, None), ("t", 1, 2, -1, None)])
        assert c.delete_offsets("d", [("t", 0)]) == (ErrorCode.none, {("t", 0): ErrorCode.none})
        assert set(c.fetch_offsets("d", None)[1]) == {("t", 1)}
        assert c.delete_groups(["d", "missing"]) == {"d": ErrorCode.none, "missing": ErrorCode.group_id_not_found}
        assert c.delete_offsets("d", [("t", 1)])[0] == ErrorCode.group_id_not_found

    asyncio.run(scenario())


def test_protocol_every_member_supports_is_chosen_and_laggards_are_removed() -> None:
    async def scenario() -> None:
        c = GroupCoordinator(GroupConfig(num_partitions=5, initial_rebalance_delay_ms=0,
                                         min_session_timeout_ms=100), MemoryLog(), lambda t, p: True)
        first = await c.join_group("p", "", "a", "c", "h", 5000, 300, "consumer",
                                   [("range", b""), ("roundrobin", b"")], require_known_member=False)
        assert first.protocol == "range"
        second_task = asyncio.create_task(c.join_group(
            "p", "", "b", "c", "h", 5000, 300, "consumer", [("roundrobin", b""), ("sticky", b"")],
            require_known_member=False))
        await asyncio.sleep(0)
        # The first member rejoins; both support only roundrobin in common.
        rejoin = await c.join_group("p", first.member_id, "a", "c", "h", 5000, 300, "consumer",
                                    [("range", b""), ("roundrobin", b"")], require_known_member=False)
        second = await second_task
        assert rejoin.protocol == second.protocol == "roundrobin" and rejoin.generation == 2
        assert rejoin.leader == first.member_id and len(rejoin.members) == 2
        sync_b = asyncio.create_task(c.sync_group("p", 2, second.member_id, "b", None, None, {}))
        await c.sync_group("p", 2, first.member_id, "a", None, None, {first.member_id: b"1", second.member_id: b"2"})
        assert (await sync_b).assignment == b"2"
        # The leader rejoins; the other member never does and is removed after the
        # rebalance timeout (300 ms), then the group moves on without it.
        loop = asyncio.get_running_loop()
        started = loop.time()
        again = await c.join_group("p", first.member_id, "a", "c", "h", 5000, 300, "consumer",
                                   [("range", b""), ("roundrobin", b"")], require_known_member=False)
        assert again.error == ErrorCode.none and again.generation == 3
        assert 0.25 < loop.time() - started < 2
        assert list(c.groups["p"].members) == [first.member_id]
        assert again.protocol == "range"  # alone, its own first choice wins
        # A member whose protocols share nothing with the group is refused.
        odd = await c.join_group("p", "", "z", "c", "h", 5000, 300, "consumer", [("sticky", b"")],
                                 require_known_member=False)
        assert odd.error == ErrorCode.inconsistent_group_protocol
        for m in c.groups["p"].members.values():
            if m.heartbeat_timer is not None:
                m.heartbeat_timer.cancel()

    asyncio.run(scenario())
