"""How many queries a worker evaluates in query processes at once, and the bounded queue
of those that wait for one (worker.properties ``max-concurrent-queries``,
``query-queue-depth``, ``query-queue-wait-s``; worker_service/query_process.py runs them).

A query that needs a query process takes a slot. With every slot taken it waits in a FIFO
queue, at most ``depth`` deep, for at most ``wait_s`` (and never past its own deadline: the
time it waits counts against its timeout, which its master waits for with a margin). A
finished query hands its slot to the first waiter, so a waiter is never overtaken by a
query that arrived after it. A query is refused (503 "busy", which a master sends to
another worker) only when the queue is full or its wait expired: a client with a pool of
connections gets answers, in turn, rather than refusals.

Why a limit at all: each query process keeps a core busy; beyond the cores more of them
only share the cores (each query takes longer, none finishes sooner) while every one of
them holds its memory, and a worker must keep some CPU for its writes and point reads.

Event-loop code: no threads, no IO.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Literal

from txinfra import query_limits

# Defaults of the queue (worker.properties): deep enough for several clients' pools of
# connections on one worker; a wait long enough for dozens of engine-bound queries ahead
# (~50-200 ms each here) and short against the default query timeout (300 s).
DEFAULT_QUEUE_DEPTH = 64
DEFAULT_QUEUE_WAIT_S = 30.0

Turn = Literal["run", "gone", "deadline"]


class TooManyQueries(Exception):
    """Refused: every slot taken and the queue full, or the wait for a slot expired."""

    def __init__(self, limit: int, depth: int, waited_s: float | None) -> None:
        self.limit, self.depth, self.waited_s = limit, depth, waited_s
        super().__init__(query_limits.busy_message(limit, depth, waited_s))


class QuerySlots:
    """``limit`` slots and a FIFO queue of at most ``depth`` waiters (module docstring)."""

    def __init__(self, limit: int, depth: int = DEFAULT_QUEUE_DEPTH,
                 wait_s: float = DEFAULT_QUEUE_WAIT_S) -> None:
        if limit < 1 or depth < 0 or not wait_s >= 0:
            raise ValueError(f"query slots: limit {limit} (>= 1), depth {depth} (>= 0), "
                             f"wait {wait_s} s (>= 0)")
        self.limit, self.depth, self.wait_s = limit, depth, wait_s
        self._running = 0
        self._queue: deque[asyncio.Future] = deque()
        self.queued = 0  # queries that waited for a slot
        self.refused = 0

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return len(self._queue)

    async def acquire(self, deadline: float, gone: asyncio.Future | None = None) -> Turn:
        """Take a slot, waiting in the queue if none is free: "run" (the slot is the
        caller's until ``release``), "gone" (``gone`` completed first: the client left) or
        "deadline" (the query's own ``deadline``, time.monotonic(), passed first);
        TooManyQueries when the queue is full or the wait expired."""
        if self._running < self.limit and not self._queue:
            self._running += 1
            return "run"
        if len(self._queue) >= self.depth:
            self.refused += 1
            raise TooManyQueries(self.limit, self.depth, None)
        turn = asyncio.get_running_loop().create_future()
        self._queue.append(turn)
        self.queued += 1
        left = deadline - time.monotonic()
        try:
            await asyncio.wait({turn} if gone is None else {turn, gone},
                               timeout=max(0.0, min(self.wait_s, left)),
                               return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled while waiting
            self._leave(turn)
            raise
        if gone is not None and gone.done():
            if not gone.cancelled():
                gone.exception()  # retrieved: a failed receive also means gone
            self._leave(turn)
            return "gone"
        if turn.done():
            return "run"  # handed over by ``release``: already counted in ``_running``
        self._leave(turn)
        if left <= self.wait_s:
            return "deadline"
        self.refused += 1
        raise TooManyQueries(self.limit, self.depth, self.wait_s)

    def _leave(self, turn: asyncio.Future) -> None:
        """A waiter gives up: out of the queue, or, handed a slot meanwhile, it passes the
        slot on."""
        if turn.done() and not turn.cancelled():
            self.release()
            return
        turn.cancel()
        try:
            self._queue.remove(turn)
        except ValueError:
            pass

    def release(self) -> None:
        """A slot's query is done: the slot goes to the first waiter, else it is free."""
        while self._queue:
            turn = self._queue.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._running -= 1
