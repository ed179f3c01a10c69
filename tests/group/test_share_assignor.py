"""The share groups' SimpleAssignor: every subscribed partition gets members, as many
per partition as Kafka's SimpleAssignor shares it, balanced, then sticky."""

from __future__ import annotations

import uuid
from collections import Counter

from hypothesis import example, given
from hypothesis import strategies as st

from dmq.group.share_assignor import MemberAssignment, assign, sharing

TOPICS = [uuid.UUID(int=i + 1) for i in range(4)]


def flat(assignment: MemberAssignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def owners(result: dict[str, MemberAssignment]) -> Counter[tuple[uuid.UUID, int]]:
    return Counter(tp for a in result.values() for tp in flat(a))


def test_kafkas_examples() -> None:
    t = TOPICS[0]
    three_on_one = assign({"a": [t], "b": [t], "c": [t]}, {t: [0]}, {})
    assert all(a == {t: frozenset({0})} for a in three_on_one.values())
    two_on_four = assign({"a": [t], "b": [t]}, {t: [0, 1, 2, 3]}, {})
    assert sorted(len(flat(a)) for a in two_on_four.values()) == [2, 2]
    assert flat(two_on_four["a"]) | flat(two_on_four["b"]) == {(t, p) for p in range(4)}
    three_on_two = assign({"a": [t], "b": [t], "c": [t]}, {t: [0, 1]}, {})
    assert sorted(len(flat(a)) for a in three_on_two.values()) == [1, 1, 2]
    assert set(owners(three_on_two).values()) == {2}


def test_no_partitions_or_no_members() -> None:
    t = TOPICS[0]
    assert assign({}, {t: [0]}, {}) == {}
    assert assign({"a": [t]}, {}, {}) == {"a": {}}
    assert assign({"a": []}, {t: [0]}, {}) == {"a": {}}


members_st = st.lists(st.sampled_from("abcdefghij"), min_size=1, max_size=10, unique=True)
counts_st = st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=4)


@st.composite
def homogeneous(draw: st.DrawFn) -> tuple[dict[str, list[uuid.UUID]], dict[uuid.UUID, list[int]],
                                          dict[str, MemberAssignment]]:
    members = draw(members_st)
    counts = draw(counts_st)
    topics = TOPICS[:len(counts)]
    partitions = {t: list(range(n)) for t, n in zip(topics, counts, strict=True)}
    previous = {m: {t: frozenset(draw(st.sets(st.integers(0, 9)))) for t in topics}
                for m in draw(st.lists(st.sampled_from("abcdefghijkl"), unique=True))}
    return {m: list(topics) for m in members}, partitions, previous


@given(homogeneous())
def test_homogeneous_sharing_and_balance(case: tuple[dict[str, list[uuid.UUID]], dict[uuid.UUID, list[int]],
                                                     dict[str, MemberAssignment]]) -> None:
    subscriptions, partitions, previous = case
    result = assign(subscriptions, partitions, previous)
    targets = {(t, p) for t, ps in partitions.items() for p in ps}
    per_partition = sharing(len(subscriptions), len(targets))
    assert set(result) == set(subscriptions)
    # Every partition is shared by exactly ceil(M / P) distinct members, and by nobody else.
    assert set(owners(result)) == targets
    assert set(owners(result).values()) == {per_partition}
    # Balance: member counts differ by at most one (and every member has something).
    sizes = [len(flat(a)) for a in result.values()]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    # Deterministic, and a balanced assignment given as the previous one is kept as it is.
    assert assign(subscriptions, partitions, previous) == result
    assert assign(subscriptions, partitions, result) == result


@given(homogeneous(), st.data())
def test_a_member_leaving_moves_only_its_partitions_when_nothing_is_shared(
        case: tuple[dict[str, list[uuid.UUID]], dict[uuid.UUID, list[int]], dict[str, MemberAssignment]],
        data: st.DataObject) -> None:
    subscriptions, partitions, _ = case
    targets = sum(len(ps) for ps in partitions.values())
    if len(subscriptions) < 2 or targets < len(subscriptions):
        return  # partitions shared by several members: balance may move more
    before = assign(subscriptions, partitions, {})
    leaving = data.draw(st.sampled_from(sorted(subscriptions)))
    staying = {m: ts for m, ts in subscriptions.items() if m != leaving}
    after = assign(staying, partitions, before)
    for member in staying:
        assert flat(before[member]) <= flat(after[member])  # stickiness: nothing taken away


@given(homogeneous(), st.data())
def test_a_member_joining_takes_partitions_only_from_others(
        case: tuple[dict[str, list[uuid.UUID]], dict[uuid.UUID, list[int]], dict[str, MemberAssignment]],
        data: st.DataObject) -> None:
    subscriptions, partitions, _ = case
    targets = sum(len(ps) for ps in partitions.values())
    if len(subscriptions) + 1 > targets:
        return
    before = assign(subscriptions, partitions, {})
    topics = next(iter(subscriptions.values()))
    after = assign({**subscriptions, "new": topics}, partitions, before)
    for member in subscriptions:
        assert flat(after[member]) <= flat(before[member])  # nobody gets a partition it did not have
    moved = sum(len(flat(before[m]) - flat(after[m])) for m in subscriptions)
    assert moved == len(flat(after["new"]))  # only what the new member needs moves


@given(st.dictionaries(st.sampled_from("abcdefgh"), st.sets(st.sampled_from(TOPICS), max_size=4), min_size=1),
       st.lists(st.integers(min_value=0, max_value=6), min_size=4, max_size=4))
@example({"a": {TOPICS[0], TOPICS[3]}, "b": set(TOPICS)}, [1, 0, 0, 1])
def test_heterogeneous_every_subscribed_partition_is_shared_per_topic(
        subscribed: dict[str, set[uuid.UUID]], counts: list[int]) -> None:
    partitions = {t: list(range(n)) for t, n in zip(TOPICS, counts, strict=True) if n}
    subscriptions = {m: sorted(ts) for m, ts in subscribed.items()}
    # As the group does (and Kafka): homogeneous by the topics subscribed to, those without
    # partitions included (found in CI: {a: t1 t4, b: t1..t4} with only t1 and t4 assignable).
    homogeneous_case = len({frozenset(ts) for ts in subscribed.values()}) == 1
    result = assign(subscriptions, partitions, {}, homogeneous_case)
    for topic, parts in partitions.items():
        subscribers = {m for m, ts in subscribed.items() if topic in ts}
        if not subscribers:
            assert all(topic not in a for a in result.values())
            continue
        got = Counter(p for m, a in result.items() for p in a.get(topic, ()))
        assert set(got) == set(parts)  # every partition of a subscribed topic has members
        if not homogeneous_case:
            assert set(got.values()) == {sharing(len(subscribers), len(parts))}
    for member, a in result.items():
        assert set(a) <= subscribed[member]  # only topics the member subscribes to
