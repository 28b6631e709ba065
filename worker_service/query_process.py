"""Query processes: a query that may run long is evaluated in a child forked from the
worker, and the child is killed at the query's deadline (txinfra/query_limits.py).

Why fork: pyoxigraph can neither time out nor cancel a query
(docs/design/dependencies.md#pyoxigraph-the-workers-store), so what stops a
query must be able to stop the work itself and free its CPU: a process that can be
killed. A child forked while the repository's read lock is held inherits the open store
as it is at that instant (no changeset is half-applied: a writer holds the write lock for
all of one), so it answers from the same consistent snapshot a thread would, without
opening anything. The fork costs ~10 ms for a worker of ~200 MB (page tables); point
queries never pay it (query_isolation.runs_in_process).

A lock another thread holds at the instant of the fork is never released in the child.
Measured (a store of 100,000 triples, a fork under the read lock with one point query in
the child, 8 threads running point queries in the parent): 0 of 3,300 children blocked
with small changesets; 8 of ~4,700 (about 1 in 600) with changesets of 2 MB (RocksDB
flushing and compacting all along), every one (gdb) waiting in
``LRUCacheShard::Lookup`` on a block cache shard mutex that a thread of the parent was
holding. Keeping the parent's own readers out of RocksDB during each fork (a gate they
hold while they evaluate) still left 1 of 3,000 blocked (a flush or compaction thread
holds those mutexes too), at the price of stalling point reads behind every fork, so
there is no such gate. A blocked child sleeps without using any CPU and writes nothing,
which a working child never does for long: one found so for STUCK_AFTER_S is killed and
the query forked again (at most MAX_FORKS times within its deadline).
``bench/bench_query_timeout.py --fork-stress N`` counts them through a real worker.

A child answers one query after the other (QueryProcesses keeps it while no write has
changed the store since its fork); what it may do, and the frames of its requests and
answers: worker_service/query_child.py.

The parent side runs on the event loop: the pipes and a pidfd (the child's exit) are
watched with ``add_reader``, so a waiting query holds no thread. Every child is reaped by
the pidfd callback whatever happened to the request that started it, and a request is
answered only once its child waits for the next one or is gone (its CPU free either way).
A child that is killed (timeout, client gone, stuck, stale, retired) is never asked again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from worker_service import query_slots
from worker_service.query_child import (  # noqa: F401  (FrameWriter, child_main: for callers)
    LEN,
    STATUS,
    FrameWriter,
    child_main,
    request_frame,
    write_all,
)

TooManyQueries = query_slots.TooManyQueries  # raised by QueryProcesses.evaluate

log = logging.getLogger("txcluster.worker.query")

STUCK_CHECK_S = 0.25
STUCK_AFTER_S = 1.0
MAX_FORKS = 3
IDLE_S = 5.0  # an idle query process is retired after this long without a query
MAX_USES = 1000  # queries one process answers before it is retired
REAP_WAIT_S = 5.0  # a killed process is gone in milliseconds
READ_CHUNK = 1 << 16


class QueryFailed(Exception):
    """The child reported an error: ``status`` and ``message`` are the answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class QueryTimedOut(Exception):
    pass


class ClientGone(Exception):
    pass


# ---- the parent ----


@dataclass
class Answer:
    content_type: str
    body: bytes


@dataclass
class _Child:
    pid: int
    fd: int  # the read end of its answers pipe
    requests: int  # the write end of its requests pipe
    pidfd: int
    version: int  # the repository's write count when it was forked (its snapshot)
    exited: asyncio.Future
    started: float
    data: bytearray = field(default_factory=bytearray)
    scanned: int = 0  # bytes of ``data`` read as whole frames
    answered: asyncio.Future | None = None  # a whole answer is in ``data`` (K or E)
    eof: bool = False
    reaped: bool = False
    uses: int = 0
    retire: asyncio.TimerHandle | None = None  # while idle

    def kill(self) -> None:
        if not self.reaped:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def scan(self) -> None:
        """Set ``answered`` once ``data`` holds a whole answer: frames up to a K, or an
        E frame with its message."""
        data, i, n = self.data, self.scanned, len(self.data)
        while i < n:
            tag = data[i]
            if tag == 0x4B:  # K
                i += 1
                break
            if tag == 0x45:  # E
                if i + 7 > n or i + 7 + LEN.unpack_from(data, i + 3)[0] > n:
                    return
                i = n
                break
            if i + 5 > n:
                return
            end = i + 5 + LEN.unpack_from(data, i + 1)[0]
            if end > n:
                return
            i = end
        else:
            self.scanned = i
            return
        self.scanned = i
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(None)


def _cpu_and_state(pid: int) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rindex(b")") + 2:].split()
    return fields[0].decode(), int(fields[11]) + int(fields[12])


def _parse(data: bytes | bytearray) -> tuple[Answer, bool]:
    """The answer in a child's frames and whether it ended with K (the child may answer
    again); QueryFailed for an error frame or a broken stream."""
    i, n = 0, len(data)
    content_type = "application/octet-stream"
    body: list[memoryview] = []
    view = memoryview(data)
    while i < n:
        tag = data[i:i + 1]
        i += 1
        if tag == b"K":
            return Answer(content_type, b"".join(body)), i == n
        if tag == b"E":
            (status,) = STATUS.unpack_from(data, i)
            (length,) = LEN.unpack_from(data, i + 2)
            message = bytes(data[i + 6:i + 6 + length]).decode("utf-8", errors="replace")
            raise QueryFailed(status, message)
        if tag not in (b"H", b"D") or i + 4 > n:
            break
        (length,) = LEN.unpack_from(data, i)
        payload = view[i + 4:i + 4 + length]
        i += 4 + length
        if tag == b"H":
            content_type = bytes(payload).decode()
        else:
            body.append(payload)
    raise QueryFailed(500, "query evaluation failed: the query process ended without an "
                           "answer")


class QueryProcesses:
    """The worker's query processes: at most ``limit`` evaluating at once, and those
    that answered kept (idle) for the next query while the store is as they forked it.

    Why keep them: a fork and the exit of its child cost ~10-20 ms of CPU in a worker of
    100-200 MB (page tables, and the copies of the pages either side writes meanwhile), a
    fifth of an engine-bound query (bench/README.md, "Query processes kept between
    writes"). A child answers from the snapshot it was forked with, so it is given a query
    only while the repository's write count (``version``) is the one it was forked at: no
    writer has held the lock since, and a read after an acknowledged write never goes to
    an older snapshot. An idle child holds the store's files as they were at its fork (a
    compaction's deleted files too: a child forked before a compaction still read every
    quad after it, measured), so it is retired after IDLE_S without a query, when found
    stale, and after MAX_USES queries (its garbage is never collected: gc is off)."""

    def __init__(self, limit: int, executor: Executor | None = None,
                 queue_depth: int = query_slots.DEFAULT_QUEUE_DEPTH,
                 queue_wait_s: float = query_slots.DEFAULT_QUEUE_WAIT_S) -> None:
        """``executor``: the threads that fork (one waits for the repository's read lock
        first). A child is killed if its forking thread ends (PR_SET_PDEATHSIG): they must
        live as long as the worker, as a ThreadPoolExecutor's do. ``queue_depth``,
        ``queue_wait_s``: the queue of queries beyond ``limit`` (query_slots.py)."""
        self.limit = limit
        self.executor = executor
        self.children: dict[int, _Child] = {}
        self.idle: list[_Child] = []  # answered, waiting for a query, newest last
        # queries holding a slot (a query between two forks holds one), and those waiting
        self.slots = query_slots.QuerySlots(limit, queue_depth, queue_wait_s)
        self.forks = 0
        self.reused = 0
        self.timed_out = 0
        self.abandoned = 0
        self.stuck = 0

    @property
    def running(self) -> int:
        return self.slots.running

    async def evaluate(self, request: bytes,
                       fork: Callable[[], tuple[int, int, int, int]],
                       version: Callable[[], int], timeout_s: float,
                       disconnected: Callable[[], Awaitable[Any]] | None = None) -> Answer:
        """Answer ``request`` in a query process: an idle one forked at ``version()``, or
        a new one (``fork`` runs in a thread and returns the child's pid, the read end of
        its answers pipe, the write end of its requests pipe and the version it was forked
        at). The child is killed at the deadline (QueryTimedOut) or when
        ``disconnected()`` returns (ClientGone). QueryFailed for the child's own errors.
        With ``limit`` queries running it waits for a slot in the queue (the wait counts
        against ``timeout_s``); TooManyQueries when the queue is full or the wait expired."""
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + timeout_s
        watcher = asyncio.ensure_future(disconnected()) if disconnected else None
        try:
            turn = await self.slots.acquire(deadline, watcher)
            if turn != "run":  # the client left, or the deadline passed, while it waited
                self.abandoned += turn == "gone"
                self.timed_out += turn == "deadline"
                raise ClientGone if turn == "gone" else QueryTimedOut
        except BaseException:
            if watcher is not None:
                watcher.cancel()
            raise
        try:
            attempt = 0
            while attempt < MAX_FORKS:
                child = self._take_idle(version())
                reused = child is not None
                if child is None:
                    attempt += 1
                    forked = loop.run_in_executor(self.executor, fork)
                    try:
                        pid, fd, requests, forked_at = await asyncio.shield(forked)
                    except asyncio.CancelledError:  # the fork goes on in its thread: kill it
                        forked.add_done_callback(partial(self._discard, loop))
                        raise
                    child = self._watch(loop, pid, fd, requests, forked_at)
                else:
                    self.reused += 1
                child.answered = loop.create_future()
                child.scan()
                try:
                    await self._send(loop, child, request)
                    outcome = await self._wait(child, deadline, watcher)
                except BaseException:
                    child.kill()
                    raise
                if outcome == "done" and reused and not child.data:
                    await self._end(child)  # an idle one that died meanwhile: another
                    continue
                if outcome == "done":
                    try:
                        answer, whole = _parse(child.data)
                    except QueryFailed:
                        await self._end(child)  # an error answer ends the process
                        raise
                    if not (whole and not child.reaped and self._park(loop, child,
                                                                      version())):
                        await self._end(child)
                    return answer
                await self._end(child)
                if outcome == "timeout":
                    self.timed_out += 1
                    raise QueryTimedOut
                if outcome == "gone":
                    self.abandoned += 1
                    raise ClientGone
                if outcome == "stuck":
                    self.stuck += 1
                    log.warning("query process %d made no progress for %.1f s (a lock held "
                                "at the fork): killed, fork %d of %d", child.pid,
                                STUCK_AFTER_S, attempt, MAX_FORKS)
            self.timed_out += 1
            raise QueryTimedOut
        finally:
            self.slots.release()  # after _park: a waiter handed the slot finds it idle
            if watcher is not None:
                watcher.cancel()

    async def _end(self, child: _Child) -> None:
        """Kill ``child`` and wait until it is gone: its CPU is free and its slot really
        empty before anything is answered."""
        child.kill()  # no-op once reaped; the pidfd callback reaps it
        await asyncio.wait({child.exited}, timeout=REAP_WAIT_S)

    def _take_idle(self, version: int) -> _Child | None:
        """The newest idle child forked at ``version``; the stale ones are retired."""
        while self.idle:
            child = self.idle.pop()
            if child.retire is not None:
                child.retire.cancel()
                child.retire = None
            if child.version == version and not child.reaped and not child.eof:
                child.data.clear()
                child.scanned = 0
                return child
            child.kill()
        return None

    def _park(self, loop: asyncio.AbstractEventLoop, child: _Child, version: int) -> bool:
        """Keep ``child`` for the next query; False when it is not to be kept (stale,
        used up, or as many processes as ``limit`` without it)."""
        child.uses += 1
        running = len(self.children) - len(self.idle) - 1  # others still evaluating
        if (child.version != version or child.uses >= MAX_USES
                or len(self.idle) + running >= self.limit):
            return False
        child.retire = loop.call_later(IDLE_S, self._retire, child)
        self.idle.append(child)
        return True

    def _retire(self, child: _Child) -> None:
        child.retire = None
        child.kill()  # the pidfd callback takes it out of ``idle``

    @staticmethod
    async def _send(loop: asyncio.AbstractEventLoop, child: _Child, request: bytes) -> None:
        """Write the request to the child's pipe: at once when it fits the pipe (a query
        text almost always does), else from a thread while the child reads it."""
        frame = request_frame(request)
        try:
            written = os.write(child.requests, frame)
        except BlockingIOError:
            written = 0
        except OSError:  # the child is gone: its exit answers the request
            return
        if written < len(frame):  # from a copy of the fd (the child's exit closes this)
            fd = os.dup(child.requests)
            os.set_blocking(fd, True)  # (the flag is the pipe's: shared with the original)
            with contextlib.suppress(OSError):
                await loop.run_in_executor(None, write_all, fd, frame[written:])
            os.set_blocking(fd, False)
            os.close(fd)

    def _discard(self, loop: asyncio.AbstractEventLoop, forked: asyncio.Future) -> None:
        """A fork whose request was cancelled meanwhile: kill the child (and reap it)."""
        if not forked.cancelled() and forked.exception() is None:
            self._watch(loop, *forked.result()).kill()

    def _watch(self, loop: asyncio.AbstractEventLoop, pid: int, fd: int, requests: int,
               version: int) -> _Child:
        self.forks += 1
        pidfd = os.pidfd_open(pid)
        child = _Child(pid, fd, requests, pidfd, version, loop.create_future(),
                       time.monotonic())
        self.children[pid] = child
        os.set_blocking(fd, False)
        os.set_blocking(requests, False)
        loop.add_reader(fd, self._readable, loop, child)
        loop.add_reader(pidfd, self._reap, loop, child)
        return child

    @staticmethod
    def _readable(loop: asyncio.AbstractEventLoop, child: _Child) -> None:
        """Drain the pipe (it holds at most 64 KiB); at its end, stop watching it."""
        while True:
            try:
                chunk = os.read(child.fd, READ_CHUNK)
            except BlockingIOError:
                child.scan()
                return
            except OSError:
                chunk = b""
            if not chunk:
                break
            child.data += chunk
        child.scan()
        if not child.eof:
            child.eof = True
            loop.remove_reader(child.fd)

    def _reap(self, loop: asyncio.AbstractEventLoop, child: _Child) -> None:
        """The child exited: collect its status (no zombie), release its fds."""
        loop.remove_reader(child.pidfd)
        try:
            os.waitpid(child.pid, 0)
        except ChildProcessError:
            pass
        child.reaped = True
        if not child.eof:
            self._readable(loop, child)  # whatever is left in the pipe
        loop.remove_reader(child.fd)
        for fd in (child.fd, child.requests, child.pidfd):
            os.close(fd)
        self.children.pop(child.pid, None)
        if child in self.idle:
            self.idle.remove(child)
        if child.retire is not None:
            child.retire.cancel()
            child.retire = None
        if not child.exited.done():
            child.exited.set_result(None)

    async def _wait(self, child: _Child, deadline: float,
                    watcher: asyncio.Future | None) -> str:
        """"done" (a whole answer, or the child exited), "timeout", "gone" (client) or
        "stuck" (no CPU, no output for STUCK_AFTER_S)."""
        assert child.answered is not None
        last: tuple[str, int] | None = None
        still_since = time.monotonic()
        seen = len(child.data)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            waiting = {child.answered, child.exited}
            if watcher is not None:
                waiting.add(watcher)
            done, _ = await asyncio.wait(waiting, timeout=min(left, STUCK_CHECK_S),
                                         return_when=asyncio.FIRST_COMPLETED)
            if watcher is not None and watcher in done:
                if not watcher.cancelled():
                    watcher.exception()  # retrieved: a failed receive also ends the wait
                return "gone"
            if child.answered.done() or child.exited.done():
                return "done"
            now = time.monotonic()
            sample = _cpu_and_state(child.pid)
            if sample is None or len(child.data) != seen or sample[0] != "S" or \
                    last is None or sample[1] != last[1]:
                still_since = now
            last, seen = sample, len(child.data)
            if now - still_since >= STUCK_AFTER_S:
                return "stuck"

    def kill_all(self) -> None:
        """At shutdown: no query process outlives the worker."""
        for child in list(self.children.values()):
            child.kill()
