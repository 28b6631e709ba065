"""The worker pool as one master sees it: its workers and their statuses, the head of the
transaction log, whether the cluster takes writes, and the thread the log is called on.

Everything here runs on the master's asyncio loop, except the log calls: they block on
fsync, so they run off the loop on ``db``, one executor thread shared by the cluster and
the sync driver so that log writes keep their order; TxLog itself serialises calls from
any thread (txlog/log.py, "Threads"). The other parts of the cluster
(recovery.py, write_path.py, images.py, reads.py) act on this shared state; a status
change that must not race a commit happens in code with no ``await`` between the check
and the change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from master_service.cluster import replication
from master_service.cluster.routing import Router
from master_service.cluster.statuses import IN_SYNC, READABLE, WorkerStatus
from master_service.cluster.worker_client import WorkerClient

log = logging.getLogger("txcluster.master")

# Changesets sent to a worker in one request, by a forward or a replay.
REPLAY_BATCH = 200
EMPTY_FINGERPRINT = "0" * 32


@dataclass
class Worker:
    url: str
    client: WorkerClient
    readable: bool = True
    status: WorkerStatus = WorkerStatus.UNINITIALIZED
    seq: int = -1
    fingerprint: str = ""
    quads: int = 0
    size_bytes: int | None = None
    last_error: str | None = None
    completed_tasks: int = 0
    failed_tasks: int = 0
    task_time_s: float = 0.0
    queue: list[dict] = field(default_factory=list)  # changesets to forward, in seq order
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    forwarder: asyncio.Task | None = None
    recovering: bool = False
    # Images this worker is serving now (replications, a backup): REPLICATION_SERVER
    # until the last of them ends (Pool.serving).
    serving: int = 0
    # (seq, fingerprint) ahead of the log whose journal was found not to roll forward:
    # not asked again until the worker's state changes.
    not_rolled_forward: tuple[int, str] | None = None

    @property
    def average_task_time_s(self) -> float:
        return self.task_time_s / self.completed_tasks if self.completed_tasks else 0.0


@dataclass
class Counters:
    completed_reads: int = 0
    failed_reads: int = 0
    completed_writes: int = 0
    failed_writes: int = 0
    running_reads: int = 0
    running_writes: int = 0
    read_time_s: float = 0.0
    write_groups: int = 0  # group commits: completed_writes / write_groups = group size
    replications: int = 0  # full replications completed (for /metrics)
    replication_bytes: int = 0  # the sources' storage sizes, summed over those
    fingerprint_mismatches: int = 0  # workers found diverged from the log or the probe
    # client requests the protocol refused (ProtocolError.reason -> count): a malformed
    # update is one of these, never a failed write (it is refused before it is logged)
    refused_requests: dict[str, int] = field(default_factory=dict)


class LogThread:
    """The one executor thread the master's log calls run on: every part of the master
    that calls the log awaits its calls here, so they keep their order and never block
    the event loop."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="txlog")

    async def __call__(self, fn: Callable, *args) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


class WorkerPool:
    """The workers, the log head and the writability rules
    (docs/design/cluster-basics.md#master-modes, #two-workers-three-workers)."""

    def __init__(self, *, node_id: str, txlog, secret: bytes, params: replication.Parameters,
                 control_queries: list[str], protect_single_worker: bool = True,
                 read_only: bool = False, mode: str = "NORMAL",
                 consistency: str = "read-your-writes", request_timeout: float = 30.0,
                 log_limits: tuple[int, float] = (100_000, 168.0),
                 on_workers_changed: Callable[[list[str]], None] | None = None,
                 tls: ssl.SSLContext | None = None, db: LogThread | None = None) -> None:
        self.node_id = node_id
        self.tls = tls  # verifies https workers (tls-ca-file); None: system CAs
        self.txlog = txlog
        self.secret = secret
        self.params = params
        self.control_queries = control_queries
        self.protect_single_worker = protect_single_worker
        self.read_only = read_only
        self.mode = mode
        # eventual | read-your-writes | strict (config.py, key consistency): strict also
        # makes the acknowledgement wait for every in-sync worker.
        self.consistency = consistency
        self.strict = consistency == "strict"
        self._advanced = asyncio.Event()  # set when a worker's applied position moves
        self.request_timeout = request_timeout
        self.log_max_size, self.log_max_depth_h = log_limits
        self.on_workers_changed = on_workers_changed
        self.workers: dict[str, Worker] = {}
        self.router = Router()
        self.counters = Counters()
        self.head_seq = 0
        self.head_fingerprint = EMPTY_FINGERPRINT
        self.head_quads = 0
        # The newest seq a client was answered for before the log recorded it (a peered
        # master answers once the probe executed an agreed group: write_path.execute's
        # ``executed``); reads under read-your-writes wait for it (reads.read_floor).
        self.acknowledged_seq = 0
        self.log_history = False  # TxLog.has_history(), kept current by set_head
        self.probe: str | None = None
        # Workers whose state changes on purpose, taken over from the health check:
        # those being restored (images.restore) and the one committing a bulk load.
        self.restoring: set[str] = set()
        self.bulk_load_target: str | None = None
        self.events: list[tuple[float, str]] = []  # recent recovery messages, for status
        self._own_db = db is None
        self.db = db if db is not None else LogThread()

    def note(self, message: str, level: int = logging.INFO) -> None:
        log.log(level, message)
        self.events.append((time.time(), message))
        del self.events[:-100]

    # ---- membership ----

    def attach(self, url: str, readable: bool) -> Worker:
        w = Worker(url, WorkerClient(url, self.secret, self.request_timeout, self.tls),
                   readable=readable)
        self.workers[url] = w
        return w

    def set_readable(self, url: str, readable: bool) -> Worker:
        """Take a worker out of read rotation (drain: no new read is routed to it, and it
        stops being the probe, so writes go to another in-sync worker) or put it back.
        It keeps receiving forwards, so it stays in sync while drained. Not persisted: a
        drain is for maintenance (a rolling upgrade) and ends with the master's process."""
        w = self.workers.get(url.rstrip("/"))
        if w is None:
            raise KeyError(f"unknown worker {url}")
        if w.readable != readable:
            w.readable = readable
            self.note(f"worker {w.url} {'back in' if readable else 'out of'} read rotation")
        if not readable and self.probe == w.url:
            self.probe = None
        return w

    def workers_changed(self) -> None:
        if self.on_workers_changed:
            self.on_workers_changed(list(self.workers))

    # ---- statuses ----

    def in_sync(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.status in IN_SYNC]

    @staticmethod
    def settled(w: Worker) -> WorkerStatus:
        """The status of an in-sync worker that is not applying anything right now:
        WAITING_WRITE while forwarded writes are queued for it, else ON."""
        return WorkerStatus.WAITING_WRITE if w.queue else WorkerStatus.ON

    @contextlib.contextmanager
    def serving(self, w: Worker) -> Iterator[None]:
        """``w`` is REPLICATION_SERVER while it serves an image: several at once (the
        receivers of one replication round share its image: worker_service/
        shared_images.py), settled again when the last one ends."""
        w.serving += 1
        w.status = WorkerStatus.REPLICATION_SERVER
        try:
            yield
        finally:
            w.serving -= 1
            if not w.serving and w.status == WorkerStatus.REPLICATION_SERVER:
                w.status = self.settled(w)

    def readable(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.status in READABLE and w.readable]

    def writable_reason(self) -> str | None:
        """None when the cluster takes writes, else why not
        (docs/design/cluster-basics.md#master-modes)."""
        if self.read_only:
            return "this master is read-only"
        if self.mode == "MUTE":
            return "this master is muted: it takes transactions only from its peers"
        return self.execution_reason()

    def execution_reason(self) -> str | None:
        """None when the workers can execute transactions (a muted master still executes
        the transactions its write path orders), else why not."""
        if self.bulk_load_target:
            return f"an initial bulk load is being committed on {self.bulk_load_target}"
        n = len(self.in_sync())
        if n == 0:
            return "no worker is in sync"
        # With two workers the master goes read-only while one recovers: a single copy
        # is not risked unless protect-single-worker is off
        # (docs/design/cluster-basics.md#two-workers-three-workers).
        if n == 1 and self.protect_single_worker and len(self.workers) > 1:
            return ("only one worker is in sync and protect-single-worker is on: "
                    "writes resume when another worker has recovered")
        return None

    def status_code(self) -> int:
        """0 available, 1 needs attention / not writable, 2 no workers
        (docs/design/cluster-basics.md#worker-statuses)."""
        if not self.readable():
            return 2
        if self.writable_reason() or any(w.status not in IN_SYNC for w in self.workers.values()):
            return 1
        return 0

    def disable(self, w: Worker, status: WorkerStatus, error: str) -> None:
        """Take ``w`` out of rotation: its queued forwards are dropped (recovery brings it
        back to the head) and it stops being the probe."""
        if w.status != status:
            self.note(f"worker {w.url} -> {status}: {error}", logging.WARNING)
        w.status, w.last_error = status, error
        w.queue.clear()
        if self.probe == w.url:
            self.probe = None

    # ---- the log head ----

    def set_head(self, seq: int, fingerprint: str, quads: int) -> None:
        if seq < self.head_seq:
            # A rollback, a restore or a seeding took the log back: what was acknowledged
            # after it is no longer the cluster's state (as reads.choose_reader's clamp).
            self.acknowledged_seq = 0
        self.head_seq, self.head_fingerprint, self.head_quads = seq, fingerprint, quads
        if (seq, fingerprint) != (0, EMPTY_FINGERPRINT):
            self.log_history = True

    def log_is_new(self) -> bool:
        """The log has never committed a transaction nor adopted a state. Not the same as
        a head at the empty state: a rollback (images.py) can take a log back to position
        0, and a worker not restored yet must not become the base of the log then (the
        log adopted it mid-rollback and the recovery failed for good)."""
        return not self.log_history and self.head_seq == 0 and \
            self.head_fingerprint == EMPTY_FINGERPRINT

    # ---- worker positions ----

    def positions_advanced(self) -> None:
        """A worker's applied position moved: wake the reads waiting for it."""
        self._advanced.set()
        self._advanced = asyncio.Event()

    async def wait_advanced(self, timeout: float) -> None:
        """Until a worker's applied position moves, at most ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._advanced.wait(), timeout)

    async def while_alive(self, w: Worker, call: Coroutine[Any, Any, Any]) -> Any:
        """Await a call that does a transaction's work (execute, apply) on ``w``.

        Such a call may take longer than request-timeout-s (a large load): that alone does
        not make the worker failed, or every worker would in turn be disabled while each
        really executes it. The worker fails when it stops answering its health check,
        asked every request-timeout-s while the call runs (WorkerUnavailable)."""
        task = asyncio.ensure_future(call)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.request_timeout)
                if done:
                    return task.result()
                await w.client.state()
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    @staticmethod
    def count_task(w: Worker, seconds: float, n: int = 1) -> None:
        w.completed_tasks += n
        w.task_time_s += seconds

    def close_db(self) -> None:
        if self._own_db:
            self.db.shutdown()
