"""Replica assignment (no ZooKeeper needed): even spread, and rack awareness."""

from __future__ import annotations

from collections import Counter

from dmq.cluster.zookeeper import assign_replicas


def test_leaders_and_replicas_spread_evenly() -> None:
    out = assign_replicas([1, 2, 3], 6, 3)
    assert all(len(set(r)) == 3 for r in out.values())
    assert Counter(r[0] for r in out.values()) == {1: 2, 2: 2, 3: 2}


def test_rack_aware_assignment_puts_replicas_on_different_racks() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    out = assign_replicas(list(racks), 12, 3, racks)
    for replicas in out.values():
        assert len({racks[b] for b in replicas}) == 3, replicas
    assert Counter(r[0] for r in out.values()) == {b: 2 for b in racks}
