"""What runs in a query process (worker_service/query_process.py is the worker's side):
the child's loop, and the frames of its requests and answers.

What a child may do (fork copies only the forking thread; every lock another thread held
stays locked forever in the child): evaluate, serialise, write frames to its pipe, and
``os._exit`` — no logging, no asyncio, no destructors (RocksDB's would write to the store
directory the parent owns). It closes the sockets and pipes it inherited (a client
connection the parent closes must not stay open in a child) and asks the kernel to kill it
if the worker dies (PR_SET_PDEATHSIG).

Its priority: the worker's own (nice 0), in the batch scheduling class (SCHED_BATCH: the
same share of the CPU, marked as CPU-bound, so that a waking thread of the worker, a write
or a point read, is not held behind it by the scheduler's wake-up rule). A child at nice 10
(as it ran before) got ~7x less CPU than a process at nice 0 on a machine that other work
loads (two in-process query loops side by side here: 0.15 against 1.04 engine-bound
queries/s), so an engine-bound query answered at half the rate of `oxigraph serve` over
the same engine (issue 63; bench/README.md, "Heavy queries under concurrency"). What keeps
the worker's writes and point reads their share is the number of query processes
(max-concurrent-queries, worker_service/query_slots.py).

A child answers one query after the other until the worker closes its request pipe.
Requests, parent to child, on that pipe: 4-byte length + the request (``read_request``).
Frames of each answer, child to parent: ``H`` + 4-byte length + content type, then ``D``
+ 4-byte length + result bytes (any number), then ``K`` (done: the child waits for the
next request) or ``E`` + 2-byte status + 4-byte length + message (failed; a partial result
is dropped, and the child exits).
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import stat
import struct
from collections.abc import Callable
from typing import Any, NoReturn

FLUSH_AT = 1 << 16  # bytes a child gathers before it writes a data frame

# Looked up now, in the parent: a child must not load libraries (the dynamic loader's
# lock may be held by another thread at the fork).
_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
BUSY_NAME = b"txc-query"
IDLE_NAME = b"txc-query-idle"  # (at most 15 bytes: the kernel's TASK_COMM_LEN)

LEN = struct.Struct(">I")
STATUS = struct.Struct(">H")


class FrameWriter:
    """What a child writes its answer with: ``header`` (the content type) first, then
    ``write`` (also the sink of pyoxigraph's ``serialize``), or ``fail`` at any point."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = bytearray()
        self.failed = False

    def _frame(self, tag: bytes, payload: bytes) -> None:
        write_all(self.fd, tag + LEN.pack(len(payload)) + payload)

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
            write_all(self.fd, b"K")

    def fail(self, status: int, message: str) -> None:
        self.failed = True
        data = message.encode("utf-8", errors="replace")[:65536]
        write_all(self.fd, b"E" + STATUS.pack(status) + LEN.pack(len(data)) + data)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _close_inherited(keep: tuple[int, ...]) -> None:
    """Close the sockets and pipes inherited from the worker (its listening socket, client
    connections, other children's pipes), keeping ``keep``; the store's files stay open."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in keep or fd < 3:
            continue
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue  # the directory listing's own fd, closed meanwhile
        if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
            os.close(fd)


def _read_exactly(fd: int, n: int) -> bytes | None:
    """``n`` bytes from ``fd``; None at its end (the worker closed it, or died)."""
    data = bytearray()
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def read_request(fd: int) -> bytes | None:
    """The next request on a query process's request pipe (4-byte length + content);
    None when the worker closed the pipe: the process is done."""
    head = _read_exactly(fd, LEN.size)
    if head is None:
        return None
    (length,) = LEN.unpack(head)
    return _read_exactly(fd, length) if length else b""


def request_frame(request: bytes) -> bytes:
    return LEN.pack(len(request)) + request


def _set_name(name: bytes) -> None:
    # What ps and /proc/PID/comm show: an operator (and the tests) can tell a query
    # process that waits for its next query from one that evaluates (IDLE_NAME).
    _LIBC.prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def child_main(parent: int, fd: int, requests: int,
               evaluate: Callable[[bytes, FrameWriter], None]) -> NoReturn:
    """Run in the child right after the fork; never returns (``os._exit``). Answers the
    requests read from ``requests`` one after the other, each with ``evaluate`` writing
    its frames to ``fd``, until the worker closes that pipe (or kills the process)."""
    code = 0
    try:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the worker died before prctl
            os._exit(1)
        # The worker's handlers (http_server.serve's) would make the child ignore a stop request.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        _close_inherited((fd, requests))
        try:  # (module docstring); a sandbox that forbids it leaves the worker's class
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:
            pass
        gc.disable()  # a collection would touch (and copy) the worker's pages for nothing
        _set_name(IDLE_NAME)
        while (request := read_request(requests)) is not None:
            _set_name(BUSY_NAME)
            out = FrameWriter(fd)
            evaluate(request, out)
            _set_name(IDLE_NAME)  # before the answer ends: so named once the worker has it
            out.done()
            if out.failed:  # an error answer ends the process (QueryProcesses.evaluate)
                break
    except BaseException as exc:  # nothing may unwind into the worker's code
        code = 1
        try:
            FrameWriter(fd).fail(500, f"query evaluation failed: {type(exc).__name__}: {exc}")
        except BaseException:
            pass
    finally:
        os._exit(code)
