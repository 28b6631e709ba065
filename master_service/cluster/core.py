"""The cluster as one master sees it: worker pool, write path, recovery, backup/restore.

Runs on the master's asyncio loop. Transaction log calls go to one dedicated thread
(SQLite connection affinity; they block on fsync). The write path is one task: writes are
serialised in log order and concurrent clients are grouped (group commit):

    log pending (durable) -> probe executes the group (exact changesets + control queries)
    -> log changesets in the synchronised queue (durable) -> acknowledge clients
    -> forward changesets to every other in-sync worker (per-worker ordered queues)

(in strict consistency mode the acknowledgement waits for the forwarding too).
A probe found ahead of the log by exactly the group the log expected next (the master
died, or lost the probe's answer, between its execution and its record) is rolled
forward: the log records that group from the probe's executed journal (rollforward.py).
A worker that fails a forward or reports another fingerprint than the probe's leaves
rotation and the recovery loop brings it back by replay or full replication
(smart-replication.txt). Status changes that must not race a commit happen in code
with no ``await`` between the check and the change.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from master_service.cluster import replication, rollforward
from master_service.cluster.routing import Router
from master_service.cluster.statuses import IN_SYNC, READABLE, WorkerStatus
from master_service.cluster.worker_client import WorkerClient, WorkerRefused, WorkerUnavailable
from master_service.errors import BulkLoadRefused, NotWritable, NoWorkerAvailable, WriteFailed
from master_service.txlog.log import State, TxLogError

log = logging.getLogger("txcluster.master")

MAX_GROUP = 256
REPLAY_BATCH = 200
# While clients are writing, a forwarder waits this long before sending so that the
# groups committed meanwhile go to the worker in one request: forwarding is not on the
# acknowledgement path (eventual consistency), and each request costs the master CPU
# that the next group commit needs.
FORWARD_COALESCE_S = 0.003


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


class Cluster:
    def __init__(self, *, node_id: str, txlog, secret: bytes, worker_urls: list[str],
                 params: replication.Parameters, control_queries: list[str],
                 protect_single_worker: bool = True, read_only: bool = False,
                 mode: str = "NORMAL", consistency: str = "read-your-writes",
                 request_timeout: float = 30.0,
                 log_limits: tuple[int, float] = (100_000, 168.0),
                 on_workers_changed: Callable[[list[str]], None] | None = None,
                 peered: bool = False, tls: ssl.SSLContext | None = None,
                 agreement=None) -> None:
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
        self.head_fingerprint = "0" * 32
        self.head_quads = 0
        self.log_history = False  # TxLog.has_history(), kept current by _set_head
        self._restoring: set[str] = set()  # workers whose restore (restore()) is under way
        self.probe: str | None = None
        self._pending: list[tuple[str, list, asyncio.Future]] = []
        self._wake = asyncio.Event()
        self._db = ThreadPoolExecutor(1, thread_name_prefix="txlog")
        self._tasks: list[asyncio.Task] = []
        self._initial = list(worker_urls)
        self._adopting = asyncio.Lock()
        self._stopping = False
        self.events: list[tuple[float, str]] = []  # recent recovery messages, for status
        self.bulk_load_target: str | None = None  # worker whose bulk load is being committed
        # Peering (sync/driver.py): client writes go through the TxLog sync protocol and
        # the driver hands agreed transactions to execute_agreed. Pending transactions in
        # the log are then payloads waiting for agreement, not writes lost by a crash.
        self.peered = peered
        self.agreement = agreement  # AgreementLog: what a peered master expects to execute
        self.sync_submit: Callable[[list[dict]], Awaitable[dict]] | None = None
        self._write_lock = asyncio.Lock()  # one group at a time on the probe, either path
        # Agreed positions rolled forward while the driver runs: pos -> (txid, answer),
        # handed to the driver's next execute_agreed instead of executing them again.
        self._rolled_forward: dict[int, tuple[str, Any]] = {}
        self._started = False

    # ---- lifecycle ----

    async def db(self, fn: Callable, *args) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._db, fn, *args)

    async def start(self) -> None:
        head = await self.db(self.txlog.head)
        self.log_history = await self.db(self.txlog.has_history)
        self._set_head(head.seq, head.fingerprint, head.quads)
        for url in self._initial:
            self._attach(url, readable=True)
        # Read every worker's state before any recovery starts: a new log first adopts
        # the most advanced worker holding data, and no worker is judged against the
        # empty log meanwhile.
        await asyncio.gather(*(self._read_state(w) for w in self.workers.values()))
        # A probe that executed a group this log never recorded (the master was killed in
        # between) rolls the log forward, before anything judges it or fails those
        # transactions.
        for w in sorted(self.workers.values(), key=lambda w: -w.seq):
            if w.seq > self.head_seq:
                await self._roll_forward(w)
        failed = 0 if self.peered else await self.db(self._fail_unacknowledged)
        if failed:
            log.warning("%d transactions logged before a restart were never acknowledged: "
                        "marked failed", failed)
        await self._adopt_existing_data()
        self._started = True
        await self.poll_all()
        self._tasks.append(asyncio.create_task(self._writer(), name="writer"))

    def _fail_unacknowledged(self) -> int:
        pending = self.txlog.pending()
        for tx in pending:
            self.txlog.mark_failed(tx.txid, "master restarted before acknowledging")
        return len(pending)

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        for w in self.workers.values():
            if w.forwarder:
                w.forwarder.cancel()
        for task in [*self._tasks, *(w.forwarder for w in self.workers.values() if w.forwarder)]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for w in self.workers.values():
            await w.client.close()
        for _tx, _ops, fut in self._pending:
            if not fut.done():
                fut.set_exception(NotWritable("master is shutting down"))
        self._db.shutdown(wait=True)

    def note(self, message: str, level: int = logging.INFO) -> None:
        log.log(level, message)
        self.events.append((time.time(), message))
        del self.events[:-100]

    # ---- worker pool ----

    def _attach(self, url: str, readable: bool) -> Worker:
        w = Worker(url, WorkerClient(url, self.secret, self.request_timeout, self.tls),
                   readable=readable)
        self.workers[url] = w
        w.forwarder = asyncio.create_task(self._forwarder(w), name=f"forward {url}")
        return w

    async def add_worker(self, url: str, readable: bool = True) -> Worker:
        url = url.rstrip("/")
        if url in self.workers:
            raise ValueError(f"worker {url} is already part of the cluster")
        w = self._attach(url, readable)
        self._workers_changed()
        await self.poll(w)
        return w

    async def remove_worker(self, url: str) -> None:
        url = url.rstrip("/")
        w = self.workers.pop(url, None)
        if w is None:
            raise KeyError(f"unknown worker {url}")
        if w.forwarder:
            w.forwarder.cancel()
        await w.client.close()
        self.router.forget(url)
        if self.probe == url:
            self.probe = None
        self._workers_changed()

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

    def _workers_changed(self) -> None:
        if self.on_workers_changed:
            self.on_workers_changed(list(self.workers))

    def in_sync(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.status in IN_SYNC]

    def readable(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.status in READABLE and w.readable]

    def writable_reason(self) -> str | None:
        """None when the cluster takes writes, else why not (cluster-basics.txt)."""
        if self.read_only:
            return "this master is read-only"
        if self.mode == "MUTE":
            return "this master is muted: it takes transactions only from its peers"
        return self.execution_reason()

    def execution_reason(self) -> str | None:
        """None when the workers can execute transactions (a muted master still executes
        its peers' transactions), else why not."""
        if self.bulk_load_target:
            return f"an initial bulk load is being committed on {self.bulk_load_target}"
        n = len(self.in_sync())
        if n == 0:
            return "no worker is in sync"
        # With two workers the master goes read-only while one recovers: a single copy
        # is not risked unless protect-single-worker is off (how-the-cluster-works.txt).
        if n == 1 and self.protect_single_worker and len(self.workers) > 1:
            return ("only one worker is in sync and protect-single-worker is on: "
                    "writes resume when another worker has recovered")
        return None

    def status_code(self) -> int:
        """0 available, 1 needs attention / not writable, 2 no workers (spec README)."""
        if not self.readable():
            return 2
        if self.writable_reason() or any(w.status not in IN_SYNC for w in self.workers.values()):
            return 1
        return 0

    def _disable(self, w: Worker, status: WorkerStatus, error: str) -> None:
        if w.status != status:
            self.note(f"worker {w.url} -> {status}: {error}", logging.WARNING)
        w.status, w.last_error = status, error
        w.queue.clear()
        if self.probe == w.url:
            self.probe = None

    # ---- health and recovery ----

    async def poll_all(self) -> None:
        await asyncio.gather(*(self.poll(w) for w in list(self.workers.values())))

    async def poll(self, w: Worker) -> None:
        """Health check; starts recovery of a worker that is not in sync."""
        if w.url == self.bulk_load_target or w.url in self._restoring:
            return  # its state changes on purpose; commit_bulk_load or restore takes it over
        try:
            st = await w.client.state()
        except (WorkerUnavailable, WorkerRefused) as exc:
            if w.status not in (WorkerStatus.REPLICATION_CLIENT,):
                self._disable(w, WorkerStatus.OFF, str(exc))
            return
        w.size_bytes = st.get("size_bytes")
        if w.status in IN_SYNC:
            # A worker in rotation that restarted behind our back, or reports a state
            # the log never had at its seq, is out of sync.
            if not w.queue and st["seq"] == self.head_seq and \
                    st["fingerprint"] != self.head_fingerprint:
                self.counters.fingerprint_mismatches += 1
                self._disable(w, WorkerStatus.OUT_OF_SYNC, "fingerprint differs from the log")
            elif st["seq"] < w.seq or st["status"] == "OUT_OF_SYNC":
                self._disable(w, WorkerStatus.OUT_OF_SYNC, "worker went back in time")
            else:
                return
        w.seq, w.fingerprint, w.quads = st["seq"], st["fingerprint"], st["quads"]
        if w.seq > self.head_seq and not w.recovering and \
                w.not_rolled_forward != (w.seq, w.fingerprint):
            # Ahead of the log (e.g. the answer of its execute was lost): roll forward if
            # it executed what the log expects next; before a new log adopts its state,
            # which would leave those transactions to be executed again.
            await self._roll_forward(w)
        if w.quads > 0 and self._log_is_new():
            # A worker holding data came back while the log has never committed anything
            # (a replaced master whose data-holding workers were down when it started):
            # the log adopts its state, or an empty worker would be replicated over it.
            await self._adopt_existing_data()
        if not w.recovering and w.status not in IN_SYNC:
            w.recovering = True
            self._tasks.append(asyncio.create_task(self._recover(w), name=f"recover {w.url}"))

    async def _read_state(self, w: Worker) -> None:
        with contextlib.suppress(WorkerUnavailable, WorkerRefused):
            st = await w.client.state()
            w.seq, w.fingerprint, w.quads = st["seq"], st["fingerprint"], st["quads"]

    def _log_is_new(self) -> bool:
        """The log has never committed a transaction nor adopted a state. Not the same as
        a head at the empty state: a split recovery rolls a log back to agreed position 0,
        and a worker not restored yet must not become the base of the log then (Molecule
        two_dc: the log adopted it mid-rollback and the recovery failed for good)."""
        return not self.log_history and self.head_seq == 0 and \
            self.head_fingerprint == "0" * 32

    def _set_head(self, seq: int, fingerprint: str, quads: int) -> None:
        self.head_seq, self.head_fingerprint, self.head_quads = seq, fingerprint, quads
        if (seq, fingerprint) != (0, "0" * 32):
            self.log_history = True

    async def _adopt_existing_data(self) -> None:
        """A new log and workers that already hold data: the most advanced becomes the
        base of the log (e.g. a master replaced, or data bulk-loaded before)."""
        async with self._adopting:
            if not self._log_is_new():
                return
            known = [w for w in self.workers.values() if w.seq >= 0 and w.quads > 0]
            if not known:
                return
            best = max(known, key=lambda w: (w.seq, w.quads))
            seq, fp, quads = best.seq, best.fingerprint, best.quads
            try:
                await self.db(self.txlog.reset_base, seq, fp, quads)
            except TxLogError:
                return  # a transaction was committed meanwhile: the log is not new
            self._set_head(seq, fp, quads)
            # Workers in rotation at the empty state are now behind the log: recovered
            # (replicated from a worker holding the data) like any other.
            for other in self.in_sync():
                if (other.seq, other.fingerprint) != (seq, fp):
                    self._disable(other, WorkerStatus.OUT_OF_SYNC,
                                  f"behind the state the new log adopted (seq {seq})")
            self.note(f"new transaction log adopts the state of {best.url} (seq {seq})")

    async def _roll_forward(self, w: Worker) -> bool:
        """Record what worker ``w`` executed after the log head when it is exactly what the
        log expects next (rollforward.py); True when the log moved to ``w``'s state."""
        if self._write_lock.locked():
            # A group, a rollback or a restore is under way: asked again at the next
            # health check. Never wait for the lock here: a split rollback holds it while
            # its restore polls the workers, and a worker whose restore failed is still
            # ahead (Molecule two_dc: the master stayed "recovering" for good).
            return False
        async with self._write_lock:  # no group executes meanwhile: the head stays put
            if w.seq <= self.head_seq or (self.peered and self.agreement is None):
                return False
            head = State(self.head_seq, self.head_fingerprint, self.head_quads)
            try:
                journal = await self._while_alive(
                    w, w.client.journal(head.seq, rollforward.MAX_AHEAD))
                w.seq, w.fingerprint, w.quads = \
                    journal["seq"], journal["fingerprint"], journal["quads"]
                n = len(journal["entries"]) + len(journal["refused"])
                expected = await self.db(self._expected_next, n)
                if expected is None:
                    raise rollforward.NoRollForward("a split recovery's rollback is owed")
                plan = rollforward.plan(head, expected, journal)
                if self.peered:
                    await self.db(self.agreement.record_executed, plan.done, plan.entries,
                                  plan.failures, time.time())
                else:
                    await self.db(self.txlog.record_group, [], plan.entries, plan.failures)
            except (WorkerUnavailable, WorkerRefused, rollforward.NoRollForward, TxLogError,
                    KeyError, TypeError) as exc:
                if isinstance(exc, WorkerUnavailable):
                    return False  # asked again at the next health check
                w.not_rolled_forward = (w.seq, w.fingerprint)
                self.note(f"worker {w.url} is ahead of the log (seq {w.seq}, log at "
                          f"{head.seq}) and is not rolled forward: {exc}", logging.WARNING)
                return False
            self._committed(w, plan.entries)
            if self.peered and self._started:
                # The driver may be retrying these very positions: it gets their answers.
                for pos, txid, *_ in plan.done:
                    answer = plan.answers[txid]
                    self._rolled_forward[pos] = (txid, answer if isinstance(answer, dict)
                                                 else WriteFailed(*answer))
            first, last = plan.entries[0][0], plan.entries[-1][0]
            failed = f", {len(plan.failures)} refused" if plan.failures else ""
            self.note(f"worker {w.url} had executed {len(plan.entries)} transactions the log "
                      f"had not recorded (master crash): recorded them (seq {first}..{last}"
                      f"{failed})", logging.WARNING)
            return True

    def _expected_next(self, limit: int) -> list[rollforward.Expected] | None:
        """What the log expects to be executed next (txlog thread): a peered master's
        next agreed transactions in agreed order, otherwise pending transactions in log
        order. None when a split recovery's rollback is owed: the agreed queue after it
        is being renegotiated."""
        if self.peered:
            if self.agreement.rollback_owed() is not None:
                return None
            pos = self.agreement.executed()[0]
            return [rollforward.Expected(a.txid, a.pos)
                    for a in self.agreement.to_execute(pos, limit)]
        return [rollforward.Expected(t.txid) for t in self.txlog.pending()[:limit]]

    async def _recover(self, w: Worker) -> None:
        try:
            await self._recover_once(w)
        except (WorkerUnavailable, WorkerRefused) as exc:
            self._disable(w, WorkerStatus.OFF if isinstance(exc, WorkerUnavailable)
                          else WorkerStatus.OUT_OF_SYNC, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # keep the master alive; the next poll retries
            log.exception("recovery of %s failed", w.url)
            w.last_error = f"recovery failed: {exc}"
        finally:
            w.recovering = False

    async def _recover_once(self, w: Worker) -> None:
        forced = w.status == WorkerStatus.OUT_OF_SYNC_FORCED
        if w.status in (WorkerStatus.OFF, WorkerStatus.UNINITIALIZED):
            w.status = WorkerStatus.OUT_OF_SYNC
        known = await self.db(self.txlog.is_known_state, w.seq, w.fingerprint)
        base = await self.db(self.txlog.base)
        replay_s = await self.db(self.txlog.apply_durations, w.seq, self.head_seq) \
            if known else 0.0
        size = self._storage_size(exclude=w.url)
        decision = replication.decide(
            replication.WorkerView(w.seq, w.fingerprint, w.quads, forced),
            replication.LogView(self.head_seq, base.seq, known, replay_s),
            size, self.params, cluster_has_data=self.head_quads > 0 or self.head_seq > 0,
        )
        if decision.action == "replicate":
            if decision.explanation:
                self.note(decision.explanation)
            self.note(f"{decision.reason.value}: worker {w.url}")
            if not await self._replicate(w):
                return
        await self._replay(w)

    def _storage_size(self, exclude: str) -> int | None:
        for w in self.in_sync():
            if w.url != exclude and w.size_bytes is not None:
                return w.size_bytes
        self.note(replication.NO_STORAGE_SIZE, logging.WARNING)
        return None

    async def _replicate(self, w: Worker) -> bool:
        """Full replication: stream an up-to-date worker's image into ``w``."""
        sources = [s for s in self.in_sync() if s.url != w.url and s.status == WorkerStatus.ON]
        if sources:
            src = min(sources, key=lambda s: self.router.stats.get(s.url).running
                      if s.url in self.router.stats else 0)
            source_url = f"{src.url}/cluster/image"
        else:
            src = None
            backup = await self.db(self.txlog.backup, "default")
            if backup is None:
                w.last_error = "no worker can serve a replication and there is no 'default' image"
                self.note(f"cannot replicate {w.url}: {w.last_error}", logging.ERROR)
                return False
            source_url = f"{backup.worker.rstrip('/')}/cluster/backups/default"
            self.note(f"replicating {w.url} from the 'default' backup image")
        w.status = WorkerStatus.REPLICATION_CLIENT
        if src:
            src.status = WorkerStatus.REPLICATION_SERVER
        started = time.monotonic()
        try:
            result = await w.client.pull_image(source_url)
        finally:
            if src and src.status == WorkerStatus.REPLICATION_SERVER:
                src.status = WorkerStatus.ON
        self.counters.replications += 1
        self.counters.replication_bytes += (src.size_bytes or 0) if src else 0
        w.status = WorkerStatus.OUT_OF_SYNC
        w.seq, w.fingerprint, w.quads = result["seq"], result["fingerprint"], result["quads"]
        self.note(f"replication of {w.url} done in {time.monotonic() - started:.1f}s "
                  f"(seq {w.seq})")
        return True

    async def _replay(self, w: Worker) -> None:
        """Incremental replay of logged changesets until the worker is at the head."""
        while True:
            if w.seq == self.head_seq:
                if w.fingerprint != self.head_fingerprint:
                    self.counters.fingerprint_mismatches += 1
                    self._disable(w, WorkerStatus.OUT_OF_SYNC,
                                  "at the head of the log with another fingerprint")
                    return
                # No await between this check and the status change: the writer
                # forwards every later commit to this worker.
                w.status = WorkerStatus.ON
                w.last_error = None
                self.note(f"worker {w.url} is in sync (seq {w.seq})")
                return
            entries = await self.db(self.txlog.entries, w.seq, REPLAY_BATCH)
            if not entries or entries[0].seq != w.seq + 1:
                self._disable(w, WorkerStatus.OUT_OF_SYNC, "log cannot replay to this worker")
                return
            started = time.monotonic()
            result = await self._while_alive(w, w.client.apply([_entry_wire(e) for e in entries]))
            self._count_task(w, time.monotonic() - started, len(entries))
            w.seq, w.fingerprint, w.quads = result["seq"], result["fingerprint"], result["quads"]

    async def _while_alive(self, w: Worker, call: Coroutine[Any, Any, Any]) -> Any:
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

    def _count_task(self, w: Worker, seconds: float, n: int = 1) -> None:
        w.completed_tasks += n
        w.task_time_s += seconds

    # ---- write path ----

    async def write(self, operations: list[dict]) -> dict:
        """Log, execute on the probe, forward; returns the transaction's seq/fingerprint."""
        reason = self.writable_reason()
        if reason:
            raise NotWritable(f"cluster is not writable: {reason}")
        if self.sync_submit is not None:
            self.counters.running_writes += 1
            try:
                result = await self.sync_submit(operations)
                self.counters.completed_writes += 1
                return result
            except Exception:
                self.counters.failed_writes += 1
                raise
            finally:
                self.counters.running_writes -= 1
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending.append((str(uuid.uuid4()), operations, fut))
        self._wake.set()
        self.counters.running_writes += 1
        try:
            return await fut
        finally:
            self.counters.running_writes -= 1

    @property
    def pending_writes(self) -> int:
        return len(self._pending)

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                group = self._pending[:MAX_GROUP]
                del self._pending[:MAX_GROUP]
                try:
                    async with self._write_lock:
                        await self._commit_group(group)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.exception("write group failed")
                    for _txid, _ops, fut in group:
                        if not fut.done():
                            fut.set_exception(WriteFailed(503, f"write failed: {exc}"))

    def _choose_probe(self) -> Worker | None:
        cur = self.workers.get(self.probe) if self.probe else None
        if cur and cur.status in IN_SYNC and not cur.queue and cur.readable:
            return cur
        # A drained worker (set_readable) is the probe only when no other one can be.
        for w in sorted(self.in_sync(), key=lambda w: not w.readable):
            if not w.queue and w.seq == self.head_seq:
                self.probe = w.url
                return w
        return None

    async def _commit_group(self, group: list[tuple[str, list, asyncio.Future]]) -> None:
        txs = [{"txid": txid, "operations": ops} for txid, ops, _ in group]
        try:
            probe, response, started = await self._execute_on_probe(txs, self.writable_reason)
        except NotWritable as exc:
            for _txid, _ops, fut in group:
                fut.set_exception(exc)
            self.counters.failed_writes += len(group)
            return
        self._count_task(probe, time.monotonic() - started, len(group))
        self.counters.write_groups += 1
        entries, failures = [], []
        for (txid, _ops, _fut), res in zip(group, response["results"], strict=True):
            if res["ok"]:
                entries.append((res["seq"], txid, res["changeset"], res["fingerprint"],
                                res["quads"], res["duration_s"]))
            else:
                failures.append((txid, res))
        now = time.time()
        # One durable commit for the whole group; nothing is acknowledged before it.
        await self.db(self.txlog.record_group,
                      [(txid, now, self.node_id, ops) for txid, ops, _ in group],
                      entries, [(t, r["error"]) for t, r in failures])
        self._committed(probe, entries)
        if self.strict and entries:
            await self._wait_forwarded(self.head_seq)
        by_txid = {e[1]: e for e in entries}
        fail_by_txid = dict(failures)
        for txid, _ops, fut in group:
            if txid in by_txid:
                e = by_txid[txid]
                fut.set_result({"txid": txid, "seq": e[0], "fingerprint": e[3]})
                self.counters.completed_writes += 1
            else:
                res = fail_by_txid[txid]
                fut.set_exception(WriteFailed(res["status"], res["error"]))
                self.counters.failed_writes += 1

    async def _execute_on_probe(self, txs: list[dict], reason_now: Callable[[], str | None]
                                ) -> tuple[Worker, dict, float]:
        """Execute a group on the probe: (probe, its response, start time); NotWritable
        when ``reason_now`` says the cluster can't execute or no worker can be the probe."""
        while True:
            reason = reason_now()
            probe = None if reason else self._choose_probe()
            if probe is None and reason is None and await self._wait_for_probe(reason_now):
                # The probe was lost while every other in-sync worker still had forwards
                # in flight (none at the head yet): the cluster is writable, so wait for
                # one to catch up rather than refuse the group (cluster-basics.txt: with
                # three workers the cluster stays fully functional on any node failure).
                continue
            if probe is None:
                msg = reason or "no in-sync worker can act as probe"
                raise NotWritable(f"cluster is not writable: {msg}")
            started = time.monotonic()
            try:
                response = await self._while_alive(probe, probe.client.execute(
                    self.head_seq + 1, txs, self.control_queries))
            except (WorkerUnavailable, WorkerRefused) as exc:
                # The probe may or may not have executed the group; either way its state
                # is now unknown to the log, so it is recovered like any other worker.
                self._disable(probe, WorkerStatus.OFF if isinstance(exc, WorkerUnavailable)
                              else WorkerStatus.OUT_OF_SYNC, f"probe failed: {exc}")
                continue
            return probe, response, started

    def _committed(self, probe: Worker, entries: list[tuple]) -> None:
        """The log holds ``entries`` durably: move the head, queue the forwards.

        Synchronous from here to the forwarding: recovery sees either the old head (and
        replays) or the new one with the entries queued."""
        if not entries:
            return
        last = entries[-1]
        self._set_head(last[0], last[3], last[4])
        probe.seq, probe.fingerprint, probe.quads = last[0], last[3], last[4]
        self._positions_advanced()
        wires = [{"seq": e[0], "txid": e[1], "changeset": e[2],
                  "expected_fingerprint": e[3]} for e in entries]
        for w in self.in_sync():
            if w is not probe:
                w.queue.extend(wires)
                w.wake.set()

    async def execute_agreed(self, batch: Sequence, record: Callable[..., None]) -> dict:
        """Execute transactions agreed by the sync protocol, in their agreed order.

        ``batch``: items with pos, txid, operations (agreement.Agreed). ``record(done,
        entries, failures, now)`` makes the outcome durable in one SQLite transaction
        (AgreementLog.record_executed). Returns txid -> the client's answer: a dict like
        ``write``'s, or a WriteFailed. NotWritable when no worker can execute now: the
        transactions stay agreed and the driver retries."""
        async with self._write_lock:
            answers: dict[str, Any] = {}
            if self._rolled_forward:
                batch = await self._take_rolled_forward(batch, answers)
                if not batch:
                    return answers
            txs = [{"txid": a.txid, "operations": a.operations} for a in batch]
            probe, response, started = await self._execute_on_probe(txs, self.execution_reason)
            self._count_task(probe, time.monotonic() - started, len(batch))
            self.counters.write_groups += 1
            entries, failures, done = [], [], []
            fp, quads = self.head_fingerprint, self.head_quads
            for a, res in zip(batch, response["results"], strict=True):
                if res["ok"]:
                    fp, quads = res["fingerprint"], res["quads"]
                    entries.append((res["seq"], a.txid, res["changeset"], fp, quads,
                                    res["duration_s"]))
                    answers[a.txid] = {"txid": a.txid, "seq": res["seq"], "fingerprint": fp,
                                       "position": a.pos}
                else:
                    failures.append((a.txid, res["error"]))
                    answers[a.txid] = WriteFailed(res["status"], res["error"])
                done.append((a.pos, a.txid, fp, quads))
            await self.db(record, done, entries, failures, time.time())
            self._committed(probe, entries)
        if self.strict and entries:
            await self._wait_forwarded(self.head_seq)
        return answers

    async def _take_rolled_forward(self, batch: Sequence, answers: dict) -> list:
        """The part of ``batch`` not executed yet: positions a roll-forward recorded meanwhile
        are answered from it (into ``answers``), never executed twice."""
        executed = (await self.db(self.agreement.executed))[0]
        for a in batch:
            if a.pos <= executed:
                txid, answer = self._rolled_forward.pop(a.pos, (None, None))
                if txid == a.txid:
                    answers[a.txid] = answer
        for pos in [p for p in self._rolled_forward if p <= executed and p < batch[0].pos]:
            del self._rolled_forward[pos]  # the driver is past them
        return [a for a in batch if a.pos > executed]

    async def _wait_for_probe(self, reason_now: Callable[[], str | None]) -> bool:
        """Wait (at most request_timeout) until an in-sync worker has applied its queued
        forwards and can be the probe, or the cluster stops being writable; False when
        neither happened in time."""
        deadline = time.monotonic() + self.request_timeout
        while time.monotonic() < deadline:
            await asyncio.sleep(0.002)
            if reason_now() is not None or any(
                    not w.queue and w.seq == self.head_seq for w in self.in_sync()):
                return True
        return False

    async def _wait_forwarded(self, seq: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(w.seq >= seq for w in self.in_sync()):
                return
            await asyncio.sleep(0.001)

    async def _forwarder(self, w: Worker) -> None:
        """Sends queued changesets to one worker, in order, coalescing groups."""
        while True:
            await w.wake.wait()
            w.wake.clear()
            if self.counters.running_writes and not self.strict:
                await asyncio.sleep(FORWARD_COALESCE_S)
            while w.queue and w.status in IN_SYNC:
                batch = w.queue[:REPLAY_BATCH]
                if w.status == WorkerStatus.ON:
                    w.status = WorkerStatus.WRITING
                started = time.monotonic()
                try:
                    result = await self._while_alive(w, w.client.apply(batch))
                except WorkerUnavailable as exc:
                    self._disable(w, WorkerStatus.OFF, f"forward failed: {exc}")
                    break
                except WorkerRefused as exc:
                    # It could not take the probe's changeset: it reported (or would
                    # reach) a fingerprint other than the probe's.
                    status = WorkerStatus.OUT_OF_SYNC_FORCED if exc.status == 409 \
                        else WorkerStatus.OUT_OF_SYNC
                    self.counters.fingerprint_mismatches += exc.status == 409
                    self._disable(w, status, f"forward refused: {exc}")
                    break
                self._count_task(w, time.monotonic() - started, len(batch))
                del w.queue[:len(batch)]
                w.seq, w.fingerprint, w.quads = result["seq"], result["fingerprint"], \
                    result["quads"]
                self._positions_advanced()
                if w.status == WorkerStatus.WRITING:
                    w.status = WorkerStatus.ON

    # ---- reads ----

    def read_floor(self, up_to_date: bool = False) -> int | None:
        """The position a read arriving now must see: the head of the log (every write
        this master acknowledged, and those committed but not yet answered) under
        read-your-writes, strict, or a client's ``X-GraphDB-Local-Consistency:
        updating``; None under eventual consistency (any readable worker will do)."""
        if up_to_date or self.consistency != "eventual":
            return self.head_seq
        return None

    def choose_reader(self, tried: set[str], floor: int | None) -> Worker | None:
        """The readable worker with the fewest running reads among those that have
        applied the log up to ``floor`` (routing.py); None when there is none now."""
        if floor is not None:
            # A split rollback can move the head back below a read's floor: the state
            # the read waited for is no longer the cluster's.
            floor = min(floor, self.head_seq)
        candidates = [w.url for w in self.readable()
                      if floor is None or w.seq >= floor]
        url = self.router.choose(candidates, exclude=tried)
        return self.workers.get(url) if url else None

    async def reader_for(self, tried: set[str], floor: int | None) -> Worker | None:
        """As ``choose_reader``, waiting (at most ``request_timeout``) for a forward to
        bring a worker up to ``floor`` when none is there yet; None when no worker got
        there in time, or no untried readable worker is left. Never an older one."""
        deadline = time.monotonic() + self.request_timeout
        while True:
            w = self.choose_reader(tried, floor)
            if w is not None or floor is None:
                return w
            if not any(x.url not in tried for x in self.readable()):
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            # Woken by the next worker position change; bounded so that a worker
            # recovered by replication (no forward) is noticed too.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._advanced.wait(), min(left, 0.05))

    def _positions_advanced(self) -> None:
        """A worker's applied position moved: wake the reads waiting for it."""
        self._advanced.set()
        self._advanced = asyncio.Event()

    # ---- housekeeping ----

    async def prune(self) -> int:
        dropped = await self.db(self.txlog.prune, self.log_max_size, self.log_max_depth_h,
                                time.time())
        if dropped:
            log.info("pruned %d transactions from the log", dropped)
        return dropped

    # ---- initial bulk load (txcluster load --initial) ----

    def bulk_load_problem(self) -> str | None:
        """Why this cluster cannot take an initial bulk load now, or None."""
        if not self._log_is_new():
            return (f"the transaction log is not new (head at seq {self.head_seq} with "
                    f"{self.head_quads} quads): an initial bulk load needs a cluster that "
                    f"never committed a transaction; load without --initial")
        full = [w.url for w in self.workers.values() if w.quads > 0]
        if full:
            return f"workers hold data already: {', '.join(full)}"
        return None

    async def commit_bulk_load(self, url: str, load_id: str, fingerprint: str,
                               quads: int) -> dict:
        """Commit a bulk load staged on worker ``url`` and make its state the base of
        the new log (``_adopt_existing_data``); the other workers are then replicated
        from it ("Replicating (empty)").

        Client writes are refused while it runs, and the worker installs the data only
        if it is still empty, so no transaction can come between the worker's new state
        and the log's adoption of it (worker_service/bulk_load.py)."""
        w = self.workers.get(url.rstrip("/"))
        if w is None:
            raise KeyError(f"unknown worker {url}")
        if problem := self.bulk_load_problem():
            raise BulkLoadRefused(problem)
        self.bulk_load_target = w.url
        try:
            # Writes that passed the writable check before it changed finish first.
            deadline = time.monotonic() + self.request_timeout
            while self.counters.running_writes and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            problem = self.bulk_load_problem() or (
                "client writes are still running" if self.counters.running_writes else None)
            if problem:
                raise BulkLoadRefused(problem)
            result = await self._while_alive(
                w, w.client.bulk_load_commit(load_id, fingerprint, quads))
            w.seq, w.fingerprint, w.quads = result["seq"], result["fingerprint"], \
                result["quads"]
            await self._adopt_existing_data()
        finally:
            self.bulk_load_target = None
        if (self.head_seq, self.head_fingerprint) != (w.seq, w.fingerprint):
            raise BulkLoadRefused(f"the log did not adopt the state of {w.url}")
        self.note(f"initial bulk load '{load_id}': {w.quads} quads on {w.url} "
                  f"(fingerprint {w.fingerprint}) are the base of the log")
        return {"seq": self.head_seq, "fingerprint": self.head_fingerprint,
                "quads": self.head_quads, "worker": w.url}

    # ---- backup / restore ----

    async def backup(self, name: str) -> dict:
        """An up-to-date worker writes a named image (cluster-basics.txt, Cluster backup)."""
        candidates = [w for w in self.in_sync() if w.status == WorkerStatus.ON and not w.queue]
        if not candidates:
            raise NoWorkerAvailable("no up-to-date worker can make a backup")
        # Prefer a worker that is not the probe, so writes go on undisturbed.
        w = next((c for c in candidates if c.url != self.probe), candidates[0])
        w.status = WorkerStatus.REPLICATION_SERVER
        try:
            manifest = await w.client.backup(name)
        finally:
            if w.status == WorkerStatus.REPLICATION_SERVER:
                w.status = WorkerStatus.ON
        record = {"name": name, "created": time.time(), "seq": manifest["seq"],
                  "fingerprint": manifest["fingerprint"], "quads": manifest["quads"],
                  "worker": w.url, "sha256": manifest["sha256"], "bytes": manifest["bytes"],
                  "path": f"{w.url}/cluster/backups/{name}"}
        await self.db(self.txlog.record_backup, record)
        self.note(f"backup '{name}' written by {w.url} at seq {manifest['seq']}")
        return record

    async def rollback(self, name: str, forget_after: Callable[[int], None]) -> dict:
        """Split recovery (txlog-sync-protocol.txt): the data centre returns to the state of
        a backup taken at the split. ``forget_after(seq)`` drops the log's entries after
        the image's seq (their transactions will be executed again in the order agreed
        after the recovery); then every worker is restored from the image."""
        record = await self.db(self.txlog.backup, name)
        if record is None:
            raise KeyError(f"no backup named '{name}'")
        async with self._write_lock:
            await self.db(forget_after, record.seq)
            head = await self.db(self.txlog.head)
            if (head.seq, head.fingerprint) != (record.seq, record.fingerprint):
                raise TxLogError(f"the log at seq {head.seq} ({head.fingerprint}) is not the "
                                 f"state of backup '{name}' ({record.fingerprint})")
            self._set_head(head.seq, head.fingerprint, head.quads)
            return await self.restore(name)

    async def restore(self, name: str) -> dict:
        """Every worker is restored from the image, then replays the log after it."""
        record = await self.db(self.txlog.backup, name)
        if record is None:
            raise KeyError(f"no backup named '{name}'")
        holder = record.worker.rstrip("/")
        results = {}
        for w in list(self.workers.values()):
            self._disable(w, WorkerStatus.REPLICATION_CLIENT, f"restoring from image '{name}'")
        # Until its own restore answered, a worker's state is the old one: the health
        # check leaves it alone (recovering it meanwhile would race the restore).
        self._restoring = set(self.workers)
        try:
            for w in list(self.workers.values()):
                try:
                    if w.url == holder:
                        res = await w.client.restore(name=name)
                    else:
                        res = await w.client.restore(source=f"{holder}/cluster/backups/{name}")
                    w.seq, w.fingerprint, w.quads = res["seq"], res["fingerprint"], res["quads"]
                    w.status = WorkerStatus.OUT_OF_SYNC
                    results[w.url] = "restored"
                except (WorkerUnavailable, WorkerRefused) as exc:
                    self._disable(w, WorkerStatus.OFF, f"restore failed: {exc}")
                    results[w.url] = f"failed: {exc}"
                finally:
                    self._restoring.discard(w.url)
        finally:
            self._restoring = set()
        self.note(f"restored workers from image '{name}' (seq {record.seq}); replaying")
        await self.poll_all()
        return {"backup": dataclasses.asdict(record), "workers": results}


def _entry_wire(e) -> dict:
    return {"seq": e.seq, "txid": e.txid, "changeset": e.changeset,
            "expected_fingerprint": e.fingerprint}
