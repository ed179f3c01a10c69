"""Eager requests (dmq/server/network.py): APIs in ``eager_api_keys`` run outside any task,
driven by their connection; one waiting on a purgatory's delayed operation is resumed by
whoever completes it, in the same turn of the loop. Answers stay in request order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from dmq.replication.purgatory import DelayedOperationPurgatory
from dmq.server.network import CLOSE, Listener

WAIT, TRIGGER, SLEEP, FAIL, IN_TASK = 0, 1, 2, 3, 50


def frame(api_key: int, body: bytes = b"") -> bytes:
    payload = api_key.to_bytes(2, "big") + body
    return len(payload).to_bytes(4, "big") + payload


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    size = int.from_bytes(await reader.readexactly(4), "big")
    return await reader.readexactly(size)


def answer(text: bytes) -> bytes:
    return len(text).to_bytes(4, "big") + text


class Scenario:
    """A listener whose dispatcher waits in a purgatory (WAIT), satisfies it (TRIGGER),
    sleeps (SLEEP), fails (FAIL), or needs a current task (IN_TASK: asyncio.timeout)."""

    def __init__(self) -> None:
        self.purgatory = DelayedOperationPurgatory("Test")
        self.ready = False
        self.tasks_seen: list[asyncio.Task[object] | None] = []
        self.answered_in_trigger: list[bool] = []
        self.in_trigger = False
        self.listener = Listener("127.0.0.1", 0, self.dispatch, 1 << 20,
                                 eager_api_keys=frozenset({WAIT, TRIGGER, SLEEP, FAIL}))

    async def dispatch(self, frame: bytes, peer: str, dispatched: Callable[[], None],
                       connection: int) -> object:
        api_key, body = int.from_bytes(frame[:2], "big"), frame[2:]
        self.tasks_seen.append(asyncio.current_task())
        if api_key == WAIT:
            dispatched()
            satisfied = await self.purgatory.wait_until(["k"], 10.0, lambda: self.ready)
            self.answered_in_trigger.append(self.in_trigger)
            return answer(b"waited:" + body + (b":ok" if satisfied else b":timeout"))
        if api_key == TRIGGER:
            self.ready = True
            self.in_trigger = True
            try:
                self.purgatory.check_and_complete("k")
            finally:
                self.in_trigger = False
            return answer(b"triggered:" + body)
        if api_key == SLEEP:
            await asyncio.sleep(0.01)
            return answer(b"slept:" + body)
        if api_key == FAIL:
            raise RuntimeError("handler bug")
        if api_key == IN_TASK:
            async with asyncio.timeout(5):
                await asyncio.sleep(0)
            return answer(b"in-task:" + body)
        return CLOSE


def run(test: Callable[[Scenario, str, int], object]) -> None:
    async def main() -> None:
        scenario = Scenario()
        host, port = await scenario.listener.start()
        try:
            await test(scenario, host, port)  # type: ignore[misc]
        finally:
            await scenario.listener.stop()

    asyncio.run(main())


def test_a_waiting_request_is_answered_by_the_request_that_satisfies_it_in_order() -> None:
    async def test(s: Scenario, host: str, port: int) -> None:
        r1, w1 = await asyncio.open_connection(host, port)
        r2, w2 = await asyncio.open_connection(host, port)
        # One connection: a request that waits, then one that needs nothing: its answer
        # waits for the first one's (request order).
        w1.write(frame(WAIT, b"a") + frame(SLEEP, b"b"))
        await asyncio.sleep(0.1)
        assert not r1._buffer  # type: ignore[attr-defined] - nothing answered yet
        w2.write(frame(TRIGGER, b"c"))
        assert await asyncio.wait_for(read_answer(r2), 5) == b"triggered:c"
        assert await asyncio.wait_for(read_answer(r1), 5) == b"waited:a:ok"
        assert await asyncio.wait_for(read_answer(r1), 5) == b"slept:b"
        # Resumed inside check_and_complete, not by a task woken later; no task at all.
        assert s.answered_in_trigger == [True]
        assert s.tasks_seen == [None, None, None]
        for w in (w1, w2):
            w.close()

    run(test)


def test_a_waiting_request_times_out_through_its_timer() -> None:
    async def test(s: Scenario, host: str, port: int) -> None:
        s.purgatory = DelayedOperationPurgatory("Short")
        original = s.purgatory.wait_until

        async def short(keys: list[str], timeout_s: float, cond: Callable[[], bool]) -> bool:
            return await original(keys, 0.05, cond)

        s.purgatory.wait_until = short  # type: ignore[method-assign]
        r, w = await asyncio.open_connection(host, port)
        w.write(frame(WAIT, b"x"))
        assert await asyncio.wait_for(read_answer(r), 5) == b"waited:x:timeout"
        w.close()

    run(test)


def test_other_apis_run_in_a_task_and_a_failing_handler_closes_the_connection() -> None:
    async def test(s: Scenario, host: str, port: int) -> None:
        r, w = await asyncio.open_connection(host, port)
        w.write(frame(IN_TASK, b"t"))
        assert await asyncio.wait_for(read_answer(r), 5) == b"in-task:t"
        assert s.tasks_seen[-1] is not None
        w.write(frame(FAIL))
        assert await asyncio.wait_for(r.read(), 5) == b""  # closed, no answer
        w.close()

    run(test)


def test_many_pipelined_eager_requests_are_answered_in_order() -> None:
    async def test(s: Scenario, host: str, port: int) -> None:
        r, w = await asyncio.open_connection(host, port)
        n = 500  # past MAX_IN_FLIGHT and MAX_QUEUED_FRAMES
        w.write(b"".join(frame(SLEEP if i % 7 == 0 else TRIGGER, b"%d" % i) for i in range(n)))
        for i in range(n):
            expected = (b"slept:" if i % 7 == 0 else b"triggered:") + b"%d" % i
            assert await asyncio.wait_for(read_answer(r), 5) == expected
        w.close()

    run(test)
