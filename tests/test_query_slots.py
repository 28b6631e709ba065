"""The query slots and their bounded queue (worker_service/query_slots.py): pure asyncio,
no processes (tests/test_query_timeout.py has them through a real worker)."""

from __future__ import annotations

import asyncio
import time

import pytest

from txinfra.query_limits import busy_message
from worker_service.query_slots import QuerySlots, TooManyQueries

FAR = 60.0  # a deadline that does not matter


def later(seconds: float = FAR) -> float:
    return time.monotonic() + seconds


async def settle() -> None:
    """Let every task woken so far run up to its next wait (asyncio.wait takes a few
    turns of the loop)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def started(coro) -> asyncio.Task:
    """``coro`` as a task that has run up to its first wait."""
    task = asyncio.ensure_future(coro)
    await settle()
    return task


def test_queries_beyond_the_limit_wait_in_order_and_the_full_queue_refuses():
    async def run() -> None:
        slots = QuerySlots(limit=2, depth=2, wait_s=FAR)
        assert await slots.acquire(later()) == "run"
        assert await slots.acquire(later()) == "run"
        third = await started(slots.acquire(later()))
        fourth = await started(slots.acquire(later()))
        assert (slots.running, slots.waiting) == (2, 2)
        with pytest.raises(TooManyQueries) as full:
            await slots.acquire(later())
        assert str(full.value) == busy_message(2, 2) == (
            "this worker is already evaluating its maximum of 2 queries at once "
            "(max-concurrent-queries=2) and 2 more wait in its queue "
            "(query-queue-depth=2): retry later")
        # A finished query hands its slot to the first waiter, not to a newcomer.
        slots.release()
        await settle()
        assert third.done() and third.result() == "run" and not fourth.done()
        assert (slots.running, slots.waiting) == (2, 1)
        newcomer = await started(slots.acquire(later()))
        slots.release()
        await settle()
        assert fourth.result() == "run" and not newcomer.done()
        slots.release()  # third's
        assert await newcomer == "run"
        slots.release()  # fourth's
        slots.release()
        assert (slots.running, slots.waiting, slots.queued, slots.refused) == (0, 0, 3, 1)

    asyncio.run(run())


def test_a_wait_that_expires_is_refused_and_the_deadline_is_a_timeout():
    async def run() -> None:
        slots = QuerySlots(limit=1, depth=4, wait_s=0.05)
        assert await slots.acquire(later()) == "run"
        t0 = time.monotonic()
        with pytest.raises(TooManyQueries) as waited:
            await slots.acquire(later())
        assert 0.05 <= time.monotonic() - t0 < 1.0
        assert "waited 0.05 s in its queue without getting a turn " \
               "(query-queue-wait-s=0.05)" in str(waited.value)
        # The query's own deadline before the queue's wait: its timeout, not "busy".
        slots.wait_s = FAR
        assert await slots.acquire(later(0.05)) == "deadline"
        assert slots.waiting == 0 and slots.running == 1
        slots.release()
        assert slots.running == 0

    asyncio.run(run())


def test_a_client_gone_or_cancelled_while_waiting_takes_no_slot():
    async def run() -> None:
        slots = QuerySlots(limit=1, depth=4, wait_s=FAR)
        assert await slots.acquire(later()) == "run"
        gone = asyncio.get_running_loop().create_future()
        leaving = await started(slots.acquire(later(), gone))
        cancelled = await started(slots.acquire(later()))
        staying = await started(slots.acquire(later()))
        gone.set_result(None)
        assert await leaving == "gone"
        cancelled.cancel()
        await settle()
        assert slots.waiting == 1
        slots.release()
        assert await staying == "run"
        slots.release()
        assert (slots.running, slots.waiting) == (0, 0)
        # A waiter handed the slot at the instant it is cancelled passes it on.
        assert await slots.acquire(later()) == "run"
        first = await started(slots.acquire(later()))
        second = await started(slots.acquire(later()))
        slots.release()  # the slot goes to ``first``...
        first.cancel()  # ...which is cancelled before it runs again
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await second == "run"
        slots.release()
        assert (slots.running, slots.waiting) == (0, 0)

    asyncio.run(run())


def test_without_a_queue_the_query_beyond_the_limit_is_refused_at_once():
    async def run() -> None:
        slots = QuerySlots(limit=1, depth=0, wait_s=FAR)
        assert await slots.acquire(later()) == "run"
        with pytest.raises(TooManyQueries) as refused:
            await slots.acquire(later())
        assert str(refused.value) == (
            "this worker is already evaluating its maximum of 1 queries at once "
            "(max-concurrent-queries=1): retry later")

    asyncio.run(run())


@pytest.mark.parametrize("limit, depth, wait_s", [(0, 1, 1.0), (1, -1, 1.0),
                                                   (1, 1, -1.0), (1, 1, float("nan"))])
def test_bad_sizes_are_refused(limit, depth, wait_s):
    with pytest.raises(ValueError):
        QuerySlots(limit, depth, wait_s)
