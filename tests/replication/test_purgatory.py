"""DelayedOperationPurgatory: a waiter completes when its condition holds after a
``check_and_complete`` of a key it watches, or times out; nothing leaks."""

from __future__ import annotations

import asyncio

from dmq.replication.purgatory import DelayedOperationPurgatory


def test_satisfied_at_once_does_not_wait() -> None:
    async def scenario() -> None:
        p = DelayedOperationPurgatory("Produce")
        assert await p.wait_until(["a"], 10.0, lambda: True)
        assert p._watchers == {}

    asyncio.run(scenario())


def test_completes_on_check_of_a_watched_key_only_when_satisfied() -> None:
    async def scenario() -> None:
        p = DelayedOperationPurgatory("Fetch")
        state = {"hw": 0}
        waiter = asyncio.ensure_future(p.wait_until(["a", "b"], 10.0, lambda: state["hw"] >= 5))
        await asyncio.sleep(0)
        p.check_and_complete("a")  # checked, not yet satisfied: keeps waiting
        await asyncio.sleep(0)
        assert not waiter.done()
        state["hw"] = 5
        p.check_and_complete("other")  # a key it does not watch: not woken
        await asyncio.sleep(0.01)
        assert not waiter.done()
        p.check_and_complete("b")
        assert await asyncio.wait_for(waiter, 1.0) is True
        assert p._watchers == {}

    asyncio.run(scenario())


def test_times_out_false_and_forgets_the_waiter() -> None:
    async def scenario() -> None:
        p = DelayedOperationPurgatory("Produce")
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await p.wait_until(["a"], 0.05, lambda: False) is False
        assert 0.04 <= loop.time() - started < 1.0
        assert p._watchers == {}

    asyncio.run(scenario())


def test_many_waiters_on_one_key_each_see_their_own_condition() -> None:
    async def scenario() -> None:
        p = DelayedOperationPurgatory("Produce")
        hw = {"v": 0}
        waiters = [asyncio.ensure_future(p.wait_until(["k"], 5.0, lambda i=i: hw["v"] > i))
                   for i in range(10)]
        await asyncio.sleep(0)
        hw["v"] = 5
        p.check_and_complete("k")
        await asyncio.sleep(0.01)
        assert [w.done() for w in waiters] == [True] * 5 + [False] * 5
        hw["v"] = 10
        p.check_and_complete("k")
        assert all(await asyncio.gather(*waiters))
        assert p._watchers == {}

    asyncio.run(scenario())


def test_a_check_evaluates_each_waiter_once_in_place() -> None:
    """No wake-up and re-registration per check: one evaluation per check_and_complete."""
    async def scenario() -> None:
        p = DelayedOperationPurgatory("Produce")
        calls = {"n": 0}

        def never() -> bool:
            calls["n"] += 1
            return False

        waiter = asyncio.ensure_future(p.wait_until(["k"], 5.0, never))
        await asyncio.sleep(0)
        for _ in range(100):
            p.check_and_complete("k")
        assert calls["n"] == 101 and len(p._watchers["k"]) == 1
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert p._watchers == {}

    asyncio.run(scenario())


def test_a_driven_waiter_is_resumed_inside_check_and_complete() -> None:
    """A connection driving a request outside any task sets the operation's ``resume``:
    completing the operation runs the waiter on at once, before check_and_complete returns."""
    from dmq.replication.purgatory import DelayedOperation

    async def scenario() -> None:
        p = DelayedOperationPurgatory("Fetch")
        state = {"hw": 0}
        outcome: list[bool] = []

        async def request() -> None:
            outcome.append(await p.wait_until(["a"], 10.0, lambda: state["hw"] >= 1))

        coro = request()
        op = coro.send(None)
        assert isinstance(op, DelayedOperation)

        def resume() -> None:
            try:
                coro.send(None)
            except StopIteration:
                pass

        op.resume = resume
        p.check_and_complete("a")
        assert outcome == []  # not satisfied: still waiting
        state["hw"] = 1
        p.check_and_complete("a")
        assert outcome == [True]  # resumed within the call
        assert p._watchers == {}

    asyncio.run(scenario())
