"""A leader cut off from its peers and its clients, but not from ZooKeeper (issue 9).

Its ZooKeeper session stays alive, so the controller never sees it go; in
Kafka's ZooKeeper mode it shrinks the ISR to itself and its partition takes no
acks=all write until the cut heals, although the other two replicas, a
majority, are fine. dmq's leader resigns once its followers have been silent
for longer than a session: the controller elects one of them, and writes go
on during the cut. Then every check of a chaos run: nothing acknowledged lost,
no duplicates, replicas identical, a full ISR soon after healing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.netns import available as netns_unavailable
from support.zookeeper import available as zookeeper_available

from chaos.harness import ChaosConfig, ChaosRun, Fault

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.run_alone,  # its write gap is bounded: under parallel runs, nothing runs beside it
    pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable())),
    pytest.mark.skipif(not zookeeper_available(), reason="Debian's zookeeper package is not installed"),
]

CUT_S = 25.0


def test_a_leader_cut_off_from_peers_and_clients_is_replaced_during_the_cut(tmp_path: Path) -> None:
    config = ChaosConfig(seed=1, duration_s=CUT_S + 10, partitions=1, producers=1, rate=100,
                         session_timeout_ms=4000, base=tmp_path, check_availability=True)
    run = ChaosRun(config)
    report = run.run([Fault(5.0, "cut_peers", CUT_S, leader_of=0)])
    print(report.to_json())
    assert report.faults and "skipped" not in report.faults[0], report.faults
    assert report.acknowledged > 1000, "the workload must have made progress"
    # 2 x session timeout + 5 s: without a new leader the gap lasts the whole 25 s cut.
    assert report.gap_bound_s == 13
    assert not report.failures(), "\n".join(report.failures())
