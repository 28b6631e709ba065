"""Reads: which worker serves a read, and the loop that sends it there.

Read-your-writes (the default consistency): a read sees every write this master
acknowledged before it arrived, so it goes only to a worker that has applied the log up
to the head at its arrival (its *floor*), waiting for a forward to bring one there if
none is yet. Among those, the read router picks the one with the fewest running reads
(routing.py, docs/design/rdf4j-protocol.md#consistency-levels); on a lost connection or a 5xx the
read is re-sent to another; a query that timed out (query-timeout-s, the client's ``timeout``)
is answered as such, never re-sent; a client that went away abandons its read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from master_service.cluster.pool import Counters, Worker, WorkerPool
from master_service.cluster.routing import Router
from master_service.cluster.worker_client import WorkerUnavailable
from txinfra import query_limits

log = logging.getLogger("txcluster.master.api")

# A master waits for a query's answer this long after the query's own timeout (the
# worker answers at the timeout, with its 503 "Query evaluation took too long").
QUERY_WAIT_MARGIN_S = 5.0
# Headers of a worker's answer worth passing on to the client.
PASS_HEADERS = ("content-type", "content-disposition", "vary")
# An answer to a client's read: status, headers, body.
ReadAnswer = tuple[int, dict[str, str], bytes]
# A client that went away: the status of an answer nobody reads (nothing is sent).
CLIENT_GONE = 499


class ReadTargets(Protocol):
    """What ``route_read`` sends a read through: the pool's routing and counters, and
    ``Reads.reader_for`` (core.Cluster is one; this module does not import it)."""

    counters: Counters
    router: Router
    request_timeout: float

    def readable(self) -> list[Worker]: ...

    async def reader_for(self, tried: set[str], floor: int | None) -> Worker | None: ...


class Reads:
    """Routing of reads over the pool's readable workers (module docstring)."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool

    def read_floor(self, up_to_date: bool = False) -> int | None:
        """The position a read arriving now must see: the head of the log (every write
        this master acknowledged, and those committed but not yet answered) or, past it,
        the last write a peered master answered before its record was durable
        (``pool.acknowledged_seq``), under read-your-writes, strict, or a client's
        ``X-GraphDB-Local-Consistency: updating``; None under eventual consistency (any
        readable worker will do)."""
        if up_to_date or self.pool.consistency != "eventual":
            return self._newest()
        return None

    def _newest(self) -> int:
        return max(self.pool.head_seq, self.pool.acknowledged_seq)

    def choose_reader(self, tried: set[str], floor: int | None) -> Worker | None:
        """The readable worker with the fewest running reads among those that have
        applied the log up to ``floor`` (routing.py); None when there is none now."""
        pool = self.pool
        if floor is not None:
            # A rollback (images.py) can move the head back below a read's floor: the
            # state the read waited for is no longer the cluster's.
            floor = min(floor, self._newest())
        candidates = [w.url for w in pool.readable()
                      if floor is None or w.seq >= floor]
        url = pool.router.choose(candidates, exclude=tried)
        return pool.workers.get(url) if url else None

    async def reader_for(self, tried: set[str], floor: int | None) -> Worker | None:
        """As ``choose_reader``, waiting (at most ``request_timeout``) for a forward to
        bring a worker up to ``floor`` when none is there yet; None when no worker got
        there in time, or no untried readable worker is left. Never an older one."""
        pool = self.pool
        deadline = time.monotonic() + pool.request_timeout
        while True:
            w = self.choose_reader(tried, floor)
            if w is not None or floor is None:
                return w
            if not any(x.url not in tried for x in pool.readable()):
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            # Woken by the next worker position change; bounded so that a worker
            # recovered by replication (no forward) is noticed too.
            await pool.wait_advanced(min(left, 0.05))


def _text(status: int, message: str) -> ReadAnswer:
    return status, {"content-type": "text/plain; charset=utf-8"}, message.encode()


# A read still running after this long watches for its client going away (read_unless_gone).
WATCH_AFTER_S = 0.05


async def read_unless_gone(client_gone: Callable[[], Awaitable], read: Awaitable,
                           wait_s: float | None) -> tuple | None:
    """The worker's answer to ``read``; None when the client went away first
    (``client_gone()`` returned, e.g. query_limits.wait_for_disconnect): the read
    is cancelled, which closes its connection to the worker, whose query process is
    then killed (worker_service/query_process.py). TimeoutError after ``wait_s``."""
    # The read runs in this task; a watcher task cancels it if the client goes first (one
    # task and no asyncio.wait per read: their cost showed on the read path's profile).
    # The watcher starts only once the read has taken WATCH_AFTER_S: most reads (point
    # queries, ~1-3 ms) end before, and a task per read was ~4% of a master's CPU on them.
    me = asyncio.current_task()
    assert me is not None
    left = False
    gone: asyncio.Future | None = None

    async def watch() -> None:
        nonlocal left
        await client_gone()
        left = True
        me.cancel()

    def start_watching() -> None:
        nonlocal gone
        gone = asyncio.ensure_future(watch())

    later = asyncio.get_running_loop().call_later(WATCH_AFTER_S, start_watching)
    try:
        async with asyncio.timeout(wait_s):
            return await read
    except asyncio.CancelledError:
        if not left:
            raise  # cancelled from outside: not the client going away
        me.uncancel()
        return None
    finally:
        later.cancel()
        if gone is not None:
            gone.cancel()


async def route_read(client_gone: Callable[[], Awaitable], cluster: ReadTargets,
                     floor: int | None, send: Callable[[Worker], Awaitable],
                     timeout_s: float | None) -> ReadAnswer:
    """Send a read (``send(worker)``) to a worker at ``floor`` or past it; on a lost
    connection or a 5xx, to another. ``timeout_s``: a query's timeout, waited for
    with a margin and never re-sent once reached."""
    wait_s = None if timeout_s is None else timeout_s + QUERY_WAIT_MARGIN_S
    tried: set[str] = set()
    refusal: ReadAnswer | None = None  # the last worker's 5xx (e.g. "too many queries")
    cluster.counters.running_reads += 1
    try:
        while True:
            w = await cluster.reader_for(tried, floor)
            if w is None:
                cluster.counters.failed_reads += 1
                if refusal is not None:
                    return refusal
                if tried:
                    why = "every available worker failed this read"
                elif floor is not None and cluster.readable():
                    why = (f"no worker has applied the writes acknowledged before this "
                           f"read (log position {floor}) within "
                           f"{cluster.request_timeout:g} s")
                else:
                    why = "no worker is available for reads"
                return _text(503, why)
            tried.add(w.url)
            started = time.monotonic()
            try:
                answer = await read_unless_gone(client_gone, send(w), wait_s)
            except WorkerUnavailable as exc:
                cluster.router.done(w.url, time.monotonic() - started, ok=False)
                log.warning("read on %s failed (%s): retrying elsewhere", w.url, exc)
                continue
            except TimeoutError:
                cluster.router.done(w.url, time.monotonic() - started, ok=False)
                cluster.counters.failed_reads += 1
                log.warning("query on %s not answered within its timeout of %g s and a "
                            "margin: not re-sent", w.url, timeout_s)
                return _text(query_limits.TIMED_OUT_STATUS,
                             query_limits.timed_out_message(timeout_s or 0.0))
            if answer is None:
                cluster.router.done(w.url, time.monotonic() - started, ok=True)
                log.info("client of a read on %s went away: read abandoned", w.url)
                return CLIENT_GONE, {}, b""  # nobody reads it
            status, resp_headers, content = answer
            elapsed = time.monotonic() - started
            timed_out = query_limits.TIMED_OUT_HEADER in resp_headers
            ok = status < 500 or timed_out
            cluster.router.done(w.url, elapsed, ok=ok)
            if not ok:
                log.warning("read on %s answered %d: retrying elsewhere", w.url, status)
                refusal = status, {k: v for k, v in resp_headers.items()
                                   if k in PASS_HEADERS}, content
                continue
            if timed_out:  # the worker's answer goes to the client as it is
                cluster.counters.failed_reads += 1
            else:
                cluster.counters.completed_reads += 1
                cluster.counters.read_time_s += elapsed
            return status, {k: v for k, v in resp_headers.items() if k in PASS_HEADERS}, \
                content
    finally:
        cluster.counters.running_reads -= 1
