"""The cluster as one master sees it: the façade the APIs and the master process use.

It is the worker pool (pool.py: workers, statuses, the log head, writability) and
composes the parts that act on it, each with its own state: the write path
(write_path.py: probe, forwards, the one ``execute``, and the ordering client writes go
through), recovery (recovery.py: health checks, roll-forward, replay, replication),
images (images.py: backup, restore, rollback, bulk load) and reads (reads.py: routing,
the read-your-writes floor). Everything runs on the master's asyncio loop; transaction
log calls go to ``db`` (pool.LogThread).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable, Sequence

from master_service.cluster import replication
from master_service.cluster.images import Images
from master_service.cluster.local_ordering import LocalOrdering
from master_service.cluster.pool import Counters, LogThread, Worker, WorkerPool
from master_service.cluster.reads import Reads
from master_service.cluster.recovery import Recovery
from master_service.cluster.write_path import MAX_GROUP, Ordering, Outcome, WritePath

log = logging.getLogger("txcluster.master")

__all__ = ["MAX_GROUP", "Cluster", "Counters", "LogThread", "Ordering", "Outcome", "Worker"]


class Cluster(WorkerPool):
    """The worker pool and its parts (module docstring). Client writes go through the
    local ordering (group commit) unless ``order_by`` chose another before ``start``."""

    def __init__(self, *, node_id: str, txlog, secret: bytes, worker_urls: list[str],
                 params: replication.Parameters, control_queries: list[str],
                 protect_single_worker: bool = True, read_only: bool = False,
                 mode: str = "NORMAL", consistency: str = "read-your-writes",
                 request_timeout: float = 30.0,
                 log_limits: tuple[int, float] = (100_000, 168.0),
                 on_workers_changed: Callable[[list[str]], None] | None = None,
                 tls: ssl.SSLContext | None = None, db: LogThread | None = None) -> None:
        super().__init__(node_id=node_id, txlog=txlog, secret=secret, params=params,
                         control_queries=control_queries,
                         protect_single_worker=protect_single_worker, read_only=read_only,
                         mode=mode, consistency=consistency, request_timeout=request_timeout,
                         log_limits=log_limits, on_workers_changed=on_workers_changed,
                         tls=tls, db=db)
        self._initial = list(worker_urls)
        self.writes = WritePath(self)
        self.recovery = Recovery(self, self.writes)
        self.images = Images(self, self.writes, self.recovery)
        self.reads = Reads(self)
        self._local = LocalOrdering(self, self.writes)
        self._ordering: Ordering = self._local

    # ---- lifecycle ----

    async def order_by(self, ordering: Ordering) -> None:
        """Client writes go through ``ordering`` from now on (chosen once, at start)."""
        self._ordering = ordering
        if self.writes.ordering is not None:  # started: the write path switches now
            await self.writes.order_by(ordering)

    async def start(self) -> None:
        head = await self.db(self.txlog.head)
        self.log_history = await self.db(self.txlog.has_history)
        self.set_head(head.seq, head.fingerprint, head.quads)
        for url in self._initial:
            self._attach(url, readable=True)
        await self.writes.order_by(self._ordering)
        await self.recovery.start()
        await self.writes.start()
        await self.recovery.started()

    async def stop(self) -> None:
        await self.recovery.stop()
        await self.writes.stop()
        for w in self.workers.values():
            await w.client.close()
        self.close_db()

    # ---- worker pool ----

    def _attach(self, url: str, readable: bool) -> Worker:
        w = self.attach(url, readable)
        self.writes.start_forwarder(w)
        return w

    async def add_worker(self, url: str, readable: bool = True) -> Worker:
        url = url.rstrip("/")
        if url in self.workers:
            raise ValueError(f"worker {url} is already part of the cluster")
        w = self._attach(url, readable)
        self.workers_changed()
        await self.recovery.poll(w)
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
        self.workers_changed()

    async def poll_all(self) -> None:
        await self.recovery.poll_all()

    async def poll(self, w: Worker) -> None:
        await self.recovery.poll(w)

    async def prune(self) -> int:
        dropped = await self.db(self.txlog.prune, self.log_max_size, self.log_max_depth_h,
                                time.time())
        if dropped:
            log.info("pruned %d transactions from the log", dropped)
        return dropped

    # ---- writes ----

    async def write(self, operations: list[dict]) -> dict:
        """A client write through the ordering; returns its seq/fingerprint."""
        return await self.writes.write(operations)

    async def execute(self, group: Sequence, record: Callable[[Outcome, float], None], *,
                      admit: Callable[[], str | None], due=None,
                      executed: Callable[[Outcome], None] | None = None) -> Outcome:
        """Execute ``group`` in this order (write_path.WritePath.execute)."""
        return await self.writes.execute(group, record, admit=admit, due=due,
                                         executed=executed)

    @property
    def pending_writes(self) -> int:
        return self.writes.pending

    # ---- reads ----

    def read_floor(self, up_to_date: bool = False) -> int | None:
        return self.reads.read_floor(up_to_date)

    def choose_reader(self, tried: set[str], floor: int | None) -> Worker | None:
        return self.reads.choose_reader(tried, floor)

    async def reader_for(self, tried: set[str], floor: int | None) -> Worker | None:
        return await self.reads.reader_for(tried, floor)

    # ---- images ----

    def bulk_load_problem(self) -> str | None:
        return self.images.bulk_load_problem()

    async def commit_bulk_load(self, url: str, load_id: str, fingerprint: str,
                               quads: int) -> dict:
        return await self.images.commit_bulk_load(url, load_id, fingerprint, quads)

    async def backup(self, name: str) -> dict:
        return await self.images.backup(name)

    async def rollback(self, name: str, forget_after: Callable[[int], None]) -> dict:
        return await self.images.rollback(name, forget_after)

    async def restore(self, name: str) -> dict:
        return await self.images.restore(name)
