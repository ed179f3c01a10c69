"""LoopSharePacer and CpuIdleMeter (dmq.server.pacing): the key indexer's share of the
event loop shrinks while the broker or the machine is busy and grows back when not;
the machine's idle share comes from /proc/stat deltas."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dmq.server.pacing import MIN_PAUSE_S, CpuIdleMeter, LoopSharePacer


def test_the_pause_gives_the_task_its_share_of_the_time() -> None:
    pacer = LoopSharePacer(0.5)
    assert pacer.pause_after(0.002) == pytest.approx(0.002)  # half the loop
    pacer.share = 0.05
    assert pacer.pause_after(0.002) == pytest.approx(0.038)
    assert pacer.pause_after(0.0) == MIN_PAUSE_S


def test_the_broker_busy_halves_the_share_down_to_a_tenth_then_idle_grows_it_back() -> None:
    pacer = LoopSharePacer(0.5)
    for _ in range(10):
        pacer.observe(paused_s=0.01, own_cpu_s=0.008, machine_idle=0.9)
    assert pacer.share == pytest.approx(0.05)
    pacer.observe(paused_s=0.01, own_cpu_s=0.001, machine_idle=0.9)
    assert pacer.share == pytest.approx(0.0625)
    for _ in range(30):
        pacer.observe(paused_s=0.01, own_cpu_s=0.001, machine_idle=None)
    assert pacer.share == pytest.approx(0.5)


def test_a_busy_machine_halves_the_share_while_the_broker_itself_is_idle() -> None:
    """A client on the same two cores: the broker uses little CPU, the machine none spare.
    Before the machine was looked at, the indexer kept half the loop and doubled the
    broker's CPU during a 100 B produce benchmark."""
    pacer = LoopSharePacer(0.5)
    pacer.observe(paused_s=0.01, own_cpu_s=0.002, machine_idle=0.05)
    assert pacer.share == pytest.approx(0.25)
    pacer.observe(paused_s=0.01, own_cpu_s=0.002, machine_idle=0.5)
    assert pacer.share == pytest.approx(0.3125)


@given(st.floats(0.01, 1.0), st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0),
                                                  st.one_of(st.none(), st.floats(0.0, 1.0))), max_size=50))
def test_the_share_stays_between_a_tenth_of_the_most_and_the_most(
        most: float, pauses: list[tuple[float, float, float | None]]) -> None:
    pacer = LoopSharePacer(most)
    for paused, cpu, idle in pauses:
        pacer.observe(paused, cpu, idle)
        assert most / 10 - 1e-12 <= pacer.share <= most + 1e-12
        assert pacer.pause_after(0.002) >= MIN_PAUSE_S


def test_a_pacer_needs_a_share() -> None:
    with pytest.raises(ValueError):
        LoopSharePacer(0.0)


def test_the_idle_share_is_idle_and_iowait_over_all_time_between_samples() -> None:
    lines = iter([
        "cpu  100 0 100 700 100 0 0 0 0 0",
        "cpu  150 0 150 760 120 0 0 0 0 0",  # +100 busy, +60 idle, +20 iowait
    ])
    meter = CpuIdleMeter(lambda: next(lines))
    assert meter.sample() is None  # nothing to compare with yet
    assert meter.sample() == pytest.approx(80 / 180)


def test_without_proc_stat_the_meter_says_nothing() -> None:
    def missing() -> str:
        raise FileNotFoundError("/proc/stat")

    meter = CpuIdleMeter(missing)
    assert meter.sample() is None and meter.sample() is None


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="Linux only")
def test_the_real_machine_gives_a_share_between_0_and_1() -> None:
    meter = CpuIdleMeter()
    meter.sample()
    time.sleep(0.1)  # some clock ticks pass, on every CPU
    share = meter.sample()
    assert share is not None and 0.0 <= share <= 1.0
