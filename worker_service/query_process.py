"""Query processes: a query that may run long is evaluated in a child forked from the
worker, and the child is killed at the query's deadline (txcluster/query_limits.py).

Why fork: pyoxigraph can neither time out nor cancel a query
(docs/design/dependencies.md#pyoxigraph-the-workers-store), so what stops a
query must be able to stop the work itself and free its CPU: a process that can be
killed. A child forked while the repository's read lock is held inherits the open store
as it is at that instant (no changeset is half-applied: a writer holds the write lock for
all of one), so it answers from the same consistent snapshot a thread would, without
opening anything. The fork costs ~10 ms for a worker of ~200 MB (page tables); point
queries never pay it (query_isolation.runs_in_process).

What a child may do (fork copies only the forking thread; every lock another thread held
stays locked forever in the child): evaluate, serialise, write frames to its pipe, and
``os._exit`` — no logging, no asyncio, no destructors (RocksDB's would write to the store
directory the parent owns). It closes the sockets and pipes it inherited (a client
connection the parent closes must not stay open in a child), asks the kernel to kill it
if the worker dies (PR_SET_PDEATHSIG) and lowers its priority, so that writes and point
reads in the worker get the CPU first.

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

Frames on the pipe, child to parent: ``H`` + 4-byte length + content type, then ``D`` +
4-byte length + result bytes (any number), then ``K`` (done) or ``E`` + 2-byte status +
4-byte length + message (failed; a partial result is dropped).

The parent side runs on the event loop: the pipe and a pidfd (the child's exit) are
watched with ``add_reader``, so a waiting query holds no thread. Every child is reaped by
the pidfd callback whatever happened to the request that started it, and a request is
answered only once its child is gone (its CPU free, its slot empty).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import signal
import stat
import struct
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NoReturn

log = logging.getLogger("txcluster.worker.query")

CHILD_NICENESS = 10
STUCK_CHECK_S = 0.25
STUCK_AFTER_S = 1.0
MAX_FORKS = 3
REAP_WAIT_S = 5.0  # a killed process is gone in milliseconds
READ_CHUNK = 1 << 16
FLUSH_AT = 1 << 16  # bytes a child gathers before it writes a data frame

# Looked up now, in the parent: a child must not load libraries (the dynamic loader's
# lock may be held by another thread at the fork).
_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1

_LEN = struct.Struct(">I")
_STATUS = struct.Struct(">H")


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


class TooManyQueries(Exception):
    pass


# ---- the child ----


class FrameWriter:
    """What a child writes its answer with: ``header`` (the content type) first, then
    ``write`` (also the sink of pyoxigraph's ``serialize``), or ``fail`` at any point."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = bytearray()
        self.failed = False

    def _frame(self, tag: bytes, payload: bytes) -> None:
        _write_all(self.fd, tag + _LEN.pack(len(payload)) + payload)

    def header(self, content_type: str) -> None:
        self._frame(b"H", content_type.encode())

    def write(self, chunk: Any) -> int:
        self.pending += chunk
        if len(self.pending) >= FLUSH_AT:
            self.flush()
        # pyoxigraph's serialize needs the length back (docs/design/dependencies.md)
        return len(chunk)

    def flush(self) -> None:
        if self.pending:
            self._frame(b"D", bytes(self.pending))
            self.pending.clear()

    def done(self) -> None:
        if not self.failed:
            self.flush()
            _write_all(self.fd, b"K")

    def fail(self, status: int, message: str) -> None:
        self.failed = True
        data = message.encode("utf-8", errors="replace")[:65536]
        _write_all(self.fd, b"E" + _STATUS.pack(status) + _LEN.pack(len(data)) + data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _close_inherited(keep: int) -> None:
    """Close the sockets and pipes inherited from the worker (its listening socket, client
    connections, other children's pipes), keeping ``keep``; the store's files stay open."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd == keep or fd < 3:
            continue
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue  # the directory listing's own fd, closed meanwhile
        if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
            os.close(fd)


def child_main(parent: int, fd: int, evaluate: Callable[[FrameWriter], None]) -> NoReturn:
    """Run in the child right after the fork; never returns (``os._exit``)."""
    code = 0
    try:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the worker died before prctl
            os._exit(1)
        # The worker's handlers (uvicorn's) would make the child ignore a stop request.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        _close_inherited(fd)
        os.nice(CHILD_NICENESS)
        gc.disable()  # a collection would touch (and copy) the worker's pages for nothing
        out = FrameWriter(fd)
        evaluate(out)
        out.done()
    except BaseException as exc:  # nothing may unwind into the worker's code
        code = 1
        try:
            FrameWriter(fd).fail(500, f"query evaluation failed: {type(exc).__name__}: {exc}")
        except BaseException:
            pass
    finally:
        os._exit(code)


# ---- the parent ----


@dataclass
class Answer:
    content_type: str
    body: bytes


@dataclass
class _Child:
    pid: int
    fd: int  # the read end of its pipe
    pidfd: int
    exited: asyncio.Future
    started: float
    data: bytearray = field(default_factory=bytearray)
    eof: asyncio.Future | None = None
    reaped: bool = False

    def kill(self) -> None:
        if not self.reaped:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _cpu_and_state(pid: int) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rindex(b")") + 2:].split()
    return fields[0].decode(), int(fields[11]) + int(fields[12])


def _parse(data: bytes | bytearray) -> Answer:
    """The answer in a child's frames; QueryFailed for an error frame or a broken stream."""
    i, n = 0, len(data)
    content_type = "application/octet-stream"
    body: list[memoryview] = []
    view = memoryview(data)
    while i < n:
        tag = data[i:i + 1]
        i += 1
        if tag == b"K":
            return Answer(content_type, b"".join(body))
        if tag == b"E":
            (status,) = _STATUS.unpack_from(data, i)
            (length,) = _LEN.unpack_from(data, i + 2)
            message = bytes(data[i + 6:i + 6 + length]).decode("utf-8", errors="replace")
            raise QueryFailed(status, message)
        if tag not in (b"H", b"D") or i + 4 > n:
            break
        (length,) = _LEN.unpack_from(data, i)
        payload = view[i + 4:i + 4 + length]
        i += 4 + length
        if tag == b"H":
            content_type = bytes(payload).decode()
        else:
            body.append(payload)
    raise QueryFailed(500, "query evaluation failed: the query process ended without an "
                           "answer")


class QueryProcesses:
    """The worker's running query processes: at most ``limit`` at once."""

    def __init__(self, limit: int, executor: Executor | None = None) -> None:
        """``executor``: the threads that fork (one waits for the repository's read lock
        first). A child is killed if its forking thread ends (PR_SET_PDEATHSIG): they must
        live as long as the worker, as a ThreadPoolExecutor's do."""
        self.limit = limit
        self.executor = executor
        self.children: dict[int, _Child] = {}
        self._slots = 0  # queries holding a slot (a query between two forks holds one)
        self.forks = 0
        self.timed_out = 0
        self.abandoned = 0
        self.stuck = 0

    @property
    def running(self) -> int:
        return self._slots

    async def evaluate(self, fork: Callable[[], tuple[int, int]], timeout_s: float,
                       disconnected: Callable[[], Awaitable[Any]] | None = None) -> Answer:
        """Fork (``fork`` runs in a thread and returns the child's pid and the read end of
        its pipe), wait for the answer and return it; kill the child at the deadline
        (QueryTimedOut) or when ``disconnected()`` returns (ClientGone). QueryFailed for
        the child's own errors; TooManyQueries when ``limit`` queries run already."""
        if self._slots >= self.limit:
            raise TooManyQueries
        self._slots += 1
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + timeout_s
        watcher = asyncio.ensure_future(disconnected()) if disconnected else None
        try:
            for attempt in range(1, MAX_FORKS + 1):
                forked = loop.run_in_executor(self.executor, fork)
                try:
                    pid, fd = await asyncio.shield(forked)
                except asyncio.CancelledError:  # the fork goes on in its thread: kill it
                    forked.add_done_callback(partial(self._discard, loop))
                    raise
                child = self._watch(loop, pid, fd)
                try:
                    outcome = await self._wait(child, deadline, watcher)
                finally:
                    child.kill()  # no-op once reaped; the pidfd callback reaps it
                # Answer only once it is gone: its CPU is free and its slot really empty.
                await asyncio.wait({child.exited}, timeout=REAP_WAIT_S)
                if outcome == "done":
                    return _parse(child.data)
                if outcome == "timeout":
                    self.timed_out += 1
                    raise QueryTimedOut
                if outcome == "gone":
                    self.abandoned += 1
                    raise ClientGone
                self.stuck += 1
                log.warning("query process %d made no progress for %.1f s (a lock held at "
                            "the fork): killed, fork %d of %d", pid, STUCK_AFTER_S, attempt,
                            MAX_FORKS)
            self.timed_out += 1
            raise QueryTimedOut
        finally:
            self._slots -= 1
            if watcher is not None:
                watcher.cancel()

    def _discard(self, loop: asyncio.AbstractEventLoop, forked: asyncio.Future) -> None:
        """A fork whose request was cancelled meanwhile: kill the child (and reap it)."""
        if not forked.cancelled() and forked.exception() is None:
            self._watch(loop, *forked.result()).kill()

    def _watch(self, loop: asyncio.AbstractEventLoop, pid: int, fd: int) -> _Child:
        self.forks += 1
        pidfd = os.pidfd_open(pid)
        child = _Child(pid, fd, pidfd, loop.create_future(), time.monotonic())
        child.eof = loop.create_future()
        self.children[pid] = child
        os.set_blocking(fd, False)
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
                return
            except OSError:
                chunk = b""
            if not chunk:
                break
            child.data += chunk
        loop.remove_reader(child.fd)
        if child.eof is not None and not child.eof.done():
            child.eof.set_result(None)

    def _reap(self, loop: asyncio.AbstractEventLoop, child: _Child) -> None:
        """The child exited: collect its status (no zombie), release its fds."""
        loop.remove_reader(child.pidfd)
        try:
            os.waitpid(child.pid, 0)
        except ChildProcessError:
            pass
        child.reaped = True
        self._readable(loop, child)  # whatever is left in the pipe
        loop.remove_reader(child.fd)
        os.close(child.fd)
        os.close(child.pidfd)
        self.children.pop(child.pid, None)
        if not child.exited.done():
            child.exited.set_result(None)
        if child.eof is not None and not child.eof.done():
            child.eof.set_result(None)

    async def _wait(self, child: _Child, deadline: float,
                    watcher: asyncio.Future | None) -> str:
        """"done" (answer complete and the child exited), "timeout", "gone" (client) or
        "stuck" (no CPU, no output for STUCK_AFTER_S)."""
        assert child.eof is not None
        last: tuple[str, int] | None = None
        still_since = time.monotonic()
        seen = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            waiting = {child.exited} if child.eof.done() else {child.eof}
            if watcher is not None:
                waiting.add(watcher)
            done, _ = await asyncio.wait(waiting, timeout=min(left, STUCK_CHECK_S),
                                         return_when=asyncio.FIRST_COMPLETED)
            if watcher is not None and watcher in done:
                if not watcher.cancelled():
                    watcher.exception()  # retrieved: a failed receive also ends the wait
                return "gone"
            if child.exited.done():
                return "done"
            if child.eof.done():
                continue  # all written: the child is exiting
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

