"""Health checks and recovery: workers found out of sync are brought back to the log head.

Every health check reads each worker's state (seq, fingerprint, quads). A worker in
rotation that went back in time or reports another fingerprint than the log's at its
seq leaves rotation; one not in sync is recovered by incremental replay of the log, or
by full replication from an up-to-date worker (or the 'default' image) when the log
cannot replay to it or replay would take longer (docs/design/smart-replication.md,
replication.py).

A worker found ahead of the log by exactly what the log expected next (the master died,
or lost the probe's answer, between its execution and its record) is rolled forward:
the ordering records that group from the worker's executed journal (rollforward.py).
A new log and workers that already hold data: the most advanced becomes its base.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from master_service.cluster import replication, rollforward
from master_service.cluster.pool import REPLAY_BATCH, Worker, WorkerPool
from master_service.cluster.statuses import IN_SYNC, WorkerStatus
from master_service.cluster.worker_client import WorkerRefused, WorkerUnavailable
from master_service.cluster.write_path import WritePath
from master_service.txlog.log import State, TxLogError

log = logging.getLogger("txcluster.master")


class Recovery:
    """Health checks, roll-forward, replay and replication (module docstring)."""

    def __init__(self, pool: WorkerPool, writes: WritePath) -> None:
        self.pool, self.writes = pool, writes
        self._tasks: list[asyncio.Task] = []
        self._adopting = asyncio.Lock()
        # start() is done: the write path runs and is told what a roll-forward records.
        self._started = False

    async def start(self) -> None:
        """Read every worker's state before any recovery starts: a new log first adopts
        the most advanced worker holding data, and no worker is judged against the empty
        log meanwhile. A probe that executed a group this log never recorded (the master
        was killed in between) rolls the log forward, before anything judges it or fails
        those transactions."""
        pool = self.pool
        await asyncio.gather(*(self._read_state(w) for w in pool.workers.values()))
        for w in sorted(pool.workers.values(), key=lambda w: -w.seq):
            if w.seq > pool.head_seq:
                await self.roll_forward(w)

    async def started(self) -> None:
        """The write path runs: adopt existing data, then the first health check."""
        await self.adopt_existing_data()
        self._started = True
        await self.poll_all()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # ---- health ----

    async def poll_all(self) -> None:
        await asyncio.gather(*(self.poll(w) for w in list(self.pool.workers.values())))

    async def poll(self, w: Worker) -> None:
        """Health check; starts recovery of a worker that is not in sync."""
        pool = self.pool
        if w.url == pool.bulk_load_target or w.url in pool.restoring:
            return  # its state changes on purpose; commit_bulk_load or restore takes it over
        # The position known when the question is asked: a forward may finish (and move
        # w.seq) while the answer is on its way, and an answer taken before that apply is
        # then older than w.seq without the worker having gone anywhere.
        asked_at = w.seq
        try:
            st = await w.client.state()
        except (WorkerUnavailable, WorkerRefused) as exc:
            if w.status not in (WorkerStatus.REPLICATION_CLIENT,):
                pool.disable(w, WorkerStatus.OFF, str(exc))
            return
        w.size_bytes = st.get("size_bytes")
        if w.status in IN_SYNC:
            # A worker in rotation that restarted behind our back, or reports a state
            # the log never had at its seq, is out of sync.
            if not w.queue and st["seq"] == pool.head_seq and \
                    st["fingerprint"] != pool.head_fingerprint:
                pool.counters.fingerprint_mismatches += 1
                pool.disable(w, WorkerStatus.OUT_OF_SYNC, "fingerprint differs from the log")
            elif st["seq"] < asked_at or st["status"] == "OUT_OF_SYNC":
                pool.disable(w, WorkerStatus.OUT_OF_SYNC, "worker went back in time")
            else:
                return
        w.seq, w.fingerprint, w.quads = st["seq"], st["fingerprint"], st["quads"]
        if w.seq > pool.head_seq and not w.recovering and \
                w.not_rolled_forward != (w.seq, w.fingerprint):
            # Ahead of the log (e.g. the answer of its execute was lost): roll forward if
            # it executed what the log expects next; before a new log adopts its state,
            # which would leave those transactions to be executed again.
            await self.roll_forward(w)
        if w.quads > 0 and pool.log_is_new():
            # A worker holding data came back while the log has never committed anything
            # (a replaced master whose data-holding workers were down when it started):
            # the log adopts its state, or an empty worker would be replicated over it.
            await self.adopt_existing_data()
        self._recover_soon(w)

    def _recover_soon(self, w: Worker) -> None:
        """Start recovering ``w`` unless it is in sync or being recovered."""
        if not w.recovering and w.status not in IN_SYNC:
            w.recovering = True
            self._tasks = [t for t in self._tasks if not t.done()]
            self._tasks.append(asyncio.create_task(self._recover(w), name=f"recover {w.url}"))

    async def _read_state(self, w: Worker) -> None:
        with contextlib.suppress(WorkerUnavailable, WorkerRefused):
            st = await w.client.state()
            w.seq, w.fingerprint, w.quads = st["seq"], st["fingerprint"], st["quads"]

    async def adopt_existing_data(self) -> None:
        """A new log and workers that already hold data: the most advanced becomes the
        base of the log (e.g. a master replaced, or data bulk-loaded before)."""
        pool = self.pool
        async with self._adopting:
            if not pool.log_is_new():
                return
            known = [w for w in pool.workers.values() if w.seq >= 0 and w.quads > 0]
            if not known:
                return
            best = max(known, key=lambda w: (w.seq, w.quads))
            seq, fp, quads = best.seq, best.fingerprint, best.quads
            try:
                await pool.db(pool.txlog.reset_base, seq, fp, quads)
            except TxLogError:
                return  # a transaction was committed meanwhile: the log is not new
            pool.set_head(seq, fp, quads)
            # Workers in rotation at the empty state are now behind the log: recovered
            # (replicated from a worker holding the data) like any other.
            behind = [other for other in pool.in_sync()
                      if (other.seq, other.fingerprint) != (seq, fp)]
            for other in behind:
                pool.disable(other, WorkerStatus.OUT_OF_SYNC,
                             f"behind the state the new log adopted (seq {seq})")
            pool.note(f"new transaction log adopts the state of {best.url} (seq {seq})")
            if self._started:
                # At once, not at the next health check (up to health-interval-s later):
                # after an initial bulk load the loader waits for these replications.
                # (At the start, the first health check follows anyway.)
                for other in behind:
                    self._recover_soon(other)

    # ---- roll-forward ----

    async def roll_forward(self, w: Worker) -> bool:
        """Record what worker ``w`` executed after the log head when it is exactly what the
        log expects next (rollforward.py); True when the log moved to ``w``'s state."""
        pool, writes = self.pool, self.writes
        if writes.lock.locked() or writes.recording:
            # A group (executing or being recorded), a rollback or a restore is under
            # way: asked again at the next health check. Never wait for the lock here:
            # a rollback holds it while its restore polls the workers, and a worker
            # whose restore failed is still ahead (the master stayed "recovering" for
            # good).
            return False
        ordering = writes.ordering
        async with writes.quiet():  # no group executes meanwhile: the head stays put
            if w.seq <= pool.head_seq or ordering is None:
                return False
            head = State(pool.head_seq, pool.head_fingerprint, pool.head_quads)
            try:
                journal = await pool.while_alive(
                    w, w.client.journal(head.seq, rollforward.MAX_AHEAD))
                w.seq, w.fingerprint, w.quads = \
                    journal["seq"], journal["fingerprint"], journal["quads"]
                n = len(journal["entries"]) + len(journal["refused"])
                expected = await pool.db(ordering.expected_next, n)
                if expected is None:
                    raise rollforward.NoRollForward("the write path is returning to an "
                                                    "earlier state (a rollback is owed)")
                plan = rollforward.plan(head, expected, journal)
                await pool.db(ordering.record_rolled_forward, plan, time.time())
            except (WorkerUnavailable, WorkerRefused, rollforward.NoRollForward, TxLogError,
                    KeyError, TypeError) as exc:
                if isinstance(exc, WorkerUnavailable):
                    return False  # asked again at the next health check
                w.not_rolled_forward = (w.seq, w.fingerprint)
                pool.note(f"worker {w.url} is ahead of the log (seq {w.seq}, log at "
                          f"{head.seq}) and is not rolled forward: {exc}", logging.WARNING)
                return False
            writes.committed(w, plan.entries)
            if self._started:
                # The ordering may be retrying these very transactions: it gets their
                # answers.
                ordering.rolled_forward(plan)
            first, last = plan.entries[0][0], plan.entries[-1][0]
            failed = f", {len(plan.failures)} refused" if plan.failures else ""
            pool.note(f"worker {w.url} had executed {len(plan.entries)} transactions the log "
                      f"had not recorded (master crash): recorded them (seq {first}..{last}"
                      f"{failed})", logging.WARNING)
            return True

    # ---- recovery ----

    async def _recover(self, w: Worker) -> None:
        try:
            await self._recover_once(w)
        except (WorkerUnavailable, WorkerRefused) as exc:
            self.pool.disable(w, WorkerStatus.OFF if isinstance(exc, WorkerUnavailable)
                              else WorkerStatus.OUT_OF_SYNC, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # keep the master alive; the next poll retries
            log.exception("recovery of %s failed", w.url)
            w.last_error = f"recovery failed: {exc}"
        finally:
            w.recovering = False

    async def _recover_once(self, w: Worker) -> None:
        pool = self.pool
        forced = w.status == WorkerStatus.OUT_OF_SYNC_FORCED
        if w.status in (WorkerStatus.OFF, WorkerStatus.UNINITIALIZED):
            w.status = WorkerStatus.OUT_OF_SYNC
        known = await pool.db(pool.txlog.is_known_state, w.seq, w.fingerprint)
        base = await pool.db(pool.txlog.base)
        replay_s = await pool.db(pool.txlog.apply_durations, w.seq, pool.head_seq) \
            if known else 0.0
        others = [o for o in pool.workers.values() if o.url != w.url]
        decision = replication.decide(
            replication.WorkerView(w.seq, w.fingerprint, w.quads, forced),
            replication.LogView(pool.head_seq, base.seq, known, replay_s),
            self._storage_size(exclude=w.url), pool.params,
            other_worker_has_data=any(o.quads > 0 for o in others),
        )
        if decision.no_storage_size:
            pool.note(replication.NO_STORAGE_SIZE, logging.WARNING)
        if decision.action == "replicate":
            if decision.explanation:
                pool.note(decision.explanation)
            pool.note(f"{decision.reason.value}: worker {w.url}")
            if not await self._replicate(w):
                return
            await self._replay(w, after="a replication")
            return
        await self._replay(w)

    def _storage_size(self, exclude: str) -> int | None:
        for w in self.pool.in_sync():
            if w.url != exclude and w.size_bytes is not None:
                return w.size_bytes
        return None

    async def _replicate(self, w: Worker) -> bool:
        """Full replication: stream an up-to-date worker's image into ``w``."""
        pool = self.pool
        # A source already serving an image serves this one too: the receivers that
        # ask while it is written share it (worker_service/shared_images.py), so workers
        # brought back together (after an initial bulk load, say) replicate at once.
        sources = [s for s in pool.in_sync() if s.url != w.url and s.status in (
            WorkerStatus.ON, WorkerStatus.WAITING_WRITE, WorkerStatus.REPLICATION_SERVER)]
        if sources:
            src = min(sources, key=lambda s: (
                not s.serving, pool.router.stats.get(s.url).running
                if s.url in pool.router.stats else 0))
            source_url = f"{src.url}/cluster/image"
            if not pool.params.compression:
                source_url += "?compression=false"
        else:
            src = None
            backup = await pool.db(pool.txlog.backup, "default")
            if backup is None:
                w.last_error = "no worker can serve a replication and there is no 'default' image"
                pool.note(f"cannot replicate {w.url}: {w.last_error}", logging.ERROR)
                return False
            source_url = f"{backup.worker.rstrip('/')}/cluster/backups/default"
            pool.note(f"replicating {w.url} from the 'default' backup image")
        w.status = WorkerStatus.REPLICATION_CLIENT
        started = time.monotonic()
        with pool.serving(src) if src else contextlib.nullcontext():
            result = await w.client.pull_image(source_url)
        pool.counters.replications += 1
        pool.counters.replication_bytes += (src.size_bytes or 0) if src else 0
        w.status = WorkerStatus.OUT_OF_SYNC
        w.seq, w.fingerprint, w.quads = result["seq"], result["fingerprint"], result["quads"]
        pool.note(f"replication of {w.url} done in {time.monotonic() - started:.1f}s "
                  f"(seq {w.seq})")
        return True

    async def _replay(self, w: Worker, after: str | None = None) -> None:
        """Incremental replay of logged changesets until the worker is at the head.

        ``after`` names the operation that reportedly succeeded just before (a replication);
        an apply of this replay is one too. A worker found out of sync after one is
        OUT_OF_SYNC_FORCED: the spec's "Replicating (out of sync), forced" (detected out of
        sync after a reportedly successful replication or update execution).
        """
        pool = self.pool
        while True:
            if w.seq == pool.head_seq:
                if w.fingerprint != pool.head_fingerprint:
                    pool.counters.fingerprint_mismatches += 1
                    status, why = WorkerStatus.OUT_OF_SYNC, ""
                    if after is not None:
                        status, why = WorkerStatus.OUT_OF_SYNC_FORCED, f" after {after}"
                    pool.disable(w, status,
                                 f"at the head of the log with another fingerprint{why}")
                    return
                # No await between this check and the status change: the write path
                # forwards every later commit to this worker.
                w.status = WorkerStatus.ON
                w.last_error = None
                pool.note(f"worker {w.url} is in sync (seq {w.seq})")
                return
            entries = await pool.db(pool.txlog.entries, w.seq, REPLAY_BATCH)
            if not entries or entries[0].seq != w.seq + 1:
                if after is not None:
                    pool.disable(w, WorkerStatus.OUT_OF_SYNC_FORCED,
                                 f"log cannot replay to this worker after {after}")
                else:
                    pool.disable(w, WorkerStatus.OUT_OF_SYNC, "log cannot replay to this worker")
                return
            started = time.monotonic()
            result = await pool.while_alive(w, w.client.apply([_entry_wire(e) for e in entries]))
            pool.count_task(w, time.monotonic() - started, len(entries))
            w.seq, w.fingerprint, w.quads = result["seq"], result["fingerprint"], result["quads"]
            after = after or f"applying seq {entries[0].seq}..{entries[-1].seq}"


def _entry_wire(e) -> dict:
    return {"seq": e.seq, "txid": e.txid, "changeset": e.changeset,
            "expected_fingerprint": e.fingerprint}

